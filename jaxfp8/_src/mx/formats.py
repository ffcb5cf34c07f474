"""The table of MX (OCP Microscaling v1.0) block formats and NVFP4.

One row per block format: its name and aliases, the element format, the
default block size and the scale format. Everything else an MX format knows
(element max, emax, mantissa width, storage dtype) is derived from the format
registry, except MXINT8's elements, which are not a float format and get their
own grid here (:data:`INT8`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from jaxfp8._src.numerics import formats

# name, aliases, element format, default block size, scale format.
_MX_TABLE: tuple[tuple[str, tuple[str, ...], str, int, str], ...] = (
    ("mxfp8_e4m3", ("mxfp8",), "float8_e4m3fn", 32, "float8_e8m0fnu"),
    ("mxfp8_e5m2", (), "float8_e5m2", 32, "float8_e8m0fnu"),
    ("mxfp6_e2m3", (), "float6_e2m3fn", 32, "float8_e8m0fnu"),
    ("mxfp6_e3m2", (), "float6_e3m2fn", 32, "float8_e8m0fnu"),
    ("mxfp4_e2m1", ("mxfp4",), "float4_e2m1fn", 32, "float8_e8m0fnu"),
    ("mxint8", (), "int8", 32, "float8_e8m0fnu"),
    ("nvfp4", (), "float4_e2m1fn", 16, "float8_e4m3fn"),
)


@dataclasses.dataclass(frozen=True)
class Int8Grid:
  """MXINT8 elements, k / 64 for k in -127..127, described as a float grid.

  Spacing 2^-6 everywhere is a float format with 6 mantissa bits whose
  smallest normal exponent is 0 (everything below 1 is "subnormal"), so the
  exact rounding of :mod:`jaxfp8._src.numerics.rounding` applies unchanged.
  """
  name: str = "int8"
  bits: int = 8
  mantissa_bits: int = 6
  min_exponent: int = 0
  min_subnormal: float = 2.0**-6
  max: float = 127 / 64
  has_inf: bool = False
  has_nan: bool = False
  dtype: np.dtype = np.dtype(np.int8)


# The one MXINT8 element grid (MXFormat.element returns it for "int8").
INT8 = Int8Grid()


@dataclasses.dataclass(frozen=True, eq=False)
class MXFormat:
  """A block format: element format, block size and scale format.

  >>> f = get_format("mxfp6_e2m3")
  >>> f.element.name, f.block_size, f.scale.name, f.emax, f.max
  ('float6_e2m3fn', 32, 'float8_e8m0fnu', 2, 7.5)
  >>> get_format("nvfp4").scale.name
  'float8_e4m3fn'
  """

  name: str
  aliases: tuple[str, ...]
  element_name: str
  block_size: int
  scale_name: str

  @property
  def element(self) -> Any:
    """The element format (a registry Format; MXINT8 has its own grid)."""
    return INT8 if self.element_name == "int8" else formats.get(
        self.element_name)

  @property
  def scale(self) -> formats.Format:
    return formats.get(self.scale_name)

  @property
  def bits(self) -> int:
    """Bits per element in storage."""
    return self.element.bits

  @property
  def max(self) -> float:
    """Largest element magnitude."""
    return self.element.max

  @property
  def emax(self) -> int:
    """Exponent of the largest element's binade, floor(log2(max))."""
    return math.floor(math.log2(self.max))

  @property
  def mantissa_bits(self) -> int:
    return self.element.mantissa_bits

  @property
  def power_of_two_scales(self) -> bool:
    """True for E8M0 (MX) scales, False for NVFP4's E4M3 scales."""
    return self.scale_name == "float8_e8m0fnu"

  @property
  def dtype(self) -> np.dtype:
    """The element dtype (ml_dtypes type; int8 for MXINT8)."""
    return self.element.dtype

  @property
  def storage_dtype(self) -> np.dtype:
    """dtype of :attr:`MXArray.data`: native fp8, int8, or packed uint8."""
    if self.bits == 8:
      return self.element.dtype
    return np.dtype(np.uint8)

  def __repr__(self) -> str:
    return f"MXFormat({self.name})"


_MX_FORMATS: dict[str, MXFormat] = {
    row[0]: MXFormat(*row) for row in _MX_TABLE}
_MX_BY_NAME: dict[str, MXFormat] = {}
for _f in _MX_FORMATS.values():
  for _n in (_f.name, *_f.aliases):
    _MX_BY_NAME[_n] = _f

MX_FORMATS: tuple[str, ...] = tuple(_MX_FORMATS)


def get_format(fmt: Any, *, arg: str = "fmt", fn: str = "get_format"
               ) -> MXFormat:
  """Looks up an MX format by name (``"mxfp4_e2m1"``, ``"mxfp4"``, ...).

  Args:
    fmt: a name or alias from :data:`MX_FORMATS`, or an :class:`MXFormat`.
    arg: the argument name used in the error message.
    fn: the function name used in the error message.

  Returns:
    The :class:`MXFormat` (one object per format).

  Raises:
    ValueError: for anything else.

  >>> get_format("mxfp4"), get_format(" MXINT8 ").block_size
  (MXFormat(mxfp4_e2m1), 32)
  """
  if isinstance(fmt, MXFormat):
    return fmt
  if isinstance(fmt, str) and fmt.strip().lower() in _MX_BY_NAME:
    return _MX_BY_NAME[fmt.strip().lower()]
  raise ValueError(f"`{arg}` argument to `{fn}` must be one of "
                   f"{', '.join(map(repr, MX_FORMATS))}; got {fmt!r}")
