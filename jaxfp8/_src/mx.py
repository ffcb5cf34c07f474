"""MX (OCP Microscaling v1.0) block formats and NVFP4, spec-exact and packed.

An :class:`MXArray` holds a tensor as blocks of ``block_size`` consecutive
elements along one axis; each block stores one shared scale and narrow
elements, and a value is ``element * scale``. Every step that touches a scale
is integer arithmetic on float32 bit patterns: the smallest E8M0 scale,
2^-127, is itself a float32 subnormal, and XLA on CPU flushes those to zero
in float arithmetic. Powers of two are applied by adding to the exponent
field, with round-to-nearest-even when a result lands among the subnormals.

The one table of MX formats is ``_MX_TABLE``; element limits (max, emax,
mantissa width) come from the format registry.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Literal

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src import codes as codes_lib
from jaxfp8._src import formats
from jaxfp8._src import mx_pack
from jaxfp8._src import validate
from jaxfp8._src import rounding as rounding_lib

ScaleMode = Literal["floor", "rceil", "ceil", "even"]
SCALE_MODES: tuple[str, ...] = ("floor", "rceil", "ceil", "even")
# Directed roundings would need the sticky bits of quotients below float32's
# range, which the scaled values don't keep; the MX spec asks for these two.
ROUNDINGS: tuple[str, ...] = ("nearest", "stochastic")

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
class _Int8Grid:
  """MXINT8 elements, k / 64 for k in -127..127, described as a float grid.

  Spacing 2^-6 everywhere is a float format with 6 mantissa bits whose
  smallest normal exponent is 0 (everything below 1 is "subnormal"), so the
  exact rounding of :mod:`jaxfp8._src.cast` applies unchanged.
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


_INT8 = _Int8Grid()


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
    return _INT8 if self.element_name == "int8" else formats.get(
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
  """Looks up an MX format by name (``"mxfp4_e2m1"``, ``"mxfp4"``, ...)."""
  if isinstance(fmt, MXFormat):
    return fmt
  if isinstance(fmt, str) and fmt.strip().lower() in _MX_BY_NAME:
    return _MX_BY_NAME[fmt.strip().lower()]
  raise ValueError(f"`{arg}` argument to `{fn}` must be one of "
                   f"{', '.join(map(repr, MX_FORMATS))}; got {fmt!r}")


# -- integer arithmetic on float32 bit patterns --------------------------------

_U32, _I32 = jnp.uint32, jnp.int32
_INF = 0x7F800000
_NAN = 0x7FC00000


def _f32_bits(v: float) -> int:
  return int(np.array(v, np.float32).view(np.uint32))


def _split(mag):
  """Magnitude bits -> (e, s), value = s * 2^(e - 150), s in [2^23, 2^24).

  Subnormals are normalized (``e`` drops below 1) by converting their integer
  mantissa to float32, which is exact and normal; zero gives ``s = 0``.
  """
  big_e = (mag >> 23).astype(_I32)
  mant = mag & 0x7FFFFF
  as_float = lax.bitcast_convert_type(mant.astype(jnp.int32).astype(
      jnp.float32), _U32)  # mant * 2^-149 == float(mant) * 2^-149
  sub = big_e == 0
  e = jnp.where(sub, (as_float >> 23).astype(_I32) - 149, big_e)
  s = (jnp.where(sub, as_float, mant) & 0x7FFFFF) | 0x800000
  return e, jnp.where(mag == 0, _U32(0), s)


def _ldexp(mag, k):
  """Finite magnitude bits times 2^k, nearest even; Inf on overflow."""
  e, s = _split(mag)
  e2 = e + k
  normal = (jnp.maximum(e2, 0).astype(_U32) << 23) | (s & 0x7FFFFF)
  shift = jnp.clip(1 - e2, 0, 25).astype(_U32)
  q = s >> shift
  rem = s - (q << shift)
  half = (_U32(1) << shift) >> 1
  up = (rem > half) | ((rem == half) & ((q & 1) == 1))
  out = jnp.where(e2 >= 1, normal, q + up.astype(_U32))
  out = jnp.where(e2 >= 255, _U32(_INF), out)
  return jnp.where(s == 0, _U32(0), out)


def _frac_bits(v: float) -> int:
  """The 23 fraction bits of v's normalized float32 significand."""
  return _f32_bits(v) & 0x7FFFFF


def _scale_exponents(amax, mx: MXFormat, mode: str):
  """Unbiased E8M0 exponents of blocks with finite, nonzero ``amax`` bits."""
  e, s = _split(amax)
  frac = s & 0x7FFFFF
  if mode == "floor":
    bump = jnp.zeros(frac.shape, _I32)
  elif mode == "ceil":  # 2^(ceil(log2 amax) - emax)
    bump = (frac != 0).astype(_I32)
  elif mode == "rceil":  # smallest 2^k with amax <= max * 2^k
    bump = (frac > _frac_bits(mx.max)).astype(_I32)
  else:  # even: amax rounded (half up) to the element's mantissa width
    carry = frac + (1 << (22 - mx.mantissa_bits))
    bump = (carry >= (1 << 23)).astype(_I32)
  return jnp.clip(e - 127 + bump - mx.emax, -127, 127)


# -- elements ------------------------------------------------------------------

def _element_codes(bits, rand, mx: MXFormat, rounding: str):
  """Narrow element codes of float32 bit patterns (already divided by scale)."""
  elem = mx.element
  if elem is _INT8:
    mag, neg = bits & 0x7FFFFFFF, (bits >> 31) == 1
    mag = rounding_lib.round_magnitude(mag, neg, elem, rounding=rounding,
                                       rand=rand)
    mag, _ = rounding_lib.limit_magnitude(mag, neg, elem, rounding=rounding,
                                          saturate=True)
    k = (lax.bitcast_convert_type(mag, jnp.float32) * 64).astype(_I32)
    return jnp.where(neg, -k, k).astype(jnp.int8)
  return rounding_lib.round_to_codes(
      lax.bitcast_convert_type(bits, jnp.float32), elem, rounding=rounding,
      rand=rand)


def _element_values(codes, mx: MXFormat):
  """Exact float32 value of element codes (unpacked)."""
  elem = mx.element
  if elem is _INT8:
    return codes.astype(jnp.float32) * np.float32(2.0**-6)
  return codes_lib.values_of_codes(codes, elem)


def _nan_fill(mx: MXFormat) -> int:
  """Element code stored in a NaN block (the element NaN where there is one)."""
  elem = mx.element
  return elem.nan_code if elem.has_nan else 0


# -- the array type ------------------------------------------------------------

@jax.tree_util.register_pytree_node_class
class MXArray:
  """A tensor in a block-scaled format: packed elements plus per-block scales.

  Layout (what kernels read):

  * ``data``: the elements, with the blocked axis where it is in the logical
    shape. mxfp8: a native ``float8_e4m3fn``/``float8_e5m2`` array of the
    (padded) logical shape; mxint8: an ``int8`` array of that shape (value =
    int / 64); fp6: uint8, four elements in three bytes along the blocked
    axis; fp4 and nvfp4: uint8, two elements per byte (element ``2i`` in the
    low nibble). Layouts are drawn in ``docs/mx.md``.
  * ``scales``: uint8 scale codes, the logical shape with the blocked axis
    divided by ``block_size`` (rounded up). E8M0 for MX (scale =
    2^(code - 127), 0xFF = NaN); E4M3 codes for nvfp4.
  * ``tensor_scale``: nvfp4 only, a float32 power of two per tensor (None for
    MX formats). value = element * scale * tensor_scale.

  Static (pytree aux) data: ``fmt`` (an :class:`MXFormat`), ``axis`` (the
  blocked axis, negative), ``length`` (logical length of the blocked axis,
  before padding) and ``block_size``. The logical shape is derived from
  ``scales``, so leading batch axes added by ``vmap`` are picked up.

  >>> import jax.numpy as jnp
  >>> a = quantize(jnp.array([[960.0, 2.0, -4.0, 3.0] * 8]), "mxfp8_e4m3")
  >>> a
  MXArray(mxfp8_e4m3, shape=(1, 32), axis=-1, block_size=32)
  >>> a.scales, a.data[0, :4], a.dequantize()[0, :4]
  (Array([[128]], dtype=uint8), Array([448, 1, -2, 1.5], dtype=float8_e4m3fn),
   Array([896.,   2.,  -4.,   3.], dtype=float32))
  """

  __slots__ = ("data", "scales", "tensor_scale", "fmt", "axis", "length",
               "block_size")

  def __init__(self, data, scales, fmt, *, axis: int, length: int,
               block_size: int, tensor_scale=None):
    self.data, self.scales, self.tensor_scale = data, scales, tensor_scale
    self.fmt = get_format(fmt, fn="MXArray")
    self.axis, self.length, self.block_size = int(axis), int(length), int(
        block_size)
    if self.axis >= 0:
      raise ValueError("`axis` of MXArray is stored as a negative index, got "
                       f"{axis}")

  def tree_flatten(self):
    return ((self.data, self.scales, self.tensor_scale),
            (self.fmt.name, self.axis, self.length, self.block_size))

  @classmethod
  def tree_unflatten(cls, aux, children):
    obj = object.__new__(cls)
    obj.data, obj.scales, obj.tensor_scale = children
    obj.fmt = _MX_FORMATS[aux[0]]
    obj.axis, obj.length, obj.block_size = aux[1:]
    return obj

  @property
  def shape(self) -> tuple[int, ...]:
    """The logical shape (what :meth:`dequantize` returns)."""
    shape = list(self.scales.shape)
    shape[self.axis] = self.length
    return tuple(shape)

  @property
  def ndim(self) -> int:
    return len(self.scales.shape)

  @property
  def size(self) -> int:
    return int(np.prod(self.shape, dtype=np.int64))

  @property
  def dtype(self) -> np.dtype:
    """The element dtype (``float4_e2m1fn``, ``float6_e2m3fn``, ``int8``...)."""
    return self.fmt.dtype

  @property
  def nbytes(self) -> int:
    """Bytes held: packed elements, scale codes and the tensor scale."""
    n = _nbytes(self.data) + _nbytes(self.scales)
    return n + (0 if self.tensor_scale is None else _nbytes(self.tensor_scale))

  def dequantize(self, dtype: Any = jnp.float32) -> jax.Array:
    """The values ``element * scale`` (see :func:`dequantize`)."""
    return dequantize(self, dtype)

  def __repr__(self) -> str:
    return (f"MXArray({self.fmt.name}, shape={self.shape}, axis={self.axis}, "
            f"block_size={self.block_size})")


def _nbytes(x) -> int:
  return int(np.prod(x.shape, dtype=np.int64)) * np.dtype(x.dtype).itemsize


# -- quantize / dequantize -----------------------------------------------------

def _to_blocks(x, axis: int, block_size: int):
  """Moves ``axis`` last, pads it to whole blocks: (..., n_blocks, block)."""
  x = jnp.moveaxis(x, axis, -1)
  n = x.shape[-1]
  padded = -(-n // block_size) * block_size
  if padded != n:
    widths = [(0, 0)] * (x.ndim - 1) + [(0, padded - n)]
    x = jnp.pad(x, widths)
  return x.reshape(*x.shape[:-1], padded // block_size, block_size)


_NV_SCALE_ROUNDING = {"floor": "down", "ceil": "up", "rceil": "up",
                      "even": "nearest"}
# nvfp4's tensor scale: the smallest 2^j with amax <= e2m1 max * e4m3 max * 2^j.
_NV_RANGE = 6.0 * 448.0


def _quantize_mx(bits, rand, mx: MXFormat, mode: str, rounding: str):
  amax = jnp.max(bits & 0x7FFFFFFF, axis=-1)  # NaN sorts above Inf
  bad, zero = amax >= _INF, amax == 0
  k = _scale_exponents(jnp.where(bad | zero, _U32(0x3F800000), amax), mx, mode)
  k = jnp.where(zero, -127, k)
  scales = jnp.where(bad, 255, k + 127).astype(jnp.uint8)
  y = _ldexp(_finite_magnitude(bits), -k[..., None])
  codes = _element_codes((bits & _U32(0x80000000)) | y, rand, mx, rounding)
  codes = jnp.where(bad[..., None], jnp.asarray(_nan_fill(mx), codes.dtype),
                    codes)
  return codes, scales, None


def _finite_magnitude(bits):
  mag = bits & 0x7FFFFFFF
  return jnp.where(mag >= _INF, _U32(0), mag)


def _quantize_nv(bits, rand, mx: MXFormat, mode: str, rounding: str):
  bmax = jnp.max(bits & 0x7FFFFFFF, axis=-1)  # NaN sorts above Inf
  bad = bmax >= _INF
  # The tensor's amax is over the blocks without NaN or Inf (those decode to
  # NaN whatever their scale); from block maxima, so x is read once for it.
  bmax = jnp.where(bad, _U32(0), bmax)
  tamax = jnp.max(bmax, initial=0)
  e, s = _split(jnp.where(tamax == 0, _U32(0x3F800000), tamax))
  j = e - 127 - math.floor(math.log2(_NV_RANGE))
  j = j + ((s & 0x7FFFFF) > _frac_bits(_NV_RANGE)).astype(_I32)
  j = jnp.where(tamax == 0, 0, jnp.clip(j, -126, 127))
  tensor_scale = lax.bitcast_convert_type(((j + 127) << 23).astype(_U32),
                                          jnp.float32)
  bamax = _ldexp(bmax, -j)  # ldexp is monotone: the block max of x / 2^j
  # Division is correctly rounded, and a quotient by 6 (or by a 4-bit scale,
  # below) never rounds onto a rounding boundary of a coarser grid unless it
  # is exactly there, so rounding the float32 quotient again is exact.
  q = lax.bitcast_convert_type(bamax, jnp.float32) / np.float32(6.0)
  scale_rounding = _NV_SCALE_ROUNDING[mode]
  sc = rounding_lib.round_to_codes(q, mx.scale_name, rounding=scale_rounding)
  if scale_rounding == "up":  # x / 2^j or q may be below float32's range
    sc = jnp.where((bmax > 0) & (sc == 0), jnp.uint8(1), sc)
  sc = jnp.where(bad, jnp.uint8(mx.scale.nan_code), sc)
  sv = lax.bitcast_convert_type(sc, mx.scale.dtype).astype(jnp.float32)

  # |x| / 2^j <= 2688: exact except below float32's normal range, where the
  # quotients by the scale round to zero either way (their sign is kept).
  xs = _ldexp(_finite_magnitude(bits), -j)
  ym = lax.bitcast_convert_type(xs, jnp.float32) / sv[..., None]
  ym = lax.bitcast_convert_type(ym, _U32)
  ym = jnp.where((xs < 0x800000) | (sc == 0)[..., None], _U32(0), ym)
  codes = _element_codes((bits & _U32(0x80000000)) | ym, rand, mx, rounding)
  codes = jnp.where(bad[..., None], jnp.uint8(0), codes)
  return codes, sc, tensor_scale


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5, 6))
def _quantize_jit(x, rand, fmt_name: str, block_size: int, axis: int,
                  mode: str, rounding: str):
  mx = _MX_FORMATS[fmt_name]
  bits = lax.bitcast_convert_type(_to_blocks(x, axis, block_size), _U32)
  if rand is not None:
    rand = _to_blocks(rand, axis, block_size)
  quantize_blocks = _quantize_mx if mx.power_of_two_scales else _quantize_nv
  codes, scales, tensor_scale = quantize_blocks(bits, rand, mx, mode, rounding)
  codes = mx_pack.merge_last(codes)
  if mx.bits == 8 and mx.element is not _INT8:
    data = lax.bitcast_convert_type(codes, mx.element.dtype)
  else:
    data = mx_pack.pack(codes, mx.bits) if mx.bits < 8 else codes
  return (jnp.moveaxis(data, -1, axis), jnp.moveaxis(scales, -1, axis),
          tensor_scale)


def _check_block_size(block_size, mx: MXFormat, fn: str) -> int:
  if block_size is None:
    return mx.block_size
  if (isinstance(block_size, bool)
      or not isinstance(block_size, (int, np.integer)) or block_size < 1):
    raise ValueError(f"`block_size` argument to `{fn}` must be a positive "
                     f"integer, got {block_size!r}")
  per = mx_pack.GROUPS[mx.bits][0]
  if block_size % per:
    raise ValueError(f"`block_size` argument to `{fn}` must be a multiple of "
                     f"{per} for {mx.name} ({per} elements share a packed "
                     f"group), got {block_size}")
  return int(block_size)


def _check_axis(axis, ndim: int, fn: str) -> int:
  if ndim == 0:
    raise ValueError(f"`x` argument to `{fn}` must have at least one axis to "
                     "block, got a scalar")
  if (isinstance(axis, bool) or not isinstance(axis, (int, np.integer))
      or not -ndim <= axis < ndim):
    raise ValueError(f"`axis` argument to `{fn}` must be an axis of an array "
                     f"with {ndim} dimensions, got {axis!r}")
  return int(axis) % ndim - ndim


def quantize(x: Any, fmt: str | MXFormat, *, block_size: int | None = None,
             axis: int = -1, scale_mode: ScaleMode = "floor",
             rounding: str = "nearest", key: jax.Array | None = None,
             pad: bool = False) -> MXArray:
  """Quantizes ``x`` into a block format, spec-exact.

  Each run of ``block_size`` consecutive elements along ``axis`` shares one
  scale chosen from the block's largest magnitude ``amax``; elements are
  ``x / scale`` rounded (to nearest even by default) and saturated to the
  element format's largest value.

  Scale modes for MX formats (scale = 2^k, emax = floor(log2(element max))):

  * ``"floor"`` (OCP MX v1.0): k = floor(log2 amax) - emax. The largest
    element may saturate: in mxfp8_e4m3 a block with amax 960 gets scale 2,
    960 / 2 = 480 saturates to 448, and 960 decodes to 896.
  * ``"rceil"``: the smallest 2^k with amax <= max * 2^k; never saturates
    (960 -> scale 4, decodes to 960).
  * ``"ceil"``: k = ceil(log2 amax) - emax; never saturates, may waste up to
    one binade (960 -> scale 4).
  * ``"even"``: like floor after rounding amax to the element's mantissa
    width (half up), so amax just below a power of two moves up a binade
    (960 = 1.875 * 2^9 stays in its binade in e4m3: scale 2, 896; 1000 moves:
    scale 4).

  k is clamped to E8M0's range [-127, 127]. An all-zero block gets the
  smallest scale (code 0, 2^-127) and decodes to zeros; a block holding any
  NaN or Inf gets scale code 0xFF and decodes to NaN in every element.

  ``nvfp4`` (blocks of 16, E4M3 scales): the per-tensor scale is the power of
  two 2^j, the smallest with amax <= 6 * 448 * 2^j, amax taken over the
  blocks without NaN or Inf. It is always a power of two, which keeps every
  step exact; NVIDIA's recipe uses amax / 2688 instead, within a factor 2
  (``docs/mx.md`` shows how to use such a scale). Block scales are
  amax / (6 * 2^j) rounded into E4M3: down for ``"floor"``, up for
  ``"ceil"`` and ``"rceil"``, to nearest for ``"even"``.
  A block with NaN or Inf gets the E4M3 NaN scale (0x7F).

  Args:
    x: real array (float32 is exact; other dtypes are converted to float32).
    fmt: ``"mxfp8_e4m3"``, ``"mxfp8_e5m2"``, ``"mxfp6_e2m3"``,
      ``"mxfp6_e3m2"``, ``"mxfp4_e2m1"``, ``"mxint8"`` or ``"nvfp4"``.
    block_size: elements per block; None for the format's own (32, or 16
      for nvfp4). fp4 needs an even size, fp6 a multiple of 4.
    axis: the axis cut into blocks.
    scale_mode: ``"floor"``, ``"rceil"``, ``"ceil"`` or ``"even"``.
    rounding: element rounding: ``"nearest"`` (ties to even) or
      ``"stochastic"`` (with ``key``; up with probability equal to the
      fraction of the gap). Elements always saturate.
    key: PRNG key for stochastic rounding (32 random bits per element).
    pad: if the axis length is not a multiple of ``block_size``, pad the last
      block with zeros (the logical shape is kept). Without it such lengths
      raise ``ValueError``.

  Returns:
    An :class:`MXArray`.

  Raises:
    ValueError: unknown format, scale mode or rounding; bad block size or
      axis; an axis length that is not a multiple of the block size without
      ``pad=True``; stochastic rounding without a key.
    TypeError: non-numeric ``x`` or a bad key.

  >>> import jax.numpy as jnp
  >>> x = jnp.array([960.0, 3.0, -1.0, 0.0] * 8)
  >>> quantize(x, "mxfp8_e4m3").dequantize()[:3]
  Array([896.,   3.,  -1.], dtype=float32)
  >>> quantize(x, "mxfp8_e4m3", scale_mode="rceil").dequantize()[:3]
  Array([960.,   3.,  -1.], dtype=float32)
  >>> a = quantize(jnp.ones(4096), "mxfp4_e2m1")
  >>> a.data.nbytes, a.scales.nbytes
  (2048, 128)
  """
  fn = "quantize"
  mx = get_format(fmt, fn=fn)
  validate.check_choice(scale_mode, SCALE_MODES, "scale_mode", fn)
  validate.check_choice(rounding, ROUNDINGS, "rounding", fn)
  x32 = rounding_lib.to_float32(x, fn=fn)
  axis = _check_axis(axis, x32.ndim, fn)
  block_size = _check_block_size(block_size, mx, fn)
  n = x32.shape[axis]
  if n % block_size and not pad:
    raise ValueError(
        f"`quantize`: axis {axis} of `x` has length {n}, not a multiple of "
        f"block_size={block_size}; pass pad=True to pad the last block with "
        "zeros")
  rand = None
  if rounding == "stochastic":
    if key is None:
      raise ValueError("`quantize` with rounding='stochastic' needs a `key` "
                       "argument (a jax.random key)")
    rand = jax.random.bits(validate.check_key(key, fn), x32.shape, _U32)
  data, scales, tensor_scale = _quantize_jit(x32, rand, mx.name, block_size,
                                             axis, scale_mode, rounding)
  return MXArray(data, scales, mx, axis=axis, length=n, block_size=block_size,
                 tensor_scale=tensor_scale)


def _unpacked_codes(a: MXArray):
  """Element codes, one per element, blocked axis last: (..., padded)."""
  data = jnp.moveaxis(a.data, a.axis, -1)
  if a.fmt.bits == 8 and a.fmt.element is not _INT8:
    return lax.bitcast_convert_type(data, jnp.uint8)
  return mx_pack.unpack(data, a.fmt.bits) if a.fmt.bits < 8 else data


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6))
def _dequantize_jit(data, scales, tensor_scale, fmt_name: str, axis: int,
                    length: int, block_size: int):
  a = MXArray(data, scales, fmt_name, axis=axis, length=length,
              block_size=block_size, tensor_scale=tensor_scale)
  mx = a.fmt
  codes = _unpacked_codes(a)
  codes = codes.reshape(*codes.shape[:-1], codes.shape[-1] // block_size,
                        block_size)
  vals = _element_values(codes, mx)
  sc = jnp.moveaxis(scales, axis, -1)
  if mx.power_of_two_scales:
    k = sc.astype(_I32) - 127
    nan_block = sc == 255
  else:
    sv = lax.bitcast_convert_type(sc, mx.scale.dtype).astype(jnp.float32)
    vals = vals * sv[..., None]  # exact: <= 6 significant bits, >= 2^-10
    ts = lax.bitcast_convert_type(tensor_scale, _U32)
    ts = ts.reshape(ts.shape + (1,) * (sc.ndim - ts.ndim))
    k = (ts >> 23).astype(_I32) - 127
    nan_block = (sc & 0x7F) == 0x7F
  bits = lax.bitcast_convert_type(vals, _U32)
  mag, sign = bits & 0x7FFFFFFF, bits & _U32(0x80000000)
  finite = mag < _INF
  out = _ldexp(jnp.where(finite, mag, _U32(0)), k[..., None])
  out = jnp.where(finite, sign | out, bits)
  out = jnp.where(nan_block[..., None], _U32(_NAN), out)
  out = lax.bitcast_convert_type(out, jnp.float32)
  out = mx_pack.merge_last(out)[..., :length]
  return jnp.moveaxis(out, -1, axis)


def dequantize(a: MXArray, dtype: Any = jnp.float32) -> jax.Array:
  """Decodes an :class:`MXArray` to ``dtype``: ``element * scale``, exactly.

  The float32 result is the exact value rounded to nearest even (only values
  below float32's normal range round, and beyond its range give Inf),
  computed with integer exponent arithmetic so XLA's flushing of float32
  subnormals cannot touch it. Other dtypes are rounded from float32.
  Blocks with a NaN scale decode to NaN in every element.

  Args:
    a: the :class:`MXArray`.
    dtype: a floating dtype or format name the installed JAX holds (float32
      by default or for None; float64 where x64 is on; bfloat16, float16,
      float8 and float4 types, rounded from float32 by XLA's conversion).

  Returns:
    A ``jax.Array`` of ``a.shape`` and ``dtype``.

  Raises:
    TypeError: for a non-MXArray ``a`` or a non-floating ``dtype``.
    ValueError: for an unknown dtype name.
    NotImplementedError: for float6 dtypes, which XLA can't hold; their codes
      are ``jaxfp8.encode(a.dequantize(), "float6_e2m3fn")``.

  >>> import jax.numpy as jnp
  >>> a = quantize(jnp.full((32,), 2.0**-130), "mxfp8_e4m3")
  >>> float(dequantize(a)[0]) == 2.0**-130
  True
  """
  if not isinstance(a, MXArray):
    raise TypeError(f"`a` argument to `dequantize` must be an MXArray, got "
                    f"{type(a).__name__}")
  dtype = _check_dtype(dtype, "dequantize")
  out = _dequantize_jit(a.data, a.scales, a.tensor_scale, a.fmt.name, a.axis,
                        a.length, a.block_size)
  return out if dtype == np.float32 else out.astype(dtype)


def _check_dtype(dtype: Any, fn: str) -> np.dtype:
  """A floating result dtype the backend holds (names and aliases too)."""
  if dtype is None:
    return np.dtype(np.float32)
  try:
    dt = np.dtype(dtype)
  except TypeError:  # not a NumPy name: a jaxfp8 alias ("e4m3") or unknown
    dt = formats.get(dtype, arg="dtype", fn=fn).dtype
  if not jnp.issubdtype(dt, jnp.floating):
    raise TypeError(f"`dtype` argument to `{fn}` must be a floating dtype, "
                    f"got {dt.name}")
  if formats.is_narrow(dt) and not formats.get(dt).native:
    raise NotImplementedError(
        f"`dtype` argument to `{fn}`: the installed XLA can't hold {dt.name} "
        f"arrays; dequantize to a wide float, or take the codes with "
        f"jaxfp8.encode(a.dequantize(), {dt.name!r})")
  return dt
