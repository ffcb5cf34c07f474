"""How the Flax integrations name and rebuild a recipe's per-layer state.

A delayed-scaling recipe's state (:func:`jaxfp8._src.recipes.state.init_state`)
is a dict ``{role: DelayedScaling}`` with roles ``"x"`` (input), ``"w"``
(kernel) and ``"dy"`` (output gradient). A Flax layer keeps its array
leaves as variables with Flax's own fp8 names (``input_amax_history``,
``input_scale``, ``kernel_...``, ``output_grad_...``), the names
fp8 modules (and jaxfp8's, from the first release) have always used, and rebuilds the dict
from them before each call. Framework-free, so linen
(:mod:`jaxfp8._src.faces.linen`) and nnx (:mod:`jaxfp8._src.faces.nnx`)
share it.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

import jax

# The core's state roles, as Flax names the tensors.
ROLE_NAMES = {"x": "input", "w": "kernel", "dy": "output_grad"}
_FIELDS = ("amax_history", "scale")


def named_leaves(state: Mapping[str, Any]) -> list[tuple[str, jax.Array]]:
  """``(variable name, array)`` for each leaf of ``state``, in the order of
  ``jax.tree.leaves(state)`` (so :func:`rebuild` reverses it).

  >>> from jaxfp8.policy import DelayedScaling
  >>> s = {"x": DelayedScaling.create("e4m3", history_length=2)}
  >>> [(n, v.shape) for n, v in named_leaves(s)]
  [('input_amax_history', (2,)), ('input_scale', ())]
  """
  out = []
  for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
    role, field = path  # DictKey, then the index in DelayedScaling's leaves
    out.append((f"{ROLE_NAMES[role.key]}_{_FIELDS[field.key]}", leaf))
  return out


def rebuild(treedef: Any, values: Iterable[jax.Array]) -> Any:
  """The state of structure ``treedef`` (``jax.tree.structure`` of a fresh
  state: formats and settings) with the leaves ``values``, in the order of
  :func:`named_leaves`."""
  return jax.tree_util.tree_unflatten(treedef, list(values))


# The linen collection that holds delayed-scaling state; Flax's TrainState
# replaces a variable of this collection by its "gradient" (the next state).
OVERWRITE_WITH_GRADIENT = "_overwrite_with_gradient"


def split_overwrite_with_gradient(variables: Any) -> tuple[Any, Optional[Any]]:
  """``(params part, state part)`` of a linen variables dict or its gradient.

  >>> split_overwrite_with_gradient({"params": 1, OVERWRITE_WITH_GRADIENT: 2})
  ({'params': 1}, 2)
  >>> split_overwrite_with_gradient({"params": 1})
  ({'params': 1}, None)
  """
  if isinstance(variables, dict) or hasattr(variables, "keys"):
    if OVERWRITE_WITH_GRADIENT in variables:
      rest = {k: v for k, v in variables.items()
              if k != OVERWRITE_WITH_GRADIENT}
      return rest, variables[OVERWRITE_WITH_GRADIENT]
  return variables, None
