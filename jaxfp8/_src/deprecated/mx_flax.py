"""The Flax faces of MX training of earlier releases (deprecated).

``jaxfp8.mx.MXDotGeneral`` and ``linen_mx`` (linen), ``NnxMXDotGeneral``,
``NnxStochasticMXDotGeneral`` and ``nnx_mx`` (nnx) are the one Flax face of
the recipes (:mod:`jaxfp8._src.faces.linen`, :mod:`jaxfp8._src.faces.nnx`)
with MX recipes (:class:`~jaxfp8._src.recipes.mx_recipe.MXRecipe`), kept for
this release so that code written for them gives the same numbers. They
still draw their stochastic-rounding keys from the ``"mx"`` rng stream
their users pass; the recipe faces use ``"recipe"``.

An integration module: it imports Flax, and ``jaxfp8.mx`` loads it on first
use of one of these names (with a ``DeprecationWarning``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Iterator

from flax import linen as nn
from flax import nnx
import jax

from jaxfp8._src.deprecated import mx_dot
from jaxfp8._src.faces import linen as recipe_linen
from jaxfp8._src.faces import nnx as recipe_nnx
from jaxfp8._src.recipes import mx_recipe


class MXDotGeneral(nn.Module):
  """The MX ``dot_general`` as a linen module: ``nn.Dense(dot_general_cls=
  functools.partial(MXDotGeneral, recipe=...))``.

  Stochastic rounding of gradients draws its key from the ``"mx"`` rng
  stream (``model.apply(..., rngs={"mx": key})``).

  Attributes:
    recipe: an :class:`~jaxfp8._src.recipes.mx_recipe.MXRecipe` or its string form.
  """
  recipe: Any = "mxfp8"

  @nn.compact
  def __call__(self, lhs, rhs, dimension_numbers, precision=None,
               preferred_element_type=None, **kwargs):
    recipe = mx_recipe.get_recipe(self.recipe)
    key = self.make_rng("mx") if recipe.stochastic_grad else None
    return mx_dot.dot_general(lhs, rhs, dimension_numbers, precision,
                                preferred_element_type, recipe=recipe,
                                key=key, **kwargs)


@contextlib.contextmanager
def linen_mx(rules: Any = None) -> Iterator[None]:
  """Runs linen ``Dense`` / ``DenseGeneral`` / ``Einsum`` layers chosen by
  rules in MX, and applies a model from packed weights.

  Use around ``model.init`` / ``model.apply`` (also inside a jitted step):
  the model code is unchanged; matching layers call
  :func:`~jaxfp8._src.deprecated.mx_dot.dot_general` with their rule's recipe. A
  layer whose kernel in the applied params is an MXArray (from
  :func:`~jaxfp8._src.mx.serving.quantize_params`) multiplies it as packed,
  with its rule's recipe quantizing the activations (dynamic MX activations)
  or, under a rule of None or no rule, with the activations as they are
  (weight-only).

  Args:
    rules: ``(regex, recipe)`` pairs (see :mod:`jaxfp8._src.recipes.mx_recipe`),
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
  rules = mx_recipe.check_rules(rules, fn="linen_mx")

  def dot_for(module, path, packed):
    del module
    recipe = mx_recipe.layer_recipe(rules, path, packed=packed is not None)
    if recipe is None:
      return None
    return functools.partial(mx_dot.dot_general, recipe=recipe)

  with recipe_linen.intercept_layers(dot_for):
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
    recipe: an :class:`~jaxfp8._src.recipes.mx_recipe.MXRecipe` or its string form.
  """
  recipe: Any = "mxfp8"

  def __post_init__(self):
    recipe = mx_recipe.get_recipe(self.recipe)
    if recipe.stochastic_grad:
      raise ValueError("`NnxMXDotGeneral` can't hold the per-step key that a "
                       "stochastic_grad recipe needs; use "
                       "NnxStochasticMXDotGeneral(recipe, rngs=...) instead")
    object.__setattr__(self, "recipe", recipe)

  def __call__(self, lhs, rhs, dimension_numbers, precision=None,
               preferred_element_type=None, **kwargs):
    return mx_dot.dot_general(lhs, rhs, dimension_numbers, precision,
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
    recipe: an :class:`~jaxfp8._src.recipes.mx_recipe.MXRecipe` or its string form
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
    self.recipe = mx_recipe.get_recipe(recipe)
    self.rngs = rngs

  def next_key(self) -> jax.Array | None:
    """The next key of the stream (None for a recipe that needs none)."""
    return self.rngs.mx() if self.recipe.stochastic_grad else None

  def for_call(self) -> Any:
    """The plain MX ``dot_general`` of one call, the next key bound."""
    return functools.partial(mx_dot.dot_general, recipe=self.recipe,
                             key=self.next_key())

  def __call__(self, lhs, rhs, dimension_numbers, precision=None,
               preferred_element_type=None, **kwargs):
    return self.for_call()(lhs, rhs, dimension_numbers, precision,
                           preferred_element_type, **kwargs)


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
    rules: ``(regex, recipe)`` pairs (see :mod:`jaxfp8._src.recipes.mx_recipe`),
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
  rules = mx_recipe.check_rules(rules, fn=fn)
  if rngs is not None and not isinstance(rngs, nnx.Rngs):
    raise TypeError(f"`rngs` argument to `{fn}` must be None or an nnx.Rngs, "
                    f"got {type(rngs).__name__}")

  def dot_for(path, packed):
    recipe = mx_recipe.layer_recipe(rules, path, packed=packed)
    if recipe is None:
      return None
    if not recipe.stochastic_grad:
      return NnxMXDotGeneral(recipe)
    if rngs is None:
      raise ValueError(f"`{fn}`: the recipe of {path!r} rounds gradients "
                       "stochastically and needs a key per step; pass "
                       "rngs=nnx.Rngs(...)")
    return NnxStochasticMXDotGeneral(recipe, rngs=rngs)

  return recipe_nnx.replace_layers(model, dot_for)
