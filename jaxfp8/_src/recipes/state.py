"""A delayed recipe's state: made by :func:`init_state`, checked by
:func:`check_state` at the public entries of the recipe core.

The state is ``{role: DelayedScaling}`` for the roles (``"x"``, ``"w"``,
``"dy"``) whose quantizer is delayed; the core
(:mod:`jaxfp8._src.recipes.core`) returns the next one as its gradient.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src import compat

from jaxfp8._src.fp8 import scaling
from jaxfp8._src.fp8.scaling import DelayedScaling
from jaxfp8._src.numerics import validate
from jaxfp8._src.recipes import registry
from jaxfp8._src.recipes.spec import Recipe


def check_state(state: Any, recipe: Recipe, *, fn: str,
                experts: Optional[int] = None) -> Optional[dict]:
  """``state`` as the dict the core takes, checked against ``recipe``;
  with ``experts``, each DelayedScaling holds one state per expert (its
  arrays lead with that many entries: ``init_state(recipe, experts=G)``).

  Raises:
    ValueError: a state for a stateless recipe, missing or extra roles, a
      DelayedScaling whose format, margin or power-of-two setting is not
      its quantizer's, a history or scale of the wrong shape, or a
      concrete scale that is not a positive normal float32.
    TypeError: a state that is not a mapping of DelayedScaling, or whose
      history or scale is not a float32 array.
  """
  roles = recipe.state_roles
  if state is None:
    if roles:
      make = ("init_state(recipe)" if experts is None
              else f"init_state(recipe, experts={experts})")
      raise ValueError(f"`state` argument to `{fn}`: recipe {recipe.name!r} "
                       f"scales {', '.join(roles)} by delayed scaling and "
                       f"needs a state; make one with {make}")
    return None
  if not isinstance(state, Mapping):
    raise TypeError(f"`state` argument to `{fn}` must be a dict of "
                    f"DelayedScaling (init_state(recipe)), got "
                    f"{type(state).__name__}")
  if set(state) != set(roles):
    raise ValueError(f"`state` argument to `{fn}`: recipe {recipe.name!r} "
                     f"needs a state for {sorted(roles) or 'no role'}, got "
                     f"one for {sorted(state)}")
  out = {}
  for role in roles:
    s, q = state[role], recipe.delayed_quantizer(role)
    if not isinstance(s, DelayedScaling):
      raise TypeError(f"`state` argument to `{fn}`: the state of {role} "
                      f"must be a DelayedScaling, got {type(s).__name__}")
    _check_state_arrays(s, role, fn, experts)
    want = (q.format, q.margin, q.scale == "pow2")
    got = (s.format, s.margin, s.power_of_two)
    if want != got:
      raise ValueError(f"`state` argument to `{fn}`: the state of {role} "
                       f"has (format, margin, power_of_two) {got}, its "
                       f"quantizer {want}")
    out[role] = s
  return out


def _check_state_arrays(s: DelayedScaling, role: str, fn: str,
                        experts: Optional[int] = None) -> None:
  """A DelayedScaling's arrays as the core reads them: a float32 history of
  shape (n,), n >= 1, and a float32 scalar scale, positive, finite and
  normal where it is concrete (a traced one is checked by shape only);
  with ``experts``, shapes (experts, n) and (experts,)."""
  where = f"`state` argument to `{fn}`: the state of {role}"
  lead = () if experts is None else (experts,)
  for name, v, ndim in (("amax_history", s.amax_history, 1),
                        ("scale", s.scale, 0)):
    shape, dtype = getattr(v, "shape", None), getattr(v, "dtype", None)
    if shape is None or dtype is None or np.dtype(dtype) != np.float32:
      raise TypeError(f"{where} has a {name} that is not a float32 array, "
                      f"got {type(v).__name__}"
                      f"{'' if dtype is None else ' of dtype ' + str(dtype)}")
    shape = tuple(shape)
    if (len(shape) != ndim + len(lead) or shape[:len(lead)] != lead
        or (ndim and shape[-1] < 1)):
      if experts is None:
        want = "a scalar, shape ()" if not ndim else "shape (n,), n >= 1"
        make = "init_state(recipe)"
      else:
        want = (f"shape ({experts},)" if not ndim
                else f"shape ({experts}, n), n >= 1")
        make = f"init_state(recipe, experts={experts})"
      raise ValueError(f"{where} has a {name} of shape {shape}; it must be "
                       f"{want} ({make} makes one)")
  if experts is None or isinstance(s.scale, compat.Tracer):
    scaling.check_scale_value(s.scale, f"{where} has a scale that")
  else:
    for e, v in enumerate(np.asarray(s.scale)):
      scaling.check_scale_value(v, f"{where} has a scale of expert {e} that")


def init_state(recipe: Any = "fp8_delayed", *, history_length: int = 16,
               reduction: Any = "max", initial_scale: float = 1.0,
               experts: Optional[int] = None) -> Optional[dict]:
  """The state a delayed recipe needs: ``{role: DelayedScaling}``.

  Args:
    recipe: anything :func:`~jaxfp8._src.recipes.registry.get_recipe`
      reads.
    history_length, reduction, initial_scale: as
      :meth:`jaxfp8.policy.DelayedScaling.create` takes them
      (``initial_scale`` a positive normal float32, ``history_length`` an
      integer >= 1).

  Returns:
    A dict with one fresh :class:`~jaxfp8.policy.DelayedScaling` per role
    (``"x"``, ``"w"``, ``"dy"``) whose quantizer is delayed, or None for a
    recipe without delayed scaling.

  >>> sorted(init_state("fp8_delayed", history_length=4))
  ['dy', 'w', 'x']
  >>> init_state("fp8_current") is None
  True
  >>> init_state("fp8_delayed", history_length=4, experts=8)["x"].scale.shape
  (8,)
  """
  fn = "init_state"
  recipe = registry.get_recipe(recipe)
  scaling.check_scale_value(initial_scale,
                            f"`initial_scale` argument to `{fn}`")
  validate.check_size(history_length, "history_length", fn, minimum=1)
  if experts is not None:
    experts = validate.check_size(experts, "experts", fn, minimum=1)
  if not recipe.state_roles:
    return None
  out = {}
  for role in recipe.state_roles:
    q = recipe.delayed_quantizer(role)
    out[role] = DelayedScaling.create(
        q.format, history_length=history_length, reduction=reduction,
        margin=q.margin, power_of_two=q.scale == "pow2",
        initial_scale=initial_scale)
  if experts is not None:
    out = jax.tree.map(
        lambda a: jnp.broadcast_to(a, (experts,) + a.shape), out)
  return out
