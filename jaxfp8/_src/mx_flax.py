"""Flax around the MX ``dot_general``: modules, one-call conversion, serving.

* linen: :class:`MXDotGeneral` (``nn.Dense(dot_general_cls=...)``) and
  :func:`linen_mx`, a context manager (``nn.intercept_methods``) under which
  an unchanged model's ``Dense`` / ``DenseGeneral`` layers whose module path
  matches the rules multiply with :func:`~jaxfp8._src.mx_train.dot_general`.
* nnx: :class:`NnxMXDotGeneral` (``nnx.Linear(dot_general=...)``) and
  :func:`nnx_mx`, which replaces in place (graph surgery) the ``dot_general``
  of matching ``Linear`` / ``LinearGeneral`` layers and the ``einsum_op`` of
  matching ``Einsum`` layers.
* serving: :func:`quantize_params` packs chosen leaves of a parameter tree
  once into MXArrays (kept packed); :func:`dequantize_params` gives the tree
  the same model applies, inside the jitted forward.

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

from jaxfp8._src import mx as mx_lib
from jaxfp8._src import mx_train

def _check_rules(rules: Any, fn: str) -> list[tuple[re.Pattern, Any]]:
  if rules is None:
    rules = [(".*", "mxfp8")]
  if isinstance(rules, (str, mx_train.MXRecipe)):
    rules = [(".*", rules)]
  out = []
  for rule in rules:
    try:
      pattern, recipe = rule
    except (TypeError, ValueError) as e:
      raise ValueError(f"`rules` argument to `{fn}` must be (regex, recipe) "
                       f"pairs, got {rule!r}") from e
    recipe = None if recipe is None else mx_train.get_recipe(recipe)
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
    recipe: an :class:`~jaxfp8._src.mx_train.MXRecipe` or its string form.
  """
  recipe: Any = "mxfp8"

  @nn.compact
  def __call__(self, lhs, rhs, dimension_numbers, precision=None,
               preferred_element_type=None, **kwargs):
    recipe = mx_train.get_recipe(self.recipe)
    key = self.make_rng("mx") if recipe.stochastic_grad else None
    return mx_train.dot_general(lhs, rhs, dimension_numbers, precision,
                                preferred_element_type, recipe=recipe,
                                key=key, **kwargs)


def _module_path(module: nn.Module) -> str:
  return "/".join(str(p) for p in module.path)


@contextlib.contextmanager
def linen_mx(rules: Any = None) -> Iterator[None]:
  """Runs linen ``Dense`` / ``DenseGeneral`` layers chosen by rules in MX.

  Use around ``model.init`` / ``model.apply`` (also inside a jitted step):
  the model code is unchanged; matching layers call
  :func:`~jaxfp8._src.mx_train.dot_general` with their rule's recipe.

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
        or not isinstance(module, (nn.Dense, nn.DenseGeneral))):
      return next_fun(*args, **kwargs)
    recipe = _match(rules, _module_path(module))
    if recipe is _UNMATCHED or recipe is None:
      return next_fun(*args, **kwargs)
    saved = (module.dot_general, module.dot_general_cls)
    # Frozen dataclass fields, restored at once: only this call sees them.
    object.__setattr__(module, "dot_general_cls", None)
    object.__setattr__(module, "dot_general",
                       functools.partial(mx_train.dot_general, recipe=recipe))
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
  layer, as it keeps ``lax.dot_general``. It holds no state: recipes with
  stochastic gradient rounding need a key per step, which a static attribute
  can't hold, so they are refused here (call
  :func:`~jaxfp8._src.mx_train.dot_general` with ``key=`` instead).

  Attributes:
    recipe: an :class:`~jaxfp8._src.mx_train.MXRecipe` or its string form.
  """
  recipe: Any = "mxfp8"

  def __post_init__(self):
    recipe = mx_train.get_recipe(self.recipe)
    if recipe.stochastic_grad:
      raise ValueError("`NnxMXDotGeneral` can't hold the per-step key that a "
                       "stochastic_grad recipe needs; call mx.dot_general "
                       "with key= in the model instead")
    object.__setattr__(self, "recipe", recipe)

  def __call__(self, lhs, rhs, dimension_numbers, precision=None,
               preferred_element_type=None, **kwargs):
    return mx_train.dot_general(lhs, rhs, dimension_numbers, precision,
                                preferred_element_type, recipe=self.recipe,
                                **kwargs)


def nnx_mx(model: Any, rules: Any = None) -> Any:
  """Turns an nnx model's layers chosen by rules into MX-trained ones, in place.

  ``Linear`` and ``LinearGeneral`` get ``dot_general=NnxMXDotGeneral(recipe)``;
  ``Einsum`` gets an ``einsum_op`` that multiplies with the MX
  ``dot_general``. Paths are the attribute paths joined by ``/``.

  Args:
    model: an ``nnx.Module``.
    rules: as for :func:`linen_mx`.

  Returns:
    ``model`` (changed in place), for chaining.

  >>> from flax import nnx
  >>> m = nnx_mx(nnx.Linear(32, 4, rngs=nnx.Rngs(0)), "mxfp8_hp_wgrad")
  >>> m.dot_general.recipe.wgrad is None
  True
  """
  rules = _check_rules(rules, "nnx_mx")
  for path, module in list(nnx.iter_graph(model)):
    if not isinstance(module, (nnx.Linear, nnx.LinearGeneral, nnx.Einsum)):
      continue
    recipe = _match(rules, "/".join(str(p) for p in path))
    if recipe is _UNMATCHED or recipe is None:
      continue
    if isinstance(module, nnx.Einsum):
      module.einsum_op = functools.partial(
          jnp.einsum, _dot_general=NnxMXDotGeneral(recipe))
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
    The tree with MXArray leaves (``jax.tree_util`` treats an MXArray as a
    node, so use :func:`dequantize_params` before applying a model).

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


def _is_mx(x: Any) -> bool:
  return isinstance(x, mx_lib.MXArray)


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
