"""Flax nnx around the recipe core: a dot_general module and conversion.

* :class:`NnxRecipeDotGeneral`: the core ``dot_general``
  (:func:`jaxfp8._src.recipes.core.dot_general`) with any recipe, for
  ``nnx.Linear(dot_general=NnxRecipeDotGeneral("fp8_delayed"))``.
* :func:`nnx_recipe`: replaces in place (graph surgery) the ``dot_general``
  of ``Linear`` / ``LinearGeneral`` layers and the ``einsum_op`` of
  ``Einsum`` layers whose attribute path matches the rules
  (:mod:`jaxfp8._src.recipes.rules`); layers whose kernel is packed
  (:mod:`jaxfp8._src.mx.serving`) multiply it as packed.

Where a layer keeps what its recipe needs:

* Delayed scaling: :class:`NnxRecipeState` variables of the
  :class:`NnxRecipeDotGeneral` (Flax's names: ``input_amax_history``,
  ``input_scale``, ``kernel_...``, ``output_grad_...``). Take the gradient
  with respect to them too (``nnx.DiffState(0, (nnx.Param,
  NnxRecipeState))``): it is the next state, which
  :func:`nnx_apply_recipe_state` writes back into the model, returning the
  parameters' gradient for the optimizer. A layer called twice in one step
  (tied weights) gets the sum of two next states: give each call its own.
* Stochastic rounding and random Hadamard transforms: the next key of the
  ``"recipe"`` stream of an ``nnx.Rngs`` (its ``default`` stream where it
  has no ``"recipe"`` one) on every call, so successive steps differ and
  the seed reproduces them (the stream's count is state that ``nnx.jit``
  carries between steps).

:func:`replace_layers` is the graph surgery itself, shared with the
deprecated ``nnx_mx`` (:mod:`jaxfp8._src.deprecated.mx_flax`). An
integration module: it imports Flax,
and ``jaxfp8.recipes`` loads it on first use of one of these names.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

from flax import nnx
import jax

from jaxfp8._src import compat
from jaxfp8._src.mx import serving
from jaxfp8._src.numerics import validate
from jaxfp8._src.recipes import core
from jaxfp8._src.recipes import ragged
from jaxfp8._src.recipes import gather
from jaxfp8._src.recipes import state as recipe_state
from jaxfp8._src.recipes import layer_state
from jaxfp8._src.recipes.layer_state import OVERWRITE_WITH_GRADIENT
from jaxfp8._src.recipes import registry
from jaxfp8._src.recipes import rules as rules_lib

# The nnx.Rngs stream the keys of stochastic rounding and RHT come from.
RNG_STREAM = "recipe"


class NnxRecipeState(nnx.Variable):
  """Delayed-scaling state of a recipe: replace it with its gradient after
  each step (:func:`nnx_apply_recipe_state`)."""


# The nnx type of linen's collection of the same state: what Flax's bridges
# and Qwix (which makes nnx variables by collection name) find under it.
nnx.register_variable_name(OVERWRITE_WITH_GRADIENT, NnxRecipeState,
                           overwrite=True)


def _keep_state(module: nnx.Module, fresh: Any) -> None:
  """Gives ``module`` the state ``fresh`` initializes as ``state_type``
  variables by their Flax names (``state_def``, ``state_names``)."""
  module.state_def = None if fresh is None else jax.tree.structure(fresh)
  names = []
  for name, value in (layer_state.named_leaves(fresh) if fresh else ()):
    setattr(module, name, module.state_type(value))
    names.append(name)
  module.state_names = tuple(names)


def _call_state_and_key(module: nnx.Module) -> tuple[Any, Any]:
  """(the module's current state or None, its stream's next key or
  None): what one call of its recipe binds."""
  state = None
  if module.state_def is not None:
    state = layer_state.rebuild(
        module.state_def, [getattr(module, n)[...] for n in module.state_names])
  key = getattr(module.rngs, RNG_STREAM)() if module.rngs is not None else None
  return state, key


class NnxRecipeDotGeneral(nnx.Module):
  """The core ``dot_general`` with any recipe, as an nnx module:
  ``nnx.Linear(..., dot_general=NnxRecipeDotGeneral("fp8_delayed"))``.

  Pass an instance (not the class) so its state lives in the model. See the
  module docstring for delayed-scaling state and keys.

  Args:
    recipe: a :class:`~jaxfp8._src.recipes.spec.Recipe`, a registry name or
      an MX recipe (anything
      :func:`~jaxfp8._src.recipes.registry.get_recipe` reads).
    rngs: an ``nnx.Rngs`` (shared with the model, or its own); needed by a
      recipe that rounds stochastically or applies RHT, unused otherwise.
    history_length, reduction: delayed-scaling settings
      (:func:`~jaxfp8._src.recipes.state.init_state`).
    rhs_sharding: the sharding the kernel is gathered to under FSDP
      (``jax.sharding.PartitionSpec()`` for whole): its codes and scales
      are gathered instead of float32 (the core ``dot_general``'s option).

  Raises:
    ValueError: the recipe needs keys and ``rngs`` is None.
    TypeError: an ``rhs_sharding`` that is not a sharding or spec.

  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> dot = NnxRecipeDotGeneral("fp8_delayed", history_length=4)
  >>> layer = nnx.Linear(32, 4, dot_general=dot, rngs=nnx.Rngs(0))
  >>> layer(jnp.ones((2, 32))).shape
  (2, 4)
  >>> dot.input_amax_history[...]  # set by the gradient only
  Array([0., 0., 0., 0.], dtype=float32)
  """
  # The Variable type the state is kept in (a subclass may narrow it).
  state_type: type[nnx.Variable] = NnxRecipeState

  def __init__(self, recipe: Any = "fp8_current", *,
               rngs: nnx.Rngs | None = None, history_length: int = 16,
               reduction: str = "max", rhs_sharding: Any = None):
    fn = type(self).__name__
    self.recipe = registry.get_recipe(recipe)
    self.rhs_sharding = gather.check_sharding(rhs_sharding, None, fn=fn)
    _check_rngs(rngs, self.recipe, fn)
    self.rngs = rngs if self.recipe.needs_key else None
    _keep_state(self, recipe_state.init_state(
        self.recipe, history_length=history_length, reduction=reduction))

  def for_call(self) -> Callable[..., Any]:
    """The plain ``dot_general`` of one call: the recipe with the current
    state and the stream's next key bound."""
    state, key = _call_state_and_key(self)
    return functools.partial(core.dot_general, recipe=self.recipe, key=key,
                             state=state, rhs_sharding=self.rhs_sharding)

  def __call__(self, lhs, rhs, dimension_numbers, precision=None,
               preferred_element_type=None, **kwargs):
    return self.for_call()(lhs, rhs, dimension_numbers, precision,
                           preferred_element_type, **kwargs)


class NnxRecipeRaggedDot(nnx.Module):
  """The grouped ``ragged_dot`` (:func:`jaxfp8.recipes.ragged_dot`) with
  any recipe, as an nnx module: a mixture-of-experts layer that keeps its
  grouped product as an attribute (``self.up = jax.lax.ragged_dot``,
  called ``self.up(x, w, group_sizes)``) takes one in its place, by hand
  or from :func:`nnx_recipe`.

  Args:
    recipe: anything :func:`~jaxfp8._src.recipes.registry.get_recipe`
      reads.
    experts: the number of experts (``rhs.shape[0]``); needed by a delayed
      recipe, whose state is per expert, unused otherwise.
    rngs: an ``nnx.Rngs``; needed by a recipe that rounds stochastically
      or applies RHT (its ``"recipe"`` stream, else its default one).
    history_length, reduction: delayed-scaling settings.

  Raises:
    ValueError: a delayed recipe without ``experts``, or a recipe needing
      keys without ``rngs``.

  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> dot = NnxRecipeRaggedDot("fp8_delayed", experts=2, history_length=4)
  >>> dot(jnp.ones((6, 32)), jnp.ones((2, 32, 4)), jnp.array([2, 4])).shape
  (6, 4)
  >>> dot.input_scale[...]
  Array([1., 1.], dtype=float32)
  """
  state_type: type[nnx.Variable] = NnxRecipeState

  def __init__(self, recipe: Any = "fp8_current", *,
               experts: int | None = None, rngs: nnx.Rngs | None = None,
               history_length: int = 16, reduction: str = "max"):
    fn = type(self).__name__
    self.recipe = registry.get_recipe(recipe)
    _check_rngs(rngs, self.recipe, fn)
    if self.recipe.state_roles and experts is None:
      raise ValueError(f"`{fn}`: the recipe {self.recipe.name!r} keeps a "
                       f"delayed state per expert; pass experts=G (the "
                       f"experts of the weights it multiplies)")
    self.rngs = rngs if self.recipe.needs_key else None
    _keep_state(self, recipe_state.init_state(
        self.recipe, history_length=history_length, reduction=reduction,
        experts=experts if self.recipe.state_roles else None))

  def __call__(self, lhs, rhs, group_sizes, precision=None,
               preferred_element_type=None, group_offset=None, **kwargs):
    del kwargs  # lax's out_sharding: the result follows the operands
    state, key = _call_state_and_key(self)
    return ragged.ragged_dot(lhs, rhs, group_sizes, precision,
                             preferred_element_type, group_offset,
                             recipe=self.recipe, key=key, state=state)


def _check_rngs(rngs: Any, recipe: Any, fn: str) -> None:
  if rngs is not None and not isinstance(rngs, nnx.Rngs):
    raise TypeError(f"`rngs` argument to `{fn}` must be None or an "
                    f"nnx.Rngs, got {type(rngs).__name__}")
  if recipe.needs_key and rngs is None:
    raise ValueError(
        f"`{fn}`: the recipe {recipe.name!r} rounds stochastically or "
        "applies a random Hadamard transform and needs a key per call; "
        "pass rngs=nnx.Rngs(recipe=seed)")


def replace_ragged(model: Any, recipe_for: Callable[[str], Any], *,
                   experts: int | None, rngs: Any) -> Any:
  """Gives every attribute of ``model``'s modules that holds
  ``jax.lax.ragged_dot`` an :class:`NnxRecipeRaggedDot` of the recipe
  ``recipe_for`` returns for its path (``module path/attribute``; None:
  left as it is), in place."""
  for path, module in list(nnx.iter_graph(model)):
    if not isinstance(module, nnx.Module):
      continue
    for attr, value in list(vars(module).items()):
      if value is not jax.lax.ragged_dot:
        continue
      where = "/".join([str(p) for p in path] + [attr])
      recipe = recipe_for(where)
      if recipe is None:
        continue
      if recipe.state_roles and experts is None:
        raise ValueError(f"`nnx_recipe`: the recipe {recipe.name!r} of "
                         f"{where!r} keeps a delayed state per expert; pass "
                         f"experts=G")
      setattr(module, attr, nnx.data(NnxRecipeRaggedDot(
          recipe, experts=experts, rngs=rngs)))
  return model


def nnx_apply_recipe_state(model: Any, grads: Any,
                           state_type: Any = NnxRecipeState) -> Any:
  """Writes the delayed-scaling state found in ``grads`` into ``model``.

  Args:
    model: the nnx model holding :class:`NnxRecipeDotGeneral` modules.
    grads: its gradient with respect to ``(nnx.Param, NnxRecipeState)``,
      whose :class:`NnxRecipeState` part is the next state.
    state_type: the Variable type (an nnx filter) of the state.

  Returns:
    The remaining gradients (the parameters'), for the optimizer.
  """
  state, rest = grads.split(state_type, ...)
  nnx.update(model, state)
  return rest


def einsum_dot(subscripts, lhs, rhs, *, dot_general, precision=None,
               preferred_element_type=None, out_sharding=None):
  """An nnx ``einsum_op``: contractions through ``dot_general``; a packed
  kernel is dequantized (``jnp.einsum`` takes arrays only)."""
  lhs, rhs = (x.dequantize() if serving.is_packed(x) else x
              for x in (lhs, rhs))
  return compat.einsum(subscripts, lhs, rhs, dot_general=dot_general,
                       precision=precision,
                       preferred_element_type=preferred_element_type,
                       out_sharding=out_sharding)


class EinsumOp(nnx.Module):
  """An nnx ``einsum_op`` multiplying with a dot_general module's
  :meth:`~NnxRecipeDotGeneral.for_call` (state and key of this call)."""

  def __init__(self, dot: nnx.Module):
    self.dot = dot

  def __call__(self, subscripts, lhs, rhs, **kwargs):
    return einsum_dot(subscripts, lhs, rhs, dot_general=self.dot.for_call(),
                      **kwargs)


@dataclasses.dataclass(frozen=True)
class KeepPacked:
  """An nnx ``promote_dtype`` that passes packed kernels through as they are
  and promotes the other arrays with the layer's own function."""
  promote: Any

  def __call__(self, arrays, dtype=None, **kwargs):
    plain = self.promote(tuple(x for x in arrays if not serving.is_packed(x)),
                         dtype=dtype, **kwargs)
    it = iter(plain)
    return tuple(x if serving.is_packed(x) else next(it) for x in arrays)


LAYERS = (nnx.Linear, nnx.LinearGeneral, nnx.Einsum)

# dot_for(path, packed) -> the layer's dot_general: a static (hashable)
# function, an nnx.Module with ``for_call()``, or None to leave it as it is.
DotFor = Callable[[str, bool], Any]


def replace_layers(model: Any, dot_for: DotFor) -> Any:
  """Gives each nnx ``Linear`` / ``LinearGeneral`` / ``Einsum`` of ``model``
  the ``dot_general`` that ``dot_for`` returns for it (None: as it is), in
  place; a packed kernel passes the layer's ``promote_dtype`` as it is."""
  for path, module in list(nnx.iter_graph(model)):
    if not isinstance(module, LAYERS):
      continue
    packed = serving.is_packed(module.kernel.get_value())
    dot = dot_for("/".join(str(p) for p in path), packed)
    if dot is None:
      continue
    if packed:
      module.promote_dtype = KeepPacked(module.promote_dtype)
    if isinstance(dot, nnx.Module):
      # A module with state where the layer had a static function: nnx
      # needs the change of status said out loud.
      if isinstance(module, nnx.Einsum):
        module.einsum_op = nnx.data(EinsumOp(dot))
      else:
        module.dot_general = nnx.data(dot)
    elif isinstance(module, nnx.Einsum):
      module.einsum_op = functools.partial(einsum_dot, dot_general=dot)
    else:
      module.dot_general = dot
  return model


def nnx_recipe(model: Any, rules: Any = None, *,
               rngs: nnx.Rngs | None = None,
               rhs_sharding: Any = None, experts: int | None = None) -> Any:
  """Trains an nnx model's layers chosen by rules with their rule's recipe,
  in place.

  ``Linear`` and ``LinearGeneral`` get ``dot_general=NnxRecipeDotGeneral(
  recipe)``; ``Einsum`` gets an ``einsum_op`` multiplying with one. A layer
  whose kernel is an MXArray (a model merged from a packed state, see
  :func:`~jaxfp8._src.mx.serving.quantize_params`) multiplies it as packed,
  with its rule's MX recipe for the activations, or weight-only under a
  rule of None or no rule. Paths are the attribute paths joined by ``/``.

  Grouped GEMMs (mixture of experts): an attribute of any module that
  holds ``jax.lax.ragged_dot`` (a layer calling ``self.up(x, w,
  group_sizes)``) becomes an :class:`NnxRecipeRaggedDot` of the rule
  matching ``module path/attribute`` (``blocks/0/moe/up``): give each
  grouped GEMM its own attribute (each keeps its own delayed state).

  Args:
    model: an ``nnx.Module``.
    rules: ``(regex, recipe)`` pairs (see :mod:`jaxfp8._src.recipes.rules`;
      None keeps a layer in high precision), one recipe for every layer, or
      None for ``"fp8_current"`` everywhere.
    rngs: an ``nnx.Rngs`` whose ``"recipe"`` stream gives the keys of
      recipes that round stochastically or apply RHT (needed when one
      matches).
    rhs_sharding: under FSDP, the sharding every matching layer's kernel
      is gathered to (``PartitionSpec()``: whole); its codes and scales
      are gathered instead of float32 values (see the core
      ``dot_general``). None: XLA gathers what the GEMMs read.
    experts: the experts of the model's grouped GEMMs, for the per-expert
      state of a delayed recipe matching one (unused otherwise).

  Returns:
    ``model`` (changed in place), for chaining.

  Raises:
    ValueError: bad rules, a matching recipe needs keys and ``rngs`` is
      None, or a delayed recipe matches a grouped GEMM and ``experts`` is
      None.

  >>> from flax import nnx
  >>> m = nnx_recipe(nnx.Linear(32, 4, rngs=nnx.Rngs(0)), "fp8_delayed")
  >>> m.dot_general.state_names[:2]
  ('output_grad_amax_history', 'output_grad_scale')
  """
  fn = "nnx_recipe"
  rules = rules_lib.check_rules(rules, fn=fn, get=registry.get_recipe,
                                default="fp8_current")
  if rngs is not None and not isinstance(rngs, nnx.Rngs):
    raise TypeError(f"`rngs` argument to `{fn}` must be None or an nnx.Rngs, "
                    f"got {type(rngs).__name__}")
  rhs_sharding = gather.check_sharding(rhs_sharding, None, fn=fn)
  if experts is not None:
    experts = validate.check_size(experts, "experts", fn, minimum=1)

  def keyed(recipe, path):
    if recipe is not None and recipe.needs_key and rngs is None:
      raise ValueError(f"`{fn}`: the recipe {recipe.name!r} of {path!r} "
                       "rounds stochastically or applies a random Hadamard "
                       "transform and needs a key per call; pass "
                       "rngs=nnx.Rngs(recipe=seed)")
    return recipe

  replace_ragged(model, lambda path: keyed(
      rules_lib.layer_recipe(rules, path), path), experts=experts, rngs=rngs)

  def dot_for(path, packed):
    recipe = rules_lib.layer_recipe(rules, path)
    if recipe is None:
      if not packed:
        return None
      recipe = registry.get_recipe(None)  # weight-only
    keyed(recipe, path)
    return NnxRecipeDotGeneral(recipe, rngs=rngs, rhs_sharding=rhs_sharding)

  return replace_layers(model, dot_for)
