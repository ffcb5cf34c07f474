"""Flax nnx around the MX ``dot_general``: dot_general objects and conversion.

* :class:`NnxMXDotGeneral`: the MX ``dot_general`` for
  ``nnx.Linear(dot_general=...)``.
* :class:`NnxStochasticMXDotGeneral`: the same drawing a fresh key per call
  from an ``nnx.Rngs`` stream, for stochastic gradient rounding.
* :func:`nnx_mx`: replaces in place (graph surgery) the ``dot_general`` of
  ``Linear`` / ``LinearGeneral`` layers and the ``einsum_op`` of ``Einsum``
  layers whose attribute path matches the rules
  (:mod:`jaxfp8._src.mx.recipes`); layers whose kernel is packed
  (:mod:`jaxfp8._src.mx.serving`) multiply it as packed.

An integration module: it imports Flax, and ``jaxfp8.mx`` loads it on first
use of one of these names.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

from flax import nnx
import jax

from jaxfp8._src import compat
from jaxfp8._src.mx import recipes
from jaxfp8._src.mx import serving
from jaxfp8._src.mx import train as mx_train


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

  >>> import jax.numpy as jnp
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
  lhs, rhs = (x.dequantize() if serving.is_packed(x) else x
              for x in (lhs, rhs))
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
    plain = self.promote(tuple(x for x in arrays if not serving.is_packed(x)),
                         dtype=dtype, **kwargs)
    it = iter(plain)
    return tuple(x if serving.is_packed(x) else next(it) for x in arrays)


def nnx_mx(model: Any, rules: Any = None, *,
           rngs: nnx.Rngs | None = None) -> Any:
  """Turns an nnx model's layers chosen by rules into MX-trained ones, in place.

  ``Linear`` and ``LinearGeneral`` get ``dot_general=NnxMXDotGeneral(recipe)``
  (:class:`NnxStochasticMXDotGeneral` for a ``stochastic_grad`` recipe);
  ``Einsum`` gets an ``einsum_op`` that multiplies with the MX
  ``dot_general``. A layer whose kernel is an MXArray (a model merged from a
  packed state, see :func:`~jaxfp8._src.mx.serving.quantize_params`)
  multiplies it as packed, with its rule's recipe for the activations, or
  weight-only under a rule of None or no rule. Paths are the attribute paths
  joined by ``/``.

  Args:
    model: an ``nnx.Module``.
    rules: ``(regex, recipe)`` pairs (see :mod:`jaxfp8._src.mx.recipes`),
      one recipe for every layer, or None for ``"mxfp8"`` everywhere.
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
  rules = recipes.check_rules(rules, fn=fn)
  if rngs is not None and not isinstance(rngs, nnx.Rngs):
    raise TypeError(f"`rngs` argument to `{fn}` must be None or an nnx.Rngs, "
                    f"got {type(rngs).__name__}")
  for path, module in list(nnx.iter_graph(model)):
    if not isinstance(module, (nnx.Linear, nnx.LinearGeneral, nnx.Einsum)):
      continue
    packed = serving.is_packed(module.kernel.get_value())
    recipe = recipes.layer_recipe(rules, "/".join(str(p) for p in path),
                                  packed=packed)
    if recipe is None:
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
