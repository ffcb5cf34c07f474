"""Flax linen around the MX ``dot_general``: a module and one-call conversion.

* :class:`MXDotGeneral`: the MX ``dot_general`` as a linen module, for
  ``nn.Dense(dot_general_cls=...)``.
* :func:`linen_mx`: a context manager (``nn.intercept_methods``) under which
  an unchanged model's ``Dense`` / ``DenseGeneral`` / ``Einsum`` layers whose
  module path matches the rules (:mod:`jaxfp8._src.mx.recipes`) multiply
  with :func:`~jaxfp8._src.mx.train.dot_general` (``Einsum`` through
  ``jnp.einsum``'s dot_general hook, see :func:`jaxfp8._src.compat.einsum`),
  and layers whose kernel is packed (:mod:`jaxfp8._src.mx.serving`)
  multiply it as packed.

An integration module: it imports Flax, and ``jaxfp8.mx`` loads it on first
use of one of these names.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

from flax import linen as nn
import jax.numpy as jnp

from jaxfp8._src import compat
from jaxfp8._src.mx import array as mx_lib
from jaxfp8._src.mx import recipes
from jaxfp8._src.mx import serving
from jaxfp8._src.mx import train as mx_train


class MXDotGeneral(nn.Module):
  """The MX ``dot_general`` as a linen module: ``nn.Dense(dot_general_cls=
  functools.partial(MXDotGeneral, recipe=...))``.

  Stochastic rounding of gradients draws its key from the ``"mx"`` rng
  stream (``model.apply(..., rngs={"mx": key})``).

  Attributes:
    recipe: an :class:`~jaxfp8._src.mx.recipes.MXRecipe` or its string form.
  """
  recipe: Any = "mxfp8"

  @nn.compact
  def __call__(self, lhs, rhs, dimension_numbers, precision=None,
               preferred_element_type=None, **kwargs):
    recipe = recipes.get_recipe(self.recipe)
    key = self.make_rng("mx") if recipe.stochastic_grad else None
    return mx_train.dot_general(lhs, rhs, dimension_numbers, precision,
                                preferred_element_type, recipe=recipe,
                                key=key, **kwargs)


def _module_path(module: nn.Module) -> str:
  return "/".join(str(p) for p in module.path)


def _packed_kernel(module: nn.Module) -> mx_lib.MXArray | None:
  """The layer's kernel if the params it applies from hold it packed."""
  if module.scope is None or not module.has_variable("params", "kernel"):
    return None
  kernel = module.get_variable("params", "kernel")
  return kernel if serving.is_packed(kernel) else None


def _axes(x: Any) -> tuple[int, ...]:
  return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _serve_dense(module: nn.Module, kernel: mx_lib.MXArray, dot, inputs):
  """``Dense`` / ``DenseGeneral.__call__`` with a packed kernel: the same
  dims and bias, the kernel read as stored (no shape check of the packed
  leaves against an unpacked init)."""
  inputs = jnp.asarray(inputs)
  bias = (module.get_variable("params", "bias")
          if module.use_bias else None)
  inputs, bias = module.promote_dtype(inputs, bias, dtype=module.dtype)
  if isinstance(module, nn.Dense):
    y = dot(inputs, kernel, (((inputs.ndim - 1,), (0,)), ((), ())))
    return y if bias is None else y + jnp.reshape(
        bias, (1,) * (y.ndim - 1) + (-1,))
  ndim = inputs.ndim
  axis = tuple(a % ndim for a in _axes(module.axis))
  batch = tuple(a % ndim for a in _axes(module.batch_dims))
  features = _axes(module.features)
  contract = tuple(range(len(batch), len(batch) + len(axis)))
  y = dot(inputs, kernel, ((axis, contract), (batch, tuple(range(len(
      batch))))))
  if bias is None:
    return y
  expanded = tuple(inputs.shape[a] if a in batch else 1
                   for a in range(ndim) if a not in axis)
  return y + jnp.reshape(bias, expanded + features)


def _linen_einsum(module: nn.Einsum, dot, inputs, einsum_str=None, *,
                  kernel=None):
  """linen ``Einsum.__call__`` with its contraction through ``dot`` (linen's
  calls ``jnp.einsum`` with no dot_general hook); ``kernel``: a packed
  kernel, dequantized (``jnp.einsum`` takes arrays only)."""
  einsum_str = nn.merge_param("einsum_str", module.einsum_str,
                              einsum_str).replace(" ", "")
  if kernel is None:
    kernel = module.param("kernel", module.kernel_init, module.shape,
                          module.param_dtype)
  else:
    kernel = kernel.dequantize()
  bias = None
  if module.use_bias:
    bias_shape, broadcast = compat.linen_einsum_bias_shape(
        module, einsum_str, inputs, kernel)
    bias = module.param("bias", module.bias_init, bias_shape,
                        module.param_dtype)
  inputs, kernel, bias = module.promote_dtype(inputs, kernel, bias,
                                              dtype=module.dtype)
  y = compat.einsum(einsum_str, inputs, kernel, dot_general=dot,
                    precision=module.precision,
                    preferred_element_type=module.preferred_element_type)
  return y if bias is None else y + jnp.reshape(bias, broadcast)


_LINEN_LAYERS = (nn.Dense, nn.DenseGeneral, nn.Einsum)


@contextlib.contextmanager
def linen_mx(rules: Any = None) -> Iterator[None]:
  """Runs linen ``Dense`` / ``DenseGeneral`` / ``Einsum`` layers chosen by
  rules in MX, and applies a model from packed weights.

  Use around ``model.init`` / ``model.apply`` (also inside a jitted step):
  the model code is unchanged; matching layers call
  :func:`~jaxfp8._src.mx.train.dot_general` with their rule's recipe. A
  layer whose kernel in the applied params is an MXArray (from
  :func:`~jaxfp8._src.mx.serving.quantize_params`) multiplies it as packed,
  with its rule's recipe quantizing the activations (dynamic MX activations)
  or, under a rule of None or no rule, with the activations as they are
  (weight-only).

  Args:
    rules: ``(regex, recipe)`` pairs (see :mod:`jaxfp8._src.mx.recipes`),
      one recipe for every layer, or None for ``"mxfp8"`` everywhere.

  >>> import jax, jax.numpy as jnp
  >>> from flax import linen as nn
  >>> model = nn.Dense(4)
  >>> params = model.init(jax.random.key(0), jnp.ones((2, 32)))
  >>> with linen_mx([("Dense", "mxfp4")]):
  ...   y = model.apply(params, jnp.ones((2, 32)))
  >>> y.shape
  (2, 4)
  """
  rules = recipes.check_rules(rules, fn="linen_mx")

  def interceptor(next_fun, args, kwargs, context):
    module = context.module
    if (context.method_name != "__call__"
        or not isinstance(module, _LINEN_LAYERS)):
      return next_fun(*args, **kwargs)
    packed = _packed_kernel(module)
    recipe = recipes.layer_recipe(rules, _module_path(module),
                                  packed=packed is not None)
    if recipe is None:
      return next_fun(*args, **kwargs)
    dot = functools.partial(mx_train.dot_general, recipe=recipe)
    if isinstance(module, nn.Einsum):
      return _linen_einsum(module, dot, *args, kernel=packed, **kwargs)
    if packed is not None:
      return _serve_dense(module, packed, dot, *args, **kwargs)
    saved = (module.dot_general, module.dot_general_cls)
    # Frozen dataclass fields, restored at once: only this call sees them.
    object.__setattr__(module, "dot_general_cls", None)
    object.__setattr__(module, "dot_general", dot)
    try:
      return next_fun(*args, **kwargs)
    finally:
      object.__setattr__(module, "dot_general", saved[0])
      object.__setattr__(module, "dot_general_cls", saved[1])

  with nn.intercept_methods(interceptor):
    yield
