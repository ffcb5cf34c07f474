"""MX training: ``fake_quantize`` and the MX ``dot_general`` with its VJP.

:func:`dot_general` is ``lax.dot_general`` with MX operands in all three
GEMMs of a training step (a ``custom_vjp``):

* forward ``y = x . w``: ``x`` and ``w`` blocked along the contracting dims;
* input gradient ``dx = dy . w``: ``dy`` blocked along the output dims that
  came from ``w`` (its free dims) and ``w`` along those same free dims;
* weight gradient ``dw = x . dy``: ``x`` blocked along its free dims and
  ``dy`` along the output dims that came from ``x``.

Every GEMM quantizes its own operands along *its own* contracting dims, from
the high-precision residuals ``x`` and ``w`` kept by the forward (as
torchao's MXFP8 linear does): a tensor blocked along one axis can't be
re-blocked along another without going back to its values, and re-quantizing
the dequantized forward operand would round twice. How one GEMM quantizes
and multiplies is :mod:`jaxfp8._src.mx.gemm`; which format each GEMM uses,
an :class:`~jaxfp8._src.mx.recipes.MXRecipe`. The op itself is the
recipe core's (:mod:`jaxfp8._src.recipes.core`): this module reads an
MXRecipe into the core's :class:`~jaxfp8._src.recipes.spec.Recipe`
(:func:`jaxfp8._src.recipes.registry.from_mx`) and checks its arguments
as it always has.

:func:`fake_quantize` is quantization-aware training's other tool: the
values an MX format holds, with a straight-through gradient.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.mx import array as mx_lib
from jaxfp8._src.mx import gemm as gemm_lib
from jaxfp8._src.mx import recipes
from jaxfp8._src.numerics import validate
from jaxfp8._src.numerics.host import device_array
from jaxfp8._src.recipes import core
from jaxfp8._src.recipes import registry


# -- fake quantization ---------------------------------------------------------

def fake_quantize(x: Any, fmt: Any, *, block_size: int | None = None,
                  axis: int = -1, scale_mode: str = "floor",
                  rounding: str = "nearest", key: jax.Array | None = None,
                  pad: bool = False) -> jax.Array:
  """``quantize(x, ...).dequantize()`` in ``x``'s dtype, straight-through.

  For quantization-aware training: the forward value is exactly what the MX
  format holds; the gradient is the identity (a ``custom_vjp``, so it also
  crosses ``jit``, ``scan`` and ``remat`` boundaries), saturated elements
  included, as ``jaxfp8.cast`` does.

  Args:
    x: a real array (bfloat16/float16 results are rounded from float32).
    fmt, block_size, axis, scale_mode, rounding, key, pad: as for
      :func:`jaxfp8.mx.quantize`.

  Returns:
    An array of ``x``'s shape and dtype (float32 for non-float ``x``).

  >>> import jax, jax.numpy as jnp
  >>> x = jnp.array([960.0, 3.0, -1.0, 0.0] * 8)
  >>> fake_quantize(x, "mxfp8_e4m3")[:2]
  Array([896.,   3.], dtype=float32)
  >>> jax.grad(lambda v: fake_quantize(v, "mxfp4").sum())(x)[:2]
  Array([1., 1.], dtype=float32)
  """
  x32 = gemm_lib.operand_float32(x, fn="fake_quantize")
  dtype = (x.dtype if hasattr(x, "dtype") and jnp.issubdtype(
      x.dtype, jnp.floating) and not isinstance(x, np.ndarray) else np.float32)
  q = mx_lib.quantize(lax.stop_gradient(x32), fmt, block_size=block_size,
                      axis=axis, scale_mode=scale_mode, rounding=rounding,
                      key=key, pad=pad)
  return _identity_grad(x32, q.dequantize()).astype(dtype)


@jax.custom_vjp
def _identity_grad(x, values):
  del x
  return values


def _identity_grad_fwd(x, values):
  del x
  return values, None


def _identity_grad_bwd(_, g):
  return g, None


_identity_grad.defvjp(_identity_grad_fwd, _identity_grad_bwd)


# -- the MX dot_general --------------------------------------------------------

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
    recipe: an :class:`~jaxfp8._src.mx.recipes.MXRecipe` or a string for
      :func:`~jaxfp8._src.mx.recipes.get_recipe`.
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
  dims = gemm_lib.normalize_dims(dimension_numbers, lhs.ndim, rhs.ndim, fn=fn)
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
