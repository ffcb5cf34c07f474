"""Qwix around the recipe core: a ``QtProvider`` whose rules name recipes.

Qwix (``qwix.quantize_model(model, provider)``) intercepts
``jax.lax.dot_general``, ``jax.numpy.einsum`` and ``jax.lax.ragged_dot``
in an unchanged Flax model (linen or nnx) and asks its provider how to run
each call, by the rule matching the running module's path.
:class:`QwixRecipeProvider` answers with jaxfp8's recipe core: the dense
:func:`~jaxfp8.recipes.dot_general` (einsum's contractions through it, as
``linen_recipe`` routes ``Einsum``) and the grouped
:func:`~jaxfp8.recipes.ragged_dot`, under the recipe its
:class:`QwixRecipeRule` names (None: lax's own, high precision).

Where a call keeps what its recipe needs (Qwix's own places, through its
helpers, :mod:`jaxfp8._src.compat`):

* delayed scaling: variables of the ``_overwrite_with_gradient`` collection
  in the running module (nnx: :class:`~jaxfp8.recipes.NnxRecipeState`,
  that collection's registered type), named by Qwix's op id
  (``dot_general0_input_scale``...), whose gradient is the next state
  (linen's ``TrainState``; nnx: ``nnx_apply_recipe_state``);
* keys for stochastic rounding and Hadamard signs: the ``"recipe"`` stream
  (linen: ``rngs={"recipe": key}`` to ``apply``; nnx:
  ``model.set_attributes(qwix_rngs=nnx.Rngs(recipe=seed))``, Qwix's
  convention).

An integration module: it imports Qwix and Flax, and ``jaxfp8.recipes``
loads it on first use of its names (extra ``jaxfp8[qwix]``).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

import jax
import qwix

from jaxfp8._src import compat
from jaxfp8._src.faces import nnx as _  # noqa: F401  (registers the nnx state type)
from jaxfp8._src.recipes import core
from jaxfp8._src.recipes import layer_state
from jaxfp8._src.recipes import ragged
from jaxfp8._src.recipes import registry
from jaxfp8._src.recipes import state as recipe_state
from jaxfp8._src.recipes.layer_state import OVERWRITE_WITH_GRADIENT

RNG_STREAM = "recipe"


@dataclasses.dataclass(frozen=True, kw_only=True)
class QwixRecipeRule(qwix.QtRule):
  """A Qwix rule naming a jaxfp8 recipe for the matching modules' GEMMs.

  Attributes:
    module_path: a regex fully matching module paths (Qwix's).
    op_names: the ops it applies to (``"dot_general"``, ``"einsum"``,
      ``"ragged_dot"``; empty: all).
    recipe: anything :func:`~jaxfp8.recipes.get_recipe` reads; None keeps
      the op as lax runs it.
    history_length: a delayed recipe's amax history.

  Qwix's quantization fields (``weight_qtype``...) are not read: the recipe
  says how every operand of the three GEMMs is quantized.
  """
  recipe: Any = "fp8_current"
  history_length: int = 16


class QwixRecipeProvider(qwix.QtProvider):
  """Qwix's training provider, running jaxfp8 recipes.

  Args:
    rules: :class:`QwixRecipeRule` s in order of precedence.

  Raises:
    TypeError: a rule that is not a QwixRecipeRule.
    ValueError: an unknown recipe name (here, not at the first call).

  >>> import jax, jax.numpy as jnp, qwix
  >>> from flax import linen as nn
  >>> provider = QwixRecipeProvider([QwixRecipeRule(recipe="fp8_blockwise")])
  >>> model = qwix.quantize_model(nn.Dense(8), provider)
  >>> variables = model.init(jax.random.key(0), jnp.ones((4, 128)))
  >>> model.apply(variables, jnp.ones((4, 128))).shape
  (4, 8)
  """

  def __init__(self, rules: Sequence[QwixRecipeRule], **kwargs: Any):
    fn = type(self).__name__
    for rule in rules:
      if not isinstance(rule, QwixRecipeRule):
        raise TypeError(f"`rules` argument to `{fn}` must hold "
                        f"QwixRecipeRule, got {type(rule).__name__}")
      registry.get_recipe(rule.recipe)
    super().__init__(rules, **kwargs)

  def _bound(self, rule: QwixRecipeRule, op_id: str, *,
             experts: int | None = None) -> tuple[Any, Any, Any]:
    """(recipe, state, key) of one call: the state from the running
    module's variables, the key from its ``"recipe"`` stream."""
    recipe = registry.get_recipe(rule.recipe)
    state = None
    fresh = recipe_state.init_state(recipe,
                                    history_length=rule.history_length,
                                    experts=experts)
    if fresh is not None:
      values = [compat.qwix_variable(OVERWRITE_WITH_GRADIENT,
                                     f"{op_id}_{name}", lambda v=v: v)
                for name, v in layer_state.named_leaves(fresh)]
      state = layer_state.rebuild(jax.tree.structure(fresh), values)
    key = compat.qwix_make_rng(RNG_STREAM) if recipe.needs_key else None
    return recipe, state, key

  def dot_general(self, lhs, rhs, dimension_numbers, precision=None,
                  preferred_element_type=None, *, out_sharding=None):
    rule, op_id = compat.qwix_rule_and_op_id(self, "dot_general")
    if rule is None or rule.recipe is None:
      return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision,
                                 preferred_element_type,
                                 out_sharding=out_sharding)
    recipe, state, key = self._bound(rule, op_id)
    return core.dot_general(lhs, rhs, dimension_numbers, precision,
                            preferred_element_type, recipe=recipe, key=key,
                            state=state)

  def einsum(self, einsum_str, *operands, precision=None,
             preferred_element_type=None, _dot_general=jax.lax.dot_general,  # pylint: disable=invalid-name
             out_sharding=None):
    rule, op_id = compat.qwix_rule_and_op_id(self, "einsum")
    if rule is None or rule.recipe is None:
      return jax.numpy.einsum(einsum_str, *operands, precision=precision,
                              preferred_element_type=preferred_element_type,
                              _dot_general=_dot_general,
                              out_sharding=out_sharding)
    if len(operands) != 2:
      raise ValueError(f"`{type(self).__name__}.einsum` under a recipe takes "
                       f"two operands, got {len(operands)} ({einsum_str!r})")
    recipe, state, key = self._bound(rule, op_id)
    dot = functools.partial(core.dot_general, recipe=recipe, key=key,
                            state=state)
    return compat.einsum(einsum_str, *operands, dot_general=dot,
                         precision=precision,
                         preferred_element_type=preferred_element_type,
                         out_sharding=out_sharding)

  def ragged_dot(self, lhs, rhs, group_sizes, precision=None,
                 preferred_element_type=None, group_offset=None):
    rule, op_id = compat.qwix_rule_and_op_id(self, "ragged_dot")
    if rule is None or rule.recipe is None:
      return jax.lax.ragged_dot(lhs, rhs, group_sizes, precision=precision,
                                preferred_element_type=preferred_element_type,
                                group_offset=group_offset)
    recipe, state, key = self._bound(rule, op_id,
                                     experts=jax.numpy.shape(rhs)[0])
    return ragged.ragged_dot(lhs, rhs, group_sizes, precision,
                             preferred_element_type, group_offset,
                             recipe=recipe, key=key, state=state)
