"""The named training recipes: one table, and :func:`get_recipe` to read one.

:data:`RECIPES` maps each name to how it is built (keyword overrides
allowed), what it does, where it comes from and where it runs natively.
:func:`get_recipe` also reads an MX format name (that format in all three
GEMMs), an MX ``key=value`` string (``"f=mxfp8,d=mxfp8_e5m2,w=none"``,
parsed by :mod:`jaxfp8._src.recipes.mx_recipe`) and the deprecated
:class:`~jaxfp8._src.recipes.mx_recipe.MXRecipe` into a
:class:`~jaxfp8._src.recipes.spec.Recipe`.

One meaning per name: as a recipe, ``"nvfp4"`` is the NVFP4 *training
recipe* (two-level scales with Transformer Engine's tensor scale, 2-D weight
blocks, Hadamard transform, stochastic gradients), the registry's entry; as
a format (``jaxfp8.mx.quantize(x, "nvfp4")``) it is the NVFP4 element
format. The format in all three GEMMs (a power-of-two tensor scale, MX
scale modes) is spelled ``"f=nvfp4,d=nvfp4,w=nvfp4"``; the deprecated
``jaxfp8.mx.get_recipe("nvfp4")`` meant that.
"""
from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Optional

from jaxfp8._src.fp8 import scaling
from jaxfp8._src.mx import blockwise
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import validate
from jaxfp8._src.recipes import mx_recipe as mx_recipes
from jaxfp8._src.recipes.mx_recipe import MXRecipe
from jaxfp8._src.recipes.spec import Quantizer
from jaxfp8._src.recipes.spec import Recipe
from jaxfp8._src.recipes.spec import SCALES


@dataclasses.dataclass(frozen=True)
class Entry:
  """One row of :data:`RECIPES`.

  Attributes:
    build: keyword overrides -> :class:`Recipe`.
    summary: what the recipe does, in a line.
    source: where it comes from (paper, library).
    hardware: where its GEMMs run natively (elsewhere the core multiplies
      the exact dequantized values).
  """
  build: Callable[..., Recipe]
  summary: str
  source: str
  hardware: str


def _recipe(name: str, x, w, dy, *, wgrad=None) -> Recipe:
  """fwd (x, w), dgrad (dy, w), wgrad (x, dy) unless given."""
  return Recipe(fwd=(x, w), dgrad=(dy, w), wgrad=wgrad or (x, dy), name=name)


def bf16() -> Recipe:
  q = Quantizer("cast", "bfloat16")
  return _recipe("bf16", q, q, q)


# The builders' overrides are checked here, naming the argument the user
# passed to get_recipe (the Quantizers they build have other field names).
_FN = "get_recipe"


def _per_tensor(name: str, delayed: bool):
  def build(*, format: Any = "float8_e4m3fn",  # pylint: disable=redefined-builtin
            grad_format: Any = "float8_e5m2", pow2_scales: bool = False,
            margin: int = 0) -> Recipe:
    fmt = scaling.signed_format(format, arg="format", fn=_FN).name
    gfmt = scaling.signed_format(grad_format, arg="grad_format", fn=_FN).name
    pow2 = validate.check_bool(pow2_scales, "pow2_scales", _FN)
    margin = scaling.check_margin(margin, _FN)
    scale = "pow2" if pow2 else "float32"
    q = lambda f: Quantizer("tensor", f, scale=scale, delayed=delayed,
                            margin=margin)
    return _recipe(name, q(fmt), q(fmt), q(gfmt))
  return build


def fp8_blockwise(*, pow2_scales: bool = True, block: int = 128,
                  format: Any = "float8_e4m3fn") -> Recipe:  # pylint: disable=redefined-builtin
  """x and dy 1 x block along each GEMM's contracting axis, w block x block."""
  pow2 = validate.check_bool(pow2_scales, "pow2_scales", _FN)
  block = validate.check_size(block, "block", _FN, minimum=1)
  fmt = formats.get(format, arg="format", fn=_FN).name
  validate.check_choice(fmt, blockwise.FORMATS, "format", _FN)
  scale = "pow2" if pow2 else "float32"
  tile = Quantizer("block", fmt, block=(1, block), scale=scale)
  square = Quantizer("block", fmt, block=(block, block), scale=scale)
  return _recipe("fp8_blockwise", tile, square, tile)


_WEIGHT_BLOCKS = ((16, 16), (1, 16))


def _check_weight_block(weight_block: Any) -> tuple[int, int]:
  pair = weight_block
  if not isinstance(pair, str):  # any sequence of two ints, as tuple() takes
    try:
      pair = tuple(pair)
    except TypeError:
      pass
  block = blockwise.check_block(pair, _FN, arg="weight_block")
  if block not in _WEIGHT_BLOCKS:
    raise ValueError(f"`weight_block` argument to `{_FN}` must be (16, 16) "
                     f"(square blocks) or (1, 16), got {weight_block!r}")
  return block


def _nvfp4(name: str, **defaults):
  def build(*, rht: bool = True, stochastic: bool = True,
            weight_block: tuple[int, int] = (16, 16),
            tensor_scale: str = "te") -> Recipe:
    rht = validate.check_bool(rht, "rht", _FN)
    stochastic = validate.check_bool(stochastic, "stochastic", _FN)
    weight_block = _check_weight_block(weight_block)
    validate.check_choice(tensor_scale, SCALES["nvfp4"], "tensor_scale", _FN)
    q = lambda block=(1, 16), sr=False, t=None: Quantizer(
        "nvfp4", "float4_e2m1fn", block=block, scale=tensor_scale,
        rounding="stochastic" if sr else "nearest", transform=t)
    t = "rht" if rht else None
    w = q(weight_block)
    dy = q(sr=stochastic)
    return _recipe(name, q(), w, dy, wgrad=(q(t=t), q(sr=stochastic, t=t)))
  params = inspect.signature(build).parameters
  out = lambda **kw: build(**{**defaults, **kw})
  out.__signature__ = inspect.Signature(
      [p.replace(default=defaults.get(n, p.default))
       for n, p in params.items()])
  return out


def from_mx(recipe: MXRecipe, name: Optional[str] = None) -> Recipe:
  """The :class:`Recipe` of an :class:`MXRecipe`: both operands of each GEMM
  in its MX format (None: high precision), ``dy`` rounded stochastically in
  both backward GEMMs under ``stochastic_grad``."""
  block = None if recipe.block_size is None else (1, recipe.block_size)

  def q(fmt, sr=False):
    if fmt is None:
      return None
    return Quantizer("mx", fmt, block=block, scale=recipe.scale_mode,
                     rounding="stochastic" if sr else "nearest")
  sr = recipe.stochastic_grad
  return Recipe(fwd=(q(recipe.fwd), q(recipe.fwd)),
                dgrad=(q(recipe.dgrad, sr), q(recipe.dgrad)),
                wgrad=(q(recipe.wgrad), q(recipe.wgrad, sr)),
                name=name or _mx_name(recipe))


def _mx_name(recipe: MXRecipe) -> str:
  fields = dataclasses.fields(MXRecipe)
  changed = [f"{f.name}={getattr(recipe, f.name)!r}" for f in fields
             if getattr(recipe, f.name) != f.default]
  return f"MXRecipe({', '.join(changed)})"


def _mx(preset: str):
  def build(**overrides) -> Recipe:
    return from_mx(dataclasses.replace(
        mx_recipes.get_recipe(preset),
        **mx_recipes.check_fields(overrides, fn=_FN)), preset)
  build.__signature__ = inspect.Signature([
      inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY,
                        default=getattr(mx_recipes.get_recipe(preset), f.name))
      for f in dataclasses.fields(MXRecipe)])
  return build


_FP8 = "fp8 tensor cores: NVIDIA Ada, Hopper, Blackwell"
_BLACKWELL = "NVIDIA Blackwell block-scaled tensor cores"
_OCP_MX = ("OCP Microscaling Formats (MX) v1.0; Rouhani et al., Microscaling "
           "Data Formats for Deep Learning, arXiv:2310.10537")
_NVFP4 = ("NVIDIA, Pretraining Large Language Models with NVFP4, "
          "arXiv:2509.25149; Transformer Engine NVFP4BlockScaling")

RECIPES: dict[str, Entry] = {
    "bf16": Entry(
        bf16, "every operand rounded to bfloat16, float32 accumulation",
        "Kalamkar et al., A Study of BFLOAT16 for Deep Learning Training, "
        "arXiv:1905.12322", "bfloat16 matrix units: TPU, NVIDIA Ampere+, "
        "AMD CDNA2+"),
    "fp8_current": Entry(
        _per_tensor("fp8_current", False),
        "per-tensor current scaling: x, w e4m3, dy e5m2",
        "Micikevicius et al., FP8 Formats for Deep Learning, arXiv:2209.05433;"
        " Transformer Engine Float8CurrentScaling", _FP8),
    "fp8_delayed": Entry(
        _per_tensor("fp8_delayed", True),
        "per-tensor delayed scaling (amax history state): x, w e4m3, dy e5m2",
        "Micikevicius et al., arXiv:2209.05433; Transformer Engine "
        "DelayedScaling", _FP8),
    "mxfp8": Entry(
        _mx("mxfp8"), "MXFP8 e4m3, 1x32 blocks along each GEMM's contracting "
        "axis, rceil scales, all three GEMMs",
        _OCP_MX + "; Mishra et al., Recipes for Pre-training LLMs with MXFP8, "
        "arXiv:2506.08027", _BLACKWELL),
    "mxfp8_hp_wgrad": Entry(
        _mx("mxfp8_hp_wgrad"), "MXFP8 forward and input gradient, weight "
        "gradient in high precision",
        _OCP_MX + "; torchao MX training (high-precision weight gradient)",
        _BLACKWELL),
    "mxfp8_e5m2_grad": Entry(
        _mx("mxfp8_e5m2_grad"), "MXFP8 e4m3 forward, e5m2 in both backward "
        "GEMMs", _OCP_MX, _BLACKWELL),
    "mxfp4": Entry(
        _mx("mxfp4"), "MXFP4 (e2m1, 1x32 blocks) in all three GEMMs",
        _OCP_MX, _BLACKWELL),
    "fp8_blockwise": Entry(
        fp8_blockwise, "fp8 e4m3 with x, dy 1x128 tiles along each GEMM's "
        "contracting axis, w 128x128 blocks, power-of-two scales",
        "DeepSeek-AI, DeepSeek-V3 Technical Report, arXiv:2412.19437, "
        "sec. 3.3; Transformer Engine Float8BlockScaling",
        "NVIDIA Hopper (DeepGEMM, Transformer Engine) and Blackwell"),
    "nvfp4": Entry(
        _nvfp4("nvfp4"), "NVFP4: e2m1, x, dy 1x16, w 16x16 blocks, E4M3 block "
        "scales and a float32 tensor scale; Hadamard transform on the wgrad "
        "operands; dy rounded stochastically", _NVFP4, _BLACKWELL),
    "nvfp4_no_rht": Entry(
        _nvfp4("nvfp4_no_rht", rht=False), "nvfp4 without the Hadamard "
        "transform (ablation)", _NVFP4 + " (ablation)", _BLACKWELL),
    "nvfp4_no_sr": Entry(
        _nvfp4("nvfp4_no_sr", stochastic=False), "nvfp4 with dy rounded to "
        "nearest (ablation)", _NVFP4 + " (ablation)", _BLACKWELL),
    "nvfp4_1d_weights": Entry(
        _nvfp4("nvfp4_1d_weights", weight_block=(1, 16)), "nvfp4 with 1x16 "
        "weight blocks along each GEMM's contracting axis (ablation)",
        _NVFP4 + " (ablation)", _BLACKWELL),
}


def recipe_table() -> list[tuple[str, str, str, str]]:
  """``(name, summary, source, hardware)`` for every named recipe.

  >>> [row[0] for row in recipe_table()][:3]
  ['bf16', 'fp8_current', 'fp8_delayed']
  """
  return [(n, e.summary, e.source, e.hardware) for n, e in RECIPES.items()]


_HIGH_PRECISION = Recipe((None, None), (None, None), (None, None),
                         name="high_precision")


def get_recipe(recipe: Any = "fp8_current", **overrides: Any) -> Recipe:
  """A :class:`Recipe` from a recipe, a name of :data:`RECIPES` or an MX one.

  Args:
    recipe: a :class:`Recipe` (returned as it is), a name of
      :data:`RECIPES`, an :class:`~jaxfp8._src.recipes.mx_recipe.MXRecipe`, an
      MX string (an MX format name such as
      ``"mxfp6_e2m3"``, or ``"f=mxfp8,w=none"``), or None (every operand
      as given: high precision).
    **overrides: keyword arguments of a named recipe's builder
      (``fp8_current``: ``format``, ``grad_format``, ``pow2_scales``,
      ``margin``; ``fp8_blockwise``: ``pow2_scales``, ``block``,
      ``format``; ``nvfp4``: ``rht``, ``stochastic``, ``weight_block``,
      ``tensor_scale``; MX names and MXRecipes: MXRecipe's fields).

  Raises:
    ValueError: an unknown name.
    TypeError: a recipe of another type, or an override the recipe does
      not take.

  >>> get_recipe("nvfp4", rht=False).wgrad[0].transform is None
  True
  >>> get_recipe("mxfp8_hp_wgrad").wgrad
  (None, None)
  >>> get_recipe("nvfp4").fwd[0].kind, get_recipe("f=nvfp4,d=nvfp4,w=nvfp4").fwd[0].kind
  ('nvfp4', 'mx')
  """
  fn = "get_recipe"
  if isinstance(recipe, Recipe) or recipe is None:
    if overrides:
      raise TypeError(f"`{fn}` takes overrides for a named recipe or an "
                      f"MXRecipe only, got {sorted(overrides)} with "
                      f"{recipe!r}")
    return _HIGH_PRECISION if recipe is None else recipe
  if isinstance(recipe, MXRecipe):
    return from_mx(_replace(recipe, overrides, fn))
  if not isinstance(recipe, str):
    raise TypeError(f"`recipe` argument to `{fn}` must be a Recipe, a name, "
                    f"an MXRecipe or None, got {type(recipe).__name__}")
  text = recipe.strip().lower()
  if text in RECIPES:
    build = RECIPES[text].build
    params = inspect.signature(build).parameters
    unknown = sorted(set(overrides) - set(params))
    if unknown:
      raise TypeError(f"`{fn}`: recipe {text!r} takes no override "
                      f"{', '.join(unknown)}; it takes "
                      f"{', '.join(params) or 'none'}")
    return _named(build(**overrides), overrides)
  try:
    mx = mx_recipes.get_recipe(text)
  except (TypeError, ValueError) as e:
    raise ValueError(f"`recipe` argument to `{fn}` must be one of "
                     f"{', '.join(RECIPES)}, an MX format name or an MX "
                     f"recipe string (f=..., d=..., w=...), got "
                     f"{recipe!r} ({e})") from e
  return _named(from_mx(_replace(mx, overrides, fn), text), overrides)


def _named(recipe: Recipe, overrides: dict) -> Recipe:
  """``recipe`` named with its overrides: "nvfp4(rht=False)"."""
  if not overrides:
    return recipe
  args = ", ".join(f"{k}={v!r}" for k, v in sorted(overrides.items()))
  return dataclasses.replace(recipe, name=f"{recipe.name}({args})")


def _replace(recipe: MXRecipe, overrides: dict, fn: str) -> MXRecipe:
  names = [f.name for f in dataclasses.fields(MXRecipe)]
  unknown = sorted(set(overrides) - set(names))
  if unknown:
    raise TypeError(f"`{fn}`: an MX recipe takes no override "
                    f"{', '.join(unknown)}; it takes {', '.join(names)}")
  return dataclasses.replace(recipe,
                             **mx_recipes.check_fields(overrides, fn=fn))
