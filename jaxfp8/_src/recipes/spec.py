"""What a training recipe is: a :class:`Quantizer` per operand of each GEMM.

A training step with a linear layer runs three GEMMs: the forward
``y = x . w``, the input gradient ``dx = dy . w`` (*dgrad*) and the weight
gradient ``dw = x . dy`` (*wgrad*). A :class:`Recipe` says, for each of them,
how each of its two operands is quantized: a :class:`Quantizer`, or None to
multiply that operand as given (high precision). The recipe core
(:mod:`jaxfp8._src.recipes.core`) runs any recipe; the named ones are in
:mod:`jaxfp8._src.recipes.registry`.

Quantizer kinds:

* ``"cast"``: rounded to ``format`` (bfloat16, or a narrow format) without a
  scale.
* ``"tensor"``: one float32 scale per tensor, current (the tensor's own amax)
  or delayed (a :class:`jaxfp8.policy.DelayedScaling` state): the scaling of
  :mod:`jaxfp8._src.fp8.scaling`.
* ``"block"``: fp8 blockwise, one float32 scale per 1xN tile or NxN block
  (:mod:`jaxfp8._src.mx.blockwise`).
* ``"mx"``: an OCP MX format (``format`` an MX format name), 1-D blocks
  along the contracting axis (:mod:`jaxfp8._src.mx.array`).
* ``"nvfp4"``: NVFP4's two-level scales, E4M3 per block of 16 (1x16 or
  16x16) and one float32 per tensor (:mod:`jaxfp8._src.mx.nvfp4`).

Each GEMM quantizes its operands along its own contracting axis: an operand
is viewed as (batch..., free, contracting), ``(..., M, K)``; a block (1, N)
is N elements along K, a block (N, N) an N x N square of (M, K).
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any, Optional

import numpy as np

from jaxfp8._src.fp8 import scaling
from jaxfp8._src.mx import blockwise
from jaxfp8._src.mx import scales as mx_scales
from jaxfp8._src.mx.formats import get_format as get_mx_format
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import validate

KINDS: tuple[str, ...] = ("cast", "tensor", "block", "mx", "nvfp4")
# The GEMMs of a step and, for each, the roles of its two operands.
GEMMS: tuple[str, ...] = ("fwd", "dgrad", "wgrad")
OPERANDS: dict[str, tuple[str, str]] = {
    "fwd": ("x", "w"), "dgrad": ("dy", "w"), "wgrad": ("x", "dy")}
ROLES: tuple[str, ...] = ("x", "w", "dy")
ROUNDINGS: tuple[str, ...] = ("nearest", "stochastic")
TRANSFORMS: tuple[str, ...] = ("rht",)
# Scale choices per kind (the first is the default).
SCALES: dict[str, tuple[Any, ...]] = {
    "cast": (None,),
    "tensor": ("float32", "pow2"),
    "block": ("pow2", "float32"),
    "mx": ("rceil",) + tuple(s for s in mx_scales.SCALE_MODES
                             if s != "rceil"),
    "nvfp4": ("te", "pow2"),
}
# Kinds whose elements can round stochastically (they take a key).
_STOCHASTIC_KINDS = ("mx", "nvfp4")


def _check_block(block: Any, kind: str, fn: str) -> Optional[tuple[int, int]]:
  if block is None:
    if kind == "block":
      raise ValueError(f"`block` argument to `{fn}` must be (1, N) or (N, N) "
                       "for kind 'block', got None")
    return None if kind != "nvfp4" else (1, 16)
  # operator.index: 2.5 is refused, not truncated; a string is no pair.
  try:
    ok = not isinstance(block, str) and all(
        not isinstance(b, (bool, np.bool_)) for b in block)
    rows, cols = (operator.index(b) for b in block)
  except (TypeError, ValueError):
    ok = False
  if not ok or rows < 1 or cols < 1 or rows not in (1, cols):
    raise ValueError(f"`block` argument to `{fn}` must be (1, N) or (N, N) "
                     f"with N >= 1, got {block!r}")
  if kind in ("cast", "tensor"):
    raise ValueError(f"`block` argument to `{fn}` must be None for kind "
                     f"{kind!r} (one scale per tensor), got {block!r}")
  if kind == "mx" and rows != 1:
    raise ValueError(f"`block` argument to `{fn}`: MX blocks are 1-D, (1, N) "
                     f"along the contracting axis, got {block!r}")
  if kind == "nvfp4" and cols != 16:
    raise ValueError(f"`block` argument to `{fn}`: NVFP4 blocks are (1, 16) "
                     f"or (16, 16), got {block!r}")
  return rows, cols


def _check_format(fmt: Any, kind: str, fn: str) -> str:
  if kind == "mx":
    return get_mx_format(fmt, arg="format", fn=fn).name
  if kind == "nvfp4":
    f = formats.get(fmt, arg="format", fn=fn).name
    if f != "float4_e2m1fn":
      raise ValueError(f"`format` argument to `{fn}` must be float4_e2m1fn "
                       f"for kind 'nvfp4', got {f}")
    return f
  if kind == "cast":
    f = formats.get(fmt, arg="format", fn=fn)
    if f.name == "float32":
      raise ValueError(f"`format` argument to `{fn}`: a cast to float32 is "
                       "no quantization; use None for a high-precision "
                       "operand")
    return f.name
  f = scaling.signed_format(fmt, arg="format", fn=fn).name
  if kind == "block" and f not in blockwise.FORMATS:
    raise ValueError(f"`format` argument to `{fn}` must be one of "
                     f"{', '.join(blockwise.FORMATS)} for kind 'block' (fp8 "
                     f"blockwise, Transformer Engine's Float8BlockScaling), "
                     f"got {f}")
  return f


@dataclasses.dataclass(frozen=True)
class Quantizer:
  """How one operand of one GEMM is quantized.

  Attributes:
    kind: ``"cast"``, ``"tensor"``, ``"block"``, ``"mx"`` or ``"nvfp4"``
      (see the module docstring).
    format: the element format: a format name or alias (``"e4m3"``,
      ``"bfloat16"``), or for ``"mx"`` an MX format name (``"mxfp8"``).
    block: ``(1, N)`` (N elements along the GEMM's contracting axis) or
      ``(N, N)``; kinds ``"block"`` (required), ``"mx"`` ((1, N); None is
      the format's own) and ``"nvfp4"`` ((1, 16) default, or (16, 16)).
    scale: ``"tensor"``: ``"float32"`` (default) or ``"pow2"`` (scales
      rounded up to powers of two); ``"block"``: ``"pow2"`` (default) or
      ``"float32"``; ``"mx"``: an MX scale mode (``"rceil"`` default);
      ``"nvfp4"``: ``"te"`` (default: Transformer Engine's tensor scale) or
      ``"pow2"``. None picks the default.
    rounding: ``"nearest"`` (ties to even) or ``"stochastic"`` (kinds
      ``"mx"`` and ``"nvfp4"``; the core then needs a key).
    transform: None or ``"rht"``: a random Hadamard transform along the
      contracting axis before quantizing (both operands of the GEMM).
    delayed: ``"tensor"`` only: the scale comes from a
      :class:`~jaxfp8.policy.DelayedScaling` state passed to the core.
    margin: ``"tensor"`` only: headroom in powers of two.

  >>> Quantizer("tensor", "e4m3")
  Quantizer(kind='tensor', format='float8_e4m3fn', block=None, scale='float32', rounding='nearest', transform=None, delayed=False, margin=0)
  >>> Quantizer("nvfp4", "e2m1", rounding="stochastic").block
  (1, 16)
  """
  kind: str
  format: Any
  block: Optional[tuple[int, int]] = None
  scale: Any = None
  rounding: str = "nearest"
  transform: Optional[str] = None
  delayed: bool = False
  margin: int = 0

  def __post_init__(self):
    fn = "Quantizer"
    set_ = lambda k, v: object.__setattr__(self, k, v)
    validate.check_choice(self.kind, KINDS, "kind", fn)
    kind = self.kind
    set_("format", _check_format(self.format, kind, fn))
    set_("block", _check_block(self.block, kind, fn))
    scale = SCALES[kind][0] if self.scale is None else self.scale
    if kind == "cast" and scale is not None:
      raise ValueError(f"`scale` argument to `{fn}` must be None for kind "
                       f"'cast', got {scale!r}")
    if kind != "cast":
      validate.check_choice(scale, SCALES[kind], "scale", fn)
    set_("scale", scale)
    validate.check_choice(self.rounding, ROUNDINGS, "rounding", fn)
    if self.rounding == "stochastic" and kind not in _STOCHASTIC_KINDS:
      raise ValueError(f"`rounding` argument to `{fn}`: stochastic rounding "
                       f"is for kinds {_STOCHASTIC_KINDS}, got kind {kind!r}")
    if self.transform is not None:
      validate.check_choice(self.transform, TRANSFORMS, "transform", fn)
    set_("delayed", validate.check_bool(self.delayed, "delayed", fn))
    if self.delayed and kind != "tensor":
      raise ValueError(f"`delayed` argument to `{fn}`: delayed scaling is "
                       f"for kind 'tensor', got kind {kind!r}")
    if self.delayed and self.transform is not None:
      raise ValueError(f"`{fn}`: a delayed scale can't follow a transform "
                       "(its history holds amaxes of untransformed tensors)")
    if self.margin and kind != "tensor":
      raise ValueError(f"`margin` argument to `{fn}` is for kind 'tensor', "
                       f"got kind {kind!r}")
    m = self.margin
    if (not isinstance(m, (int, np.integer)) or isinstance(m, bool)
        or abs(int(m)) > 126):
      # float32 scales span 2^-126 .. 2^127, as jaxfp8.policy.CurrentScaling
      raise ValueError(f"`margin` argument to `{fn}` must be an integer in "
                       f"[-126, 126], got {m!r}")
    set_("margin", int(m))

  @property
  def stochastic(self) -> bool:
    return self.rounding == "stochastic"

  @property
  def block_size(self) -> Optional[int]:
    """Elements per block along the contracting axis (None: one scale per
    tensor, or an MX format's own block size)."""
    return None if self.block is None else self.block[1]


Pair = tuple[Optional[Quantizer], Optional[Quantizer]]


def _check_pair(pair: Any, gemm: str, fn: str) -> Pair:
  try:
    a, b = pair
  except (TypeError, ValueError) as e:
    raise TypeError(f"`{gemm}` argument to `{fn}` must be a pair (quantizer "
                    f"of {OPERANDS[gemm][0]}, quantizer of "
                    f"{OPERANDS[gemm][1]}), got {pair!r}") from e
  for q, role in zip((a, b), OPERANDS[gemm]):
    if q is not None and not isinstance(q, Quantizer):
      raise TypeError(f"`{gemm}` argument to `{fn}`: the quantizer of "
                      f"{role} must be a Quantizer or None, got "
                      f"{type(q).__name__}")
  ta = None if a is None else a.transform
  tb = None if b is None else b.transform
  if ta != tb:
    raise ValueError(f"`{gemm}` argument to `{fn}`: both operands of a GEMM "
                     f"take the same transform (it must cancel in the "
                     f"product), got {ta!r} for {OPERANDS[gemm][0]} and "
                     f"{tb!r} for {OPERANDS[gemm][1]}")
  return a, b


@dataclasses.dataclass(frozen=True)
class Recipe:
  """A :class:`Quantizer` (or None: high precision) per operand per GEMM.

  Attributes:
    fwd: quantizers of ``(x, w)`` in the forward GEMM ``y = x . w``.
    dgrad: of ``(dy, w)`` in the input gradient ``dx = dy . w``.
    wgrad: of ``(x, dy)`` in the weight gradient ``dw = x . dy``.
    name: a label (the registry's name for named recipes).

  A delayed quantizer takes its scale from the state of its role (``"x"``,
  ``"w"`` or ``"dy"``): every delayed quantizer of one role must be the
  same.

  >>> e4m3 = Quantizer("tensor", "e4m3")
  >>> r = Recipe(fwd=(e4m3, e4m3), dgrad=(None, None), wgrad=(None, None))
  >>> r.needs_key, r.state_roles
  (False, ())
  """
  fwd: Pair
  dgrad: Pair
  wgrad: Pair
  name: str = "custom"

  def __post_init__(self):
    fn = "Recipe"
    for g in GEMMS:
      object.__setattr__(self, g, _check_pair(getattr(self, g), g, fn))
    if not isinstance(self.name, str):
      raise TypeError(f"`name` argument to `{fn}` must be a string, got "
                      f"{type(self.name).__name__}")
    for role in ROLES:
      delayed = {q for q in self.quantizers(role) if q.delayed}
      if len(delayed) > 1:
        raise ValueError(f"`{fn}`: the delayed quantizers of {role} differ "
                         f"({sorted(map(repr, delayed))}); one state per "
                         "role holds one format")

  def quantizers(self, role: str) -> list[Quantizer]:
    """The quantizers (None aside) of ``role``'s operand in every GEMM."""
    return [q for g in GEMMS for q, r in zip(getattr(self, g), OPERANDS[g])
            if r == role and q is not None]

  def delayed_quantizer(self, role: str) -> Optional[Quantizer]:
    """The delayed quantizer of ``role``, or None."""
    return next((q for q in self.quantizers(role) if q.delayed), None)

  @property
  def state_roles(self) -> tuple[str, ...]:
    """The roles with a delayed quantizer: the keys of the state."""
    return tuple(r for r in ROLES if self.delayed_quantizer(r) is not None)

  def gemm_needs_key(self, gemm: str) -> bool:
    return any(q is not None and (q.stochastic or q.transform is not None)
               for q in getattr(self, gemm))

  @property
  def needs_key(self) -> bool:
    """Whether the recipe rounds stochastically or transforms randomly."""
    return any(self.gemm_needs_key(g) for g in GEMMS)

  @property
  def quantized(self) -> bool:
    """Whether any operand of any GEMM is quantized."""
    return any(q is not None for g in GEMMS for q in getattr(self, g))

