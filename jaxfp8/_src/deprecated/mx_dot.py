"""The MX ``dot_general`` of earlier releases (``jaxfp8.mx.dot_general``).

Deprecated: ``jaxfp8.recipes.dot_general`` runs every recipe, MX ones
included. This is that core with MX recipes
(:class:`~jaxfp8._src.recipes.mx_recipe.MXRecipe`) and the MX face's
argument checks and default result dtype, kept so that code written for it
gives the same numbers for this release.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxfp8._src.numerics import validate
from jaxfp8._src.numerics.host import device_array
from jaxfp8._src.recipes import core
from jaxfp8._src.recipes import mx_gemm as gemm_lib
from jaxfp8._src.recipes import mx_recipe as recipes
from jaxfp8._src.recipes import registry
from jaxfp8._src.mx import array as mx_lib


def dot_general(lhs: Any, rhs: Any, dimension_numbers: Any,
                precision: Any = None, preferred_element_type: Any = None, *,
                recipe: Any = "mxfp8", key: jax.Array | None = None,
                backend: str = "auto", interpret: bool | None = None,
                **kwargs: Any) -> jax.Array:
  """``lax.dot_general`` with MX operands in the forward and both gradients.

  A drop-in ``dot_general`` (Flax's ``nn.Dense(dot_general=...)`` takes
  ``functools.partial(dot_general, recipe=...)``). Forward, input-gradient
  and weight-gradient GEMMs each quantize their own two operands along their
  own contracting dims (see the module docstring) and multiply them exactly
  (exact products, float32 accumulation); gradients are those three products
  (no straight-through approximations beyond the quantization itself).

  ``rhs`` may also be an :class:`~jaxfp8._src.mx.array.MXArray` (packed weights,
  for serving): ``lhs`` is quantized with ``recipe.fwd`` (dynamic MX
  activations; None: weight-only, ``lhs`` as given) and multiplied with the
  packed weight; such a product has no gradient.

  Args:
    lhs, rhs: real arrays (any float dtype; they are rounded from float32).
    dimension_numbers: ``((lhs_contract, rhs_contract), (lhs_batch,
      rhs_batch))`` as ``lax.dot_general`` takes it.
    precision: ignored (the products are exact; accumulation is float32).
    preferred_element_type: the result dtype; default the operands'
      promoted float dtype.
    recipe: an :class:`~jaxfp8._src.recipes.mx_recipe.MXRecipe` or a string for
      :func:`~jaxfp8._src.recipes.mx_recipe.get_recipe`.
    key: a PRNG key, needed with ``recipe.stochastic_grad``.
    backend: how each MX GEMM multiplies: ``"auto"`` (the Mosaic GPU
      ``mx_matmul_mgpu`` on a GPU of compute capability 9.x for mxfp8,
      else ``"dequantize"``), ``"dequantize"`` (exact dequantize, float32
      dot at HIGHEST precision), ``"mosaic"`` (mxfp8 only), ``"triton"``
      (the Triton ``mx_matmul``, mxfp8 only; ``"pallas"`` is its older
      name) or ``"scaled_dot"`` (``lax.scaled_dot``; not fp6).
      High-precision GEMMs always run as a float32 dot.
    interpret: the kernel backends' mode (as ``jaxfp8.ops.mx_matmul`` takes
      it; True runs the kernel in Pallas' interpreter, on CPU too).
    **kwargs: other ``lax.dot_general`` options Flax passes
      (``out_sharding``); ignored.

  Returns:
    ``lax.dot_general``'s result shape, in ``preferred_element_type``.

  Raises:
    NotImplementedError: an explicit ``backend`` that can't take one of the
      recipe's formats.

  >>> import jax, jax.numpy as jnp
  >>> x, w = jnp.ones((4, 64)), jnp.full((64, 8), 0.5)
  >>> dot_general(x, w, (((1,), (0,)), ((), ())))[0, :2]
  Array([32., 32.], dtype=float32)
  >>> dot_general(x, w, (((1,), (0,)), ((), ())), backend="triton",
  ...             interpret=True)[0, :2]
  Array([32., 32.], dtype=float32)
  """
  del precision, kwargs
  fn = "dot_general"
  recipe = recipes.get_recipe(recipe)
  run, preferred_element_type = core.run_options(
      backend, interpret, preferred_element_type, fn=fn)
  if isinstance(rhs, mx_lib.MXArray):
    return gemm_lib.packed_dot(lhs, rhs, dimension_numbers, recipe,
                               preferred_element_type, run)
  core_recipe = registry.from_mx(recipe)
  # An explicit backend that can't run one of the GEMMs fails here.
  core.check_backends(core_recipe, backend, fn=fn)
  validate.check_array(lhs, "lhs", fn)
  validate.check_array(rhs, "rhs", fn)
  lhs, rhs = device_array(lhs), device_array(rhs)
  dims = gemm_lib.check_dims(dimension_numbers, lhs.shape, rhs.shape, fn=fn)
  # Integer operands multiply as float32; gradients come back in each
  # operand's (float) dtype, the result in the promoted one.
  if not jnp.issubdtype(lhs.dtype, jnp.floating):
    lhs = lhs.astype(jnp.float32)
  if not jnp.issubdtype(rhs.dtype, jnp.floating):
    rhs = rhs.astype(jnp.float32)
  out_dtype = (jnp.result_type(lhs.dtype, rhs.dtype)
               if preferred_element_type is None else preferred_element_type)
  if recipe.stochastic_grad:
    if key is None:
      raise ValueError(f"`{fn}` with a recipe of stochastic_grad=True needs "
                       "a `key` argument (a jax.random key)")
    key = validate.check_key(key, fn)
  else:
    key = None
  return core.apply(lhs, rhs, dims, core_recipe, out_dtype=out_dtype, key=key,
                    run=run)
