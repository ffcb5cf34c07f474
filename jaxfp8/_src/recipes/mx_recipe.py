"""MX recipes as the MX face of earlier releases wrote them, read into the
recipe core.

The public names (``jaxfp8.mx.MXRecipe``, ``jaxfp8.mx.get_recipe``) are
deprecated: :func:`jaxfp8.recipes.get_recipe` reads everything they read
(``"nvfp4"`` aside, see :mod:`jaxfp8._src.recipes.registry`) and turns it
into a :class:`~jaxfp8._src.recipes.spec.Recipe`. Inside the package this
module stays the parser of MX ``key=value`` recipe strings and the bundle
of MX GEMM settings (format, scale mode, block size) that
:mod:`jaxfp8._src.recipes.mx_gemm` reads.

:class:`MXRecipe` chooses the formats of the three GEMMs of a training step
(forward, input gradient, weight gradient; None is high precision), the
scale mode, the block size and stochastic rounding of the output gradient;
:func:`get_recipe` reads one from a preset or a jmp-style string.

Rules say which layers of a model train in MX, and with which recipe
(:func:`check_rules`, :func:`layer_recipe`: the rules of
:mod:`jaxfp8._src.recipes.rules` read with MX recipes, ``"mxfp8"`` for
None, and a packed kernel multiplied weight-only where no recipe applies).
The deprecated MX Flax faces (:mod:`jaxfp8._src.deprecated.mx_flax`) apply
them.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from jaxfp8._src.mx import scales as scales_lib
from jaxfp8._src.mx.formats import get_format
from jaxfp8._src.numerics import validate
from jaxfp8._src.recipes import rules as rules_lib

# The GEMMs of a training step, as MXRecipe names their formats.
GEMMS: tuple[str, ...] = ("fwd", "dgrad", "wgrad")
# High precision in a recipe: the GEMM multiplies its operands as given.
_HIGH = ("none", "hp", "high", "f32", "float32", "bf16", "bfloat16")


def _check_fmt(fmt: Any, arg: str, fn: str) -> str | None:
  if fmt is None or (isinstance(fmt, str) and fmt.strip().lower() in _HIGH):
    return None
  return get_format(fmt, arg=arg, fn=fn).name


def check_fields(values: dict[str, Any], *, fn: str) -> dict[str, Any]:
  """:class:`MXRecipe` fields (any subset) checked and normalized; errors
  name each field as an argument of ``fn`` (``MXRecipe``, or ``get_recipe``
  for its overrides)."""
  out = dict(values)
  for g in GEMMS:
    if g in out:
      out[g] = _check_fmt(out[g], g, fn)
  if "scale_mode" in out:
    validate.check_choice(out["scale_mode"], scales_lib.SCALE_MODES,
                          "scale_mode", fn)
  bs = out.get("block_size")
  if bs is not None and (isinstance(bs, (bool, np.bool_)) or not isinstance(
      bs, (int, np.integer)) or bs < 1):
    raise ValueError(f"`block_size` argument to `{fn}` must be a positive "
                     f"integer or None, got {bs!r}")
  if "stochastic_grad" in out:
    out["stochastic_grad"] = validate.check_bool(out["stochastic_grad"],
                                                 "stochastic_grad", fn)
  return out


@dataclasses.dataclass(frozen=True)
class MXRecipe:
  """Which MX format each GEMM of a training step uses.

  Attributes:
    fwd: element format of the forward GEMM's operands (``x``, ``w``).
    dgrad: of the input-gradient GEMM's operands (``dy``, ``w``).
    wgrad: of the weight-gradient GEMM's operands (``x``, ``dy``).
      Each is an MX format name (``"mxfp8_e4m3"`` default; ``"mxfp8_e5m2"``,
      ``"mxfp6_e2m3"``, ``"mxfp6_e3m2"``, ``"mxfp4_e2m1"``, ``"nvfp4"``,
      ``"mxint8"``) or None for high precision (the operands as given, like
      torchao's high-precision weight gradient).
    scale_mode: ``"rceil"`` (default: the smallest power of two that never
      saturates, the round-up scale of the published MXFP8 recipes),
      ``"floor"`` (OCP), ``"ceil"`` or ``"even"``.
    block_size: elements per block; None for each format's own.
    stochastic_grad: round the output gradient ``dy`` stochastically in both
      backward GEMMs (``dot_general`` then needs a ``key``).

  >>> MXRecipe(wgrad=None)
  MXRecipe(fwd='mxfp8_e4m3', dgrad='mxfp8_e4m3', wgrad=None, scale_mode='rceil', block_size=None, stochastic_grad=False)
  """
  fwd: str | None = "mxfp8_e4m3"
  dgrad: str | None = "mxfp8_e4m3"
  wgrad: str | None = "mxfp8_e4m3"
  scale_mode: str = "rceil"
  block_size: int | None = None
  stochastic_grad: bool = False

  def __post_init__(self):
    checked = check_fields({f.name: getattr(self, f.name)
                            for f in dataclasses.fields(self)}, fn="MXRecipe")
    for name, value in checked.items():
      object.__setattr__(self, name, value)

  @property
  def quantized(self) -> bool:
    """Whether any GEMM runs in MX."""
    return any(getattr(self, g) is not None for g in GEMMS)


_PRESETS = {
    "mxfp8": {}, "mxfp8_e4m3": {},
    "mxfp8_hp_wgrad": {"wgrad": None},
    "mxfp8_e5m2_grad": {"dgrad": "mxfp8_e5m2", "wgrad": "mxfp8_e5m2"},
}
_KEYS = {"fwd": "fwd", "f": "fwd", "dgrad": "dgrad", "d": "dgrad",
         "wgrad": "wgrad", "w": "wgrad", "scale": "scale_mode",
         "scale_mode": "scale_mode", "block": "block_size",
         "block_size": "block_size", "sr": "stochastic_grad",
         "stochastic_grad": "stochastic_grad"}


def get_recipe(recipe: Any = "mxfp8") -> MXRecipe:
  """An :class:`MXRecipe` from a recipe, a preset or a jmp-style string.

  Strings: a preset (``"mxfp8"``: e4m3 in all three GEMMs;
  ``"mxfp8_hp_wgrad"``: the weight gradient in high precision;
  ``"mxfp8_e5m2_grad"``: e5m2 in both backward GEMMs), any MX format name
  (that format in all three), or comma-separated ``key=value`` pairs with
  keys ``fwd``/``f``, ``dgrad``/``d``, ``wgrad``/``w``, ``scale``, ``block``
  and ``sr`` (``none`` or ``hp`` for high precision), e.g.
  ``"f=mxfp8_e4m3,d=mxfp8_e5m2,w=none,scale=floor"``.

  >>> get_recipe("f=mxfp4,w=none").fwd, get_recipe("mxfp8_hp_wgrad").wgrad
  ('mxfp4_e2m1', None)
  """
  fn = "get_recipe"
  if isinstance(recipe, MXRecipe):
    return recipe
  if recipe is None:
    return MXRecipe(fwd=None, dgrad=None, wgrad=None)
  if not isinstance(recipe, str):
    raise TypeError(f"`recipe` argument to `{fn}` must be an MXRecipe or a "
                    f"string, got {type(recipe).__name__}")
  text = recipe.strip().lower()
  if text in _PRESETS:
    return MXRecipe(**_PRESETS[text])
  if "=" not in text:
    f = _check_fmt(text, "recipe", fn)
    return MXRecipe(fwd=f, dgrad=f, wgrad=f)
  kwargs: dict[str, Any] = {}
  for part in text.split(","):
    key, sep, value = (s.strip() for s in part.partition("="))
    if not sep or key not in _KEYS:
      raise ValueError(f"`recipe` argument to `{fn}`: bad entry {part!r} in "
                       f"{recipe!r}; keys are {', '.join(sorted(_KEYS))}")
    name = _KEYS[key]
    if name == "block_size" and value in ("none", ""):
      value = None
    elif name == "block_size":
      if not value.isdigit():
        raise ValueError(f"`recipe` argument to `{fn}`: block must be a "
                         f"positive integer or none, got {value!r} in "
                         f"{recipe!r}")
      value = int(value)
    elif name == "stochastic_grad":
      value = value in ("1", "true", "yes", "on")
    kwargs[name] = value
  return MXRecipe(**kwargs)


# -- rules: which recipe each layer gets ---------------------------------------

# A packed kernel under a rule of None (or none): the activations as given.
WEIGHT_ONLY = MXRecipe(fwd=None, dgrad=None, wgrad=None)


def check_rules(rules: Any, *, fn: str) -> list[tuple[re.Pattern, Any]]:
  """Rules as compiled ``(pattern, MXRecipe or None)`` pairs
  (:func:`jaxfp8._src.recipes.rules.check_rules` with MX recipes).

  Args:
    rules: ``(regex, recipe)`` pairs (see the module docstring), one recipe
      (an :class:`MXRecipe` or a string) for every layer, or None for
      ``"mxfp8"`` everywhere.
    fn: the public function, for error messages.

  Raises:
    ValueError: for an entry that is not a pair, or a bad recipe.
  """
  return rules_lib.check_rules(rules, fn=fn, get=get_recipe, default="mxfp8")


def layer_recipe(rules: list[tuple[re.Pattern, Any]], path: str, *,
                 packed: bool) -> MXRecipe | None:
  """The recipe of the layer at ``path``, or None to leave it as it is.

  Args:
    rules: from :func:`check_rules`.
    path: the layer's module path, joined by ``/``.
    packed: whether the layer's kernel is packed (an MXArray): under a rule
      of None, or no rule, it still multiplies as packed, with the
      activations as given (weight-only).
  """
  recipe = rules_lib.layer_recipe(rules, path)
  if recipe is None and packed:
    return WEIGHT_ONLY
  return recipe
