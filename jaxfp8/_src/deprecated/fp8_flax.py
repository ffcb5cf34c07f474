"""The fp8 Flax modules of earlier releases (deprecated): linen and nnx.

``jaxfp8.policy.Fp8DotGeneral``, ``NnxFp8DotGeneral``, ``Fp8State`` and
``nnx_apply_fp8_state`` are the core's per-tensor recipes (``fp8_current``,
``fp8_delayed``) through the one Flax face
(``jaxfp8.recipes.RecipeDotGeneral``, ``NnxRecipeDotGeneral``), kept so that
code written for them gives the same numbers for this release. They are
those recipes through the one Flax integration
(:mod:`jaxfp8._src.faces.linen`, :mod:`jaxfp8._src.faces.nnx`), which
keeps delayed-scaling state where each Flax API keeps state.

* linen: :class:`Fp8DotGeneral` (``nn.Dense(dot_general_cls=...)``) keeps the
  amax histories and scales in the ``_overwrite_with_gradient`` collection
  (:data:`OVERWRITE_WITH_GRADIENT`), with Flax's own variable names, which
  ``flax.training.train_state.TrainState`` replaces with their gradient (the
  next state) instead of handing them to the optimizer.
  :func:`split_overwrite_with_gradient` separates them from the parameters
  for a hand-written training step.
* nnx: :class:`NnxFp8DotGeneral` (``nnx.Linear(dot_general=...)``) keeps them
  in :class:`Fp8State` variables; :func:`nnx_apply_fp8_state` writes their
  gradient back into the model and returns the rest for the optimizer.

An integration module: it imports Flax, and ``jaxfp8.policy`` loads it on
first use of one of these names (with a ``DeprecationWarning``).
"""
from __future__ import annotations

from typing import Any

from flax import linen as nn

from jaxfp8._src.fp8 import scaling
from jaxfp8._src.recipes.layer_state import OVERWRITE_WITH_GRADIENT
from jaxfp8._src.mx import formats as mx_formats
from jaxfp8._src.faces import linen as recipe_linen
from jaxfp8._src.faces import nnx as recipe_nnx
from jaxfp8._src.recipes import registry


def _check_formats(fwd: Any, bwd: Any, fn: str) -> tuple[str, str]:
  for arg, fmt in (("fwd_format", fwd), ("bwd_format", bwd)):
    if isinstance(fmt, str) and fmt in mx_formats.MX_FORMATS + ("mxfp8",):
      # Block-scaled formats are a different op (per-block E8M0 scales), not
      # a per-tensor scale: point the user to it rather than to a typo.
      raise ValueError(
          f"`{arg}` argument to `{fn}` is the MX block format {fmt!r}; "
          f"`{fn}` scales whole tensors. For MX training use "
          "`jaxfp8.recipes.RecipeDotGeneral(recipe='mxfp8')` (linen), "
          "`jaxfp8.recipes.NnxRecipeDotGeneral('mxfp8')` (nnx) or "
          "`jaxfp8.recipes.linen_recipe` / `jaxfp8.recipes.nnx_recipe`")
  return (scaling.signed_format(fwd, arg="fwd_format", fn=fn).name,
          scaling.signed_format(bwd, arg="bwd_format", fn=fn).name)


def _check_mode(mode: str, fn: str) -> str:
  if mode not in ("current", "delayed"):
    raise ValueError(f"`scaling` argument to `{fn}` must be 'current' or "
                     f"'delayed', got {mode!r}")
  return mode


def _recipe(fwd_format: Any, bwd_format: Any, mode: str, margin: int,
            power_of_two: bool, fn: str) -> Any:
  """The core's per-tensor recipe of these settings (fp8_current or
  fp8_delayed: the input and kernel in ``fwd_format``, the output gradient
  in ``bwd_format``)."""
  fwd, bwd = _check_formats(fwd_format, bwd_format, fn)
  return registry.get_recipe(
      "fp8_current" if _check_mode(mode, fn) == "current" else "fp8_delayed",
      format=fwd, grad_format=bwd, margin=margin,
      pow2_scales=bool(power_of_two))


class Fp8DotGeneral(nn.Module):
  """fp8 ``dot_general`` as a linen module: ``nn.Dense(dot_general_cls=...)``.

  With ``scaling="delayed"`` the amax histories and scales of the input,
  kernel and output gradient live in the ``_overwrite_with_gradient``
  collection (Flax's names: ``input_amax_history``, ``input_scale``...).

  Attributes:
    fwd_format: format of the input and the kernel (default e4m3).
    bwd_format: format of the output gradient (default e5m2).
    scaling: ``"current"`` or ``"delayed"``.
    history_length, reduction: delayed-scaling settings.
    margin, power_of_two: scale settings (see ``compute_scale``).

  >>> import jax, jax.numpy as jnp, flax.linen as nn
  >>> model = nn.Dense(4, dot_general_cls=Fp8DotGeneral)
  >>> variables = model.init(jax.random.key(0), jnp.ones((2, 3)))
  >>> sorted(variables[OVERWRITE_WITH_GRADIENT]["Fp8DotGeneral_0"])[:2]
  ['input_amax_history', 'input_scale']
  """
  fwd_format: Any = "float8_e4m3fn"
  bwd_format: Any = "float8_e5m2"
  scaling: str = "delayed"
  history_length: int = 16
  reduction: str = "max"
  margin: int = 0
  power_of_two: bool = False

  def __post_init__(self):
    # A bad format or mode fails where the module is built, not at init.
    _check_formats(self.fwd_format, self.bwd_format, "Fp8DotGeneral")
    _check_mode(self.scaling, "Fp8DotGeneral")
    super().__post_init__()

  @nn.compact
  def __call__(self, lhs, rhs, dimension_numbers, precision=None,
               preferred_element_type=None, **kwargs):
    fn = "Fp8DotGeneral"
    recipe = _recipe(self.fwd_format, self.bwd_format, self.scaling,
                     self.margin, self.power_of_two, fn)
    dot = recipe_linen.layer_dot(self, recipe, fn=fn,
                                 history_length=self.history_length,
                                 reduction=self.reduction)
    return dot(lhs, rhs, dimension_numbers, precision,
               preferred_element_type)


class Fp8State(recipe_nnx.NnxRecipeState):
  """Delayed-scaling state: replace it with its gradient after each step."""


class NnxFp8DotGeneral(recipe_nnx.NnxRecipeDotGeneral):
  """fp8 ``dot_general`` as an nnx module: ``nnx.Linear(dot_general=...)``.

  Pass an instance (not the class) so its state lives in the model. With
  ``scaling="delayed"`` the state is :class:`Fp8State` variables; take the
  gradient with respect to them too (``nnx.DiffState(0, (nnx.Param,
  Fp8State))``) and write it back with :func:`nnx_apply_fp8_state`.

  >>> import jax.numpy as jnp
  >>> from flax import nnx
  >>> layer = nnx.Linear(3, 2, dot_general=NnxFp8DotGeneral(history_length=4),
  ...                    rngs=nnx.Rngs(0))
  >>> layer(jnp.ones((5, 3))).shape
  (5, 2)
  >>> layer.dot_general.input_amax_history[...]  # set by the gradient only
  Array([0., 0., 0., 0.], dtype=float32)
  """
  state_type = Fp8State

  def __init__(self, *args, fwd_format: Any = "float8_e4m3fn",
               bwd_format: Any = "float8_e5m2", scaling: str = "delayed",
               history_length: int = 16, reduction: str = "max",
               margin: int = 0, power_of_two: bool = False, **unexpected):
    fn = "NnxFp8DotGeneral"
    if args or unexpected:
      # What nnx.Linear does when handed the class instead of an instance.
      raise TypeError(
          f"`{fn}` takes keyword options only, got "
          f"{len(args)} positional and {sorted(unexpected)} keyword "
          f"arguments: pass an instance, nnx.Linear(..., "
          f"dot_general={fn}()), not the class")
    super().__init__(_recipe(fwd_format, bwd_format, scaling, margin,
                             power_of_two, fn),
                     history_length=history_length, reduction=reduction)


def nnx_apply_fp8_state(model: Any, grads: Any) -> Any:
  """Writes the delayed-scaling state found in ``grads`` into ``model``.

  Args:
    model: the nnx model holding :class:`NnxFp8DotGeneral` modules.
    grads: its gradient with respect to ``(nnx.Param, Fp8State)``, whose
      :class:`Fp8State` part is the next state.

  Returns:
    The remaining gradients (the parameters'), for the optimizer.
  """
  return recipe_nnx.nnx_apply_recipe_state(model, grads, Fp8State)
