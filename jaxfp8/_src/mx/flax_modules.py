"""Flax around the MX ``dot_general``: modules, one-call conversion, serving.

* linen: :class:`MXDotGeneral` (``nn.Dense(dot_general_cls=...)``) and
  :func:`linen_mx`, a context manager (``nn.intercept_methods``) under which
  an unchanged model's ``Dense`` / ``DenseGeneral`` / ``Einsum`` layers whose
  module path matches the rules multiply with
  :func:`~jaxfp8._src.mx.train.dot_general` (``Einsum`` through
  ``jnp.einsum``'s dot_general hook, see :func:`jaxfp8._src.compat.einsum`).
* nnx: :class:`NnxMXDotGeneral` (``nnx.Linear(dot_general=...)``),
  :class:`NnxStochasticMXDotGeneral` (the same drawing a fresh key per call
  from an ``nnx.Rngs`` stream, for stochastic gradient rounding) and
  :func:`nnx_mx`, which replaces in place (graph surgery) the ``dot_general``
  of matching ``Linear`` / ``LinearGeneral`` layers and the ``einsum_op`` of
  matching ``Einsum`` layers.
* serving: :func:`quantize_params` packs chosen leaves of a parameter tree
  once into MXArrays (kept packed). Under :func:`linen_mx` (or after
  :func:`nnx_mx`) the same model applies straight from the packed tree: each
  layer whose kernel is an MXArray multiplies it with the MX ``dot_general``
  (weight-only, or dynamic MX activations by its rule), so the backend choice
  applies. :func:`dequantize_params` gives the plain tree instead.

Rules are ``(regex, recipe)`` pairs, matched in order with ``re.search``
against the module path joined by ``/`` (``"Dense_0"``, ``"block/attn"``);
the first match decides, a recipe of None leaves the layer in high
precision, and a path no rule matches stays as it is.

This is the one module of the MX training code that imports Flax; ``jaxfp8.mx``
loads it on first use of one of these names.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from typing import Any, Iterator

from flax import linen as nn
from flax import nnx
import jax
import jax.numpy as jnp

from jaxfp8._src import compat
from jaxfp8._src.mx import array as mx_lib
from jaxfp8._src.mx import recipes
from jaxfp8._src.mx import train as mx_train

# A packed kernel under a rule of None (or none): the activations as given.
_WEIGHT_ONLY = recipes.MXRecipe(fwd=None, dgrad=None, wgrad=None)


def _check_rules(rules: Any, fn: str) -> list[tuple[re.Pattern, Any]]:
  if rules is None:
    rules = [(".*", "mxfp8")]
  if isinstance(rules, (str, recipes.MXRecipe)):
    rules = [(".*", rules)]
  out = []
  for rule in rules:
    try:
      pattern, recipe = rule
    except (TypeError, ValueError) as e:
      raise ValueError(f"`rules` argument to `{fn}` must be (regex, recipe) "
                       f"pairs, got {rule!r}") from e
    recipe = None if recipe is None else recipes.get_recipe(recipe)
    out.append((re.compile(pattern), recipe))
  return out


_UNMATCHED = object()


def _match(rules, path: str) -> Any:
  for pattern, recipe in rules:
    if pattern.search(path):
      return recipe
  return _UNMATCHED


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


def _is_mx(x: Any) -> bool:
  return isinstance(x, mx_lib.MXArray)


def _packed_kernel(module: nn.Module) -> mx_lib.MXArray | None:
  """The layer's kernel if the params it applies from hold it packed."""
  if module.scope is None or not module.has_variable("params", "kernel"):
    return None
  kernel = module.get_variable("params", "kernel")
  return kernel if _is_mx(kernel) else None


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
  :func:`quantize_params`) multiplies it as packed, with its rule's recipe
  quantizing the activations (dynamic MX activations) or, under a rule of
  None or no rule, with the activations as they are (weight-only).

  Args:
    rules: ``(regex, recipe)`` pairs (see the module docstring), one recipe
      for every layer, or None for ``"mxfp8"`` everywhere.

  >>> import jax, jax.numpy as jnp
  >>> from flax import linen as nn
  >>> model = nn.Dense(4)
  >>> params = model.init(jax.random.key(0), jnp.ones((2, 32)))
  >>> with linen_mx([("Dense", "mxfp4")]):
  ...   y = model.apply(params, jnp.ones((2, 32)))
  >>> y.shape
  (2, 4)
  """
  rules = _check_rules(rules, "linen_mx")

  def interceptor(next_fun, args, kwargs, context):
    module = context.module
    if (context.method_name != "__call__"
        or not isinstance(module, _LINEN_LAYERS)):
      return next_fun(*args, **kwargs)
    recipe = _match(rules, _module_path(module))
    packed = _packed_kernel(module)
    if packed is not None:
      if recipe is _UNMATCHED or recipe is None:
        recipe = _WEIGHT_ONLY
      dot = functools.partial(mx_train.dot_general, recipe=recipe)
      if isinstance(module, nn.Einsum):
        return _linen_einsum(module, dot, *args, kernel=packed, **kwargs)
      return _serve_dense(module, packed, dot, *args, **kwargs)
    if recipe is _UNMATCHED or recipe is None:
      return next_fun(*args, **kwargs)
    dot = functools.partial(mx_train.dot_general, recipe=recipe)
    if isinstance(module, nn.Einsum):
      return _linen_einsum(module, dot, *args, **kwargs)
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


@dataclasses.dataclass(frozen=True)
class NnxMXDotGeneral:
  """The MX ``dot_general`` for nnx: ``nnx.Linear(..., dot_general=
  NnxMXDotGeneral("mxfp8"))``.

  A frozen (hashable) callable, so nnx keeps it as a static attribute of the
  layer, as it keeps ``lax.dot_general``. It holds no state, so it refuses
  recipes with stochastic gradient rounding, which need a fresh key per
  step: use :class:`NnxStochasticMXDotGeneral` for those.

  Attributes:
    recipe: an :class:`~jaxfp8._src.mx.recipes.MXRecipe` or its string form.
  """
  recipe: Any = "mxfp8"

  def __post_init__(self):
    recipe = recipes.get_recipe(self.recipe)
    if recipe.stochastic_grad:
      raise ValueError("`NnxMXDotGeneral` can't hold the per-step key that a "
                       "stochastic_grad recipe needs; use "
                       "NnxStochasticMXDotGeneral(recipe, rngs=...) instead")
    object.__setattr__(self, "recipe", recipe)

  def __call__(self, lhs, rhs, dimension_numbers, precision=None,
               preferred_element_type=None, **kwargs):
    return mx_train.dot_general(lhs, rhs, dimension_numbers, precision,
                                preferred_element_type, recipe=self.recipe,
                                **kwargs)


class NnxStochasticMXDotGeneral(nnx.Module):
  """The MX ``dot_general`` for nnx with a fresh rounding key per call.

  An ``nnx.Module`` holding the ``nnx.Rngs`` it draws from (its ``mx``
  stream, else ``default``): each call takes the stream's next key, so
  successive training steps round their gradients with different keys, and
  the same seed reproduces them (the stream's count is state that
  ``nnx.jit`` carries between steps).

  Args:
    recipe: an :class:`~jaxfp8._src.mx.recipes.MXRecipe` or its string form
      (usually with ``stochastic_grad=True``).
    rngs: an ``nnx.Rngs`` (shared with the model, or its own).

  >>> from flax import nnx
  >>> dot = NnxStochasticMXDotGeneral("sr=1", rngs=nnx.Rngs(mx=0))
  >>> layer = nnx.Linear(32, 4, dot_general=dot, rngs=nnx.Rngs(0))
  >>> layer(jnp.ones((2, 32))).shape
  (2, 4)
  """

  def __init__(self, recipe: Any = "mxfp8", *, rngs: nnx.Rngs):
    if not isinstance(rngs, nnx.Rngs):
      raise TypeError(f"`rngs` argument to `NnxStochasticMXDotGeneral` must "
                      f"be an nnx.Rngs, got {type(rngs).__name__}")
    self.recipe = recipes.get_recipe(recipe)
    self.rngs = rngs

  def next_key(self) -> jax.Array | None:
    """The next key of the stream (None for a recipe that needs none)."""
    return self.rngs.mx() if self.recipe.stochastic_grad else None

  def __call__(self, lhs, rhs, dimension_numbers, precision=None,
               preferred_element_type=None, **kwargs):
    return mx_train.dot_general(lhs, rhs, dimension_numbers, precision,
                                preferred_element_type, recipe=self.recipe,
                                key=self.next_key(), **kwargs)


def _einsum_dot(subscripts, lhs, rhs, *, dot_general, precision=None,
                preferred_element_type=None, out_sharding=None):
  """An nnx ``einsum_op``: contractions through ``dot_general``; a packed
  kernel is dequantized (``jnp.einsum`` takes arrays only)."""
  lhs, rhs = (x.dequantize() if _is_mx(x) else x for x in (lhs, rhs))
  return compat.einsum(subscripts, lhs, rhs, dot_general=dot_general,
                       precision=precision,
                       preferred_element_type=preferred_element_type,
                       out_sharding=out_sharding)


class _StochasticEinsumOp(nnx.Module):
  """An nnx ``einsum_op`` drawing each call's key from a stochastic dot."""

  def __init__(self, dot: NnxStochasticMXDotGeneral):
    self.dot = dot

  def __call__(self, subscripts, lhs, rhs, **kwargs):
    dot = functools.partial(mx_train.dot_general, recipe=self.dot.recipe,
                            key=self.dot.next_key())
    return _einsum_dot(subscripts, lhs, rhs, dot_general=dot, **kwargs)


@dataclasses.dataclass(frozen=True)
class _KeepMX:
  """An nnx ``promote_dtype`` that passes packed kernels through as they are
  and promotes the other arrays with the layer's own function."""
  promote: Any

  def __call__(self, arrays, dtype=None, **kwargs):
    plain = self.promote(tuple(x for x in arrays if not _is_mx(x)),
                         dtype=dtype, **kwargs)
    it = iter(plain)
    return tuple(x if _is_mx(x) else next(it) for x in arrays)


def nnx_mx(model: Any, rules: Any = None, *,
           rngs: nnx.Rngs | None = None) -> Any:
  """Turns an nnx model's layers chosen by rules into MX-trained ones, in place.

  ``Linear`` and ``LinearGeneral`` get ``dot_general=NnxMXDotGeneral(recipe)``
  (:class:`NnxStochasticMXDotGeneral` for a ``stochastic_grad`` recipe);
  ``Einsum`` gets an ``einsum_op`` that multiplies with the MX
  ``dot_general``. A layer whose kernel is an MXArray (a model merged from a
  packed state, see :func:`quantize_params`) multiplies it as packed, with
  its rule's recipe for the activations, or weight-only under a rule of None
  or no rule. Paths are the attribute paths joined by ``/``.

  Args:
    model: an ``nnx.Module``.
    rules: as for :func:`linen_mx`.
    rngs: an ``nnx.Rngs`` for stochastic gradient rounding (needed when a
      matching recipe has ``stochastic_grad``): a fresh key each call.

  Returns:
    ``model`` (changed in place), for chaining.

  >>> from flax import nnx
  >>> m = nnx_mx(nnx.Linear(32, 4, rngs=nnx.Rngs(0)), "mxfp8_hp_wgrad")
  >>> m.dot_general.recipe.wgrad is None
  True
  """
  fn = "nnx_mx"
  rules = _check_rules(rules, fn)
  if rngs is not None and not isinstance(rngs, nnx.Rngs):
    raise TypeError(f"`rngs` argument to `{fn}` must be None or an nnx.Rngs, "
                    f"got {type(rngs).__name__}")
  for path, module in list(nnx.iter_graph(model)):
    if not isinstance(module, (nnx.Linear, nnx.LinearGeneral, nnx.Einsum)):
      continue
    recipe = _match(rules, "/".join(str(p) for p in path))
    packed = _is_mx(module.kernel.get_value())
    if packed and (recipe is _UNMATCHED or recipe is None):
      recipe = _WEIGHT_ONLY
    if recipe is _UNMATCHED or recipe is None:
      continue
    if packed:
      module.promote_dtype = _KeepMX(module.promote_dtype)
    if recipe.stochastic_grad:
      if rngs is None:
        raise ValueError(f"`{fn}`: the recipe of {'/'.join(map(str, path))!r} "
                         "rounds gradients stochastically and needs a key per "
                         "step; pass rngs=nnx.Rngs(...)")
      dot = NnxStochasticMXDotGeneral(recipe, rngs=rngs)
      # A module with state where the layer had a static function: nnx
      # needs the change of status said out loud.
      if isinstance(module, nnx.Einsum):
        module.einsum_op = nnx.data(_StochasticEinsumOp(dot))
      else:
        module.dot_general = nnx.data(dot)
    elif isinstance(module, nnx.Einsum):
      module.einsum_op = functools.partial(
          _einsum_dot, dot_general=NnxMXDotGeneral(recipe))
    else:
      module.dot_general = NnxMXDotGeneral(recipe)
  return model


# -- serving from packed weights -----------------------------------------------

def _leaf_path(path) -> str:
  parts = []
  for p in path:
    parts.append(str(getattr(p, "key", getattr(p, "name", getattr(
        p, "idx", p)))))
  return "/".join(parts)


def quantize_params(params: Any, rules: Any, *, axis: int = 0,
                    scale_mode: str = "rceil") -> Any:
  """Packs the leaves of a parameter tree chosen by rules into MXArrays.

  Args:
    params: a pytree of arrays (linen ``params``, an nnx ``State``).
    rules: ``(regex, format)`` pairs matched against each leaf's path (keys
      joined by ``/``, e.g. ``"Dense_0/kernel"``); the first match decides,
      None or no match keeps the leaf as it is. A plain format name packs
      every leaf whose path ends in ``kernel`` with at least 2 dims.
    axis: the blocked axis of each packed leaf (0: a Dense kernel's
      contracting axis). Lengths not a multiple of the block are padded.
    scale_mode: the scale mode (``"rceil"``: never saturates).

  Returns:
    The tree with MXArray leaves: apply the model from it under
    :func:`linen_mx` (linen) or after :func:`nnx_mx` on the merged model
    (nnx), or from :func:`dequantize_params` of it.

  >>> import jax.numpy as jnp
  >>> q = quantize_params({"Dense_0": {"kernel": jnp.ones((64, 8))}}, "mxfp4")
  >>> q["Dense_0"]["kernel"].nbytes
  272
  """
  if isinstance(rules, str):
    rules = [(r"(^|/)kernel(/value)?$", rules)]
  compiled = [(re.compile(p), f) for p, f in rules]

  def pack(path, leaf):
    name = _leaf_path(path)
    for pattern, fmt in compiled:
      if pattern.search(name):
        if fmt is None or getattr(leaf, "ndim", 0) < 2:
          return leaf
        return mx_lib.quantize(leaf, fmt, axis=axis, scale_mode=scale_mode,
                               pad=True)
    return leaf

  return jax.tree_util.tree_map_with_path(pack, params)


def dequantize_params(params: Any, dtype: Any = jnp.float32) -> Any:
  """The tree with each MXArray leaf dequantized (exactly) to ``dtype``.

  Call it inside the jitted forward: the packed tree is what is held in
  memory between calls, and the wide kernels live only during the call.
  """
  return jax.tree_util.tree_map(
      lambda x: x.dequantize(dtype) if _is_mx(x) else x, params, is_leaf=_is_mx)


def packed_bytes(params: Any) -> int:
  """Bytes held by a tree's leaves, MXArrays counted packed."""
  leaves = jax.tree_util.tree_leaves(params, is_leaf=_is_mx)
  return sum(x.nbytes if _is_mx(x) else x.size * x.dtype.itemsize
             for x in leaves)
