"""The arithmetic of MX quantization: block scales and elements, spec-exact.

:func:`quantize_blocks` turns a float32 array into packed element codes and
scale codes, :func:`dequantize_blocks` turns them back into float32 values;
:mod:`jaxfp8._src.mx.array` checks the arguments and wraps the results in an
:class:`~jaxfp8._src.mx.array.MXArray`.

Every step that touches a scale is integer arithmetic on float32 bit
patterns: the smallest E8M0 scale, 2^-127, is itself a float32 subnormal, and
XLA on CPU flushes those to zero in float arithmetic. Powers of two are
applied by adding to the exponent field, with round-to-nearest-even when a
result lands among the subnormals. Nearest-even quantization takes a fast
path (a few vector operations per element, see "the fast path" below) for
tensors whose blocks all have scales where it is exact, which is all but
tensors of blocks near 2^-100; the general path stays for those.
"""
from __future__ import annotations

import functools
import math
from typing import Literal

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.numerics import codes as codes_lib
from jaxfp8._src import compat
from jaxfp8._src.mx import pack as mx_pack
from jaxfp8._src.numerics import rounding as rounding_lib
from jaxfp8._src.mx.formats import get_format
from jaxfp8._src.mx.formats import INT8
from jaxfp8._src.mx.formats import MXFormat

ScaleMode = Literal["floor", "rceil", "ceil", "even"]
SCALE_MODES: tuple[str, ...] = ("floor", "rceil", "ceil", "even")
ROUNDINGS: tuple[str, ...] = rounding_lib.NEAREST_OR_STOCHASTIC

_U32, _I32 = jnp.uint32, jnp.int32
_INF = 0x7F800000
_NAN = 0x7FC00000


# -- integer arithmetic on float32 bit patterns --------------------------------

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
  return rounding_lib.f32_bits(v) & 0x7FFFFF


def _finite_magnitude(bits):
  mag = bits & 0x7FFFFFFF
  return jnp.where(mag >= _INF, _U32(0), mag)


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

def element_codes(bits: jax.Array, mx: MXFormat, *, rounding: str = "nearest",
                  rand: jax.Array | None = None) -> jax.Array:
  """Element codes of float32 bit patterns already divided by their scale.

  Rounds (``"nearest"`` or ``"stochastic"`` with 32 bits of ``rand`` per
  element) and saturates into the element format of ``mx``.

  Args:
    bits: uint32 float32 bit patterns, finite.
    mx: the MX format.
    rounding: one of :data:`ROUNDINGS`.
    rand: uint32 random bits of ``bits``' shape, for stochastic rounding.

  Returns:
    One code per element: uint8 codes of the float formats (unpacked), int8
    integers ``value * 64`` for MXINT8.
  """
  elem = mx.element
  if elem is INT8:
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


def element_values(codes: jax.Array, mx: MXFormat) -> jax.Array:
  """The exact float32 values of unpacked element codes.

  The inverse of :func:`element_codes`: the one decoder,
  :func:`jaxfp8._src.numerics.codes.values_of_codes`, for the float formats, and
  ``int / 64`` for MXINT8.
  """
  elem = mx.element
  if elem is INT8:
    return codes.astype(jnp.float32) * np.float32(2.0**-6)
  if elem.bits == 8:
    return _fp8_values(codes, elem)
  return codes_lib.values_of_codes(codes, elem)


def _fp8_values(codes, elem):
  """:func:`codes_lib.values_of_codes` of fp8 codes, in bit operations.

  XLA's fp8 -> float32 convert, fused with the scaling after it, makes MX
  dequantize some 10% slower than these integer operations (the tests
  compare both on every code).
  """
  m = elem.mantissa_bits
  c = codes.astype(_U32) & 0xFF
  mag = c & 0x7F
  normal = (mag << (23 - m)) + _U32((127 - elem.bias) << 23)
  sub = lax.bitcast_convert_type(
      mag.astype(_I32).astype(jnp.float32) * np.float32(elem.min_subnormal),
      _U32)  # mag < 2^m here: the subnormal's mantissa, exactly
  v = jnp.where(mag < (1 << m), sub, normal)
  if elem.has_inf:  # e5m2: exponent field all ones
    inf_code = elem.inf_code & 0x7F
    v = jnp.where(mag >= inf_code,
                  jnp.where(mag == inf_code, _U32(_INF), _U32(_NAN)), v)
  else:  # e4m3fn: only S.1111.111 is NaN
    v = jnp.where(mag == 0x7F, _U32(_NAN), v)
  return lax.bitcast_convert_type(v | ((c >> 7) << 31), jnp.float32)


def _scale_values(scales: jax.Array, mx: MXFormat) -> jax.Array:
  """float32 values of nvfp4's E4M3 block-scale codes (NaN for the NaN code),
  by :func:`_fp8_values`: XLA CPU's convert costs some 2 ns per element."""
  if scales.dtype != jnp.uint8:
    scales = lax.bitcast_convert_type(scales, jnp.uint8)
  return _fp8_values(scales, mx.scale)


def _e8m0_parts(scales: jax.Array) -> tuple[jax.Array, jax.Array]:
  """E8M0 scale codes -> (their exponents, int32; whether each is NaN)."""
  return scales.astype(_I32) - 127, scales == 255


def _nan_fill(mx: MXFormat) -> int:
  """Element code stored in a NaN block (the element NaN where there is one)."""
  elem = mx.element
  return elem.nan_code if elem.has_nan else 0


# -- the fast path -------------------------------------------------------------
# Since a scale is a power of two, x / 2^k has x's significand: in the
# element's normal range the rounding position does not depend on k, and
# below it x / 2^k in units of the element's smallest subnormal is below
# 2^mantissa_bits, where adding 2^23 in float32 rounds it to an integer
# (nearest even, the hardware's). That is a few vector ops per element; the
# exact path above (`_ldexp`, `round_to_codes`) stays for tensors with blocks
# of tiny scale, where float32 subnormal inputs matter and XLA on CPU would
# flush them.

_MAGIC = np.float32(2.0**23)
_MAGIC_BITS = 0x4B000000


def _block_max(flat_bits, block_size: int):
  """Block maxima of magnitudes: float32 bits (..., padded) -> (..., n_blocks).

  Each block is viewed as rows of 8 and reduced over both axes, which XLA on
  CPU vectorizes along the rows; a reduce over the 32 minor elements of
  (..., n_blocks, 32) runs element by element (4x slower: the time of the
  whole cast). The view is taken of the unblocked array: from the blocked
  one XLA folds it back into that slow reduce.
  """
  n = flat_bits.shape[-1] // block_size
  if block_size % 8 or block_size == 8:
    rows = flat_bits.reshape(*flat_bits.shape[:-1], n, 1, block_size)
  else:
    rows = flat_bits.reshape(*flat_bits.shape[:-1], n, block_size // 8, 8)
  rows = rows & 0x7FFFFFFF
  if block_size == 16 and compat.MX_MAX_OF_ROW_PAIRS:
    return jnp.max(jnp.maximum(rows[..., 0, :], rows[..., 1, :]), axis=-1)
  return jnp.max(rows, axis=(-2, -1))


def _pow2_float(e):
  """2.0^e as float32 for int32 ``e`` in [-126, 127]."""
  return lax.bitcast_convert_type(((e + 127) << 23).astype(_U32), jnp.float32)


def _fast_min_exponent(mx: MXFormat) -> int:
  """The smallest block exponent at which :func:`_fast_element_codes` is exact.

  Its one approximation is XLA's flushing of float32 subnormal inputs x to
  zero; they round to (signed) zero in the element format exactly when
  x / 2^k is at most half its smallest subnormal, for every such x when
  2^-126 / 2^k <= 2^(min_exponent - mantissa_bits - 1).
  """
  elem = mx.element
  return -125 + elem.mantissa_bits - elem.min_exponent


def _max_code(elem) -> int:
  """Code of the element format's largest magnitude."""
  m = elem.mantissa_bits
  mant = (rounding_lib.f32_bits(elem.max) >> (23 - m)) & ((1 << m) - 1)
  return ((math.floor(math.log2(elem.max)) + elem.bias) << m) | mant


def _fast_element_codes(bits: jax.Array, k: jax.Array, mx: MXFormat
                       ) -> jax.Array:
  """:func:`element_codes` of ``x / 2^k`` (nearest even), computed from x.

  Args:
    bits: uint32 float32 bit patterns of x, (..., n_blocks, block); finite
      in blocks whose codes are kept.
    k: int32 block exponents (..., n_blocks), at least
      :func:`_fast_min_exponent` and at most 127.
    mx: the MX format (power-of-two scales).

  Returns:
    The codes :func:`element_codes` gives for ``ldexp(x, -k)``.
  """
  elem = mx.element
  m, emin = elem.mantissa_bits, elem.min_exponent
  mag = bits & 0x7FFFFFFF
  k = k[..., None]
  z = lax.bitcast_convert_type(mag, jnp.float32) * _pow2_float(m - emin - k)
  low = lax.bitcast_convert_type(z + _MAGIC, _U32) - _U32(_MAGIC_BITS)
  neg = (bits >> 31) == 1
  if elem is INT8:  # a uniform grid: all of it is "below the normal range"
    c = jnp.minimum(low, _U32(127)).astype(_I32)
    return jnp.where(neg, -c, c).astype(jnp.int8)
  sh = 23 - m
  r = (mag + ((1 << (sh - 1)) - 1) + ((mag >> sh) & 1)) >> sh
  high = jnp.minimum(r - ((127 - elem.bias + k) << m).astype(_U32),
                     _U32(_max_code(elem)))
  normal = mag >= ((emin + 127 + k) << 23).astype(_U32)
  code = jnp.where(normal, high, low)
  code = code | jnp.where(neg, _U32(1 << (elem.bits - 1)), _U32(0))
  return code.astype(jnp.uint8)


def _mul_pow2(v: jax.Array, k: jax.Array) -> jax.Array:
  """``v * 2^k``, rounded to nearest even (float32 subnormals kept).

  Args:
    v: float32 values whose finite nonzero magnitudes are normal and at
      least 2^-104 (MX elements, times nvfp4's block scales, are).
    k: int32 exponents in [-127, 127], broadcastable against ``v``.

  Returns:
    float32: exact where the product is normal, Inf beyond float32's range,
    nearest even among the subnormals (which XLA's float multiply on CPU
    would flush); NaN and Inf stay as they are.
  """
  bits = lax.bitcast_convert_type(v, _U32)
  mag, sign = bits & 0x7FFFFFFF, bits & _U32(0x80000000)
  normal = mag >= (jnp.maximum(1 - k, 1) << 23).astype(_U32)
  big = jnp.minimum(mag + (k << 23).astype(_U32), _U32(_INF))
  # A subnormal product is an integer multiple of 2^-149: v * 2^(k + 149),
  # below 2^23, rounded to an integer by the float add. (The factor is capped
  # at 2^127, for k > -22, where only |v| < 2^-104 could give one.)
  z = lax.bitcast_convert_type(mag, jnp.float32) * _pow2_float(
      jnp.minimum(k + 149, 127))
  small = lax.bitcast_convert_type(z + _MAGIC, _U32) - _U32(_MAGIC_BITS)
  out = jnp.where(normal, big, small) | sign
  out = jnp.where(mag >= _INF, bits, out)
  return lax.bitcast_convert_type(out, jnp.float32)


# -- quantize ------------------------------------------------------------------

def _padded(x, axis: int, block_size: int):
  """Moves ``axis`` last and pads it with zeros to whole blocks."""
  x = jnp.moveaxis(x, axis, -1)
  n = x.shape[-1]
  padded = -(-n // block_size) * block_size
  if padded != n:
    widths = [(0, 0)] * (x.ndim - 1) + [(0, padded - n)]
    x = jnp.pad(x, widths)
  return x


def _blocks(x, block_size: int):
  """(..., padded) -> (..., n_blocks, block_size)."""
  return x.reshape(*x.shape[:-1], x.shape[-1] // block_size, block_size)


_NV_SCALE_ROUNDING = {"floor": "down", "ceil": "up", "rceil": "up",
                      "even": "nearest"}
# nvfp4's tensor scale: the smallest 2^j with amax <= e2m1 max * e4m3 max * 2^j.
_NV_RANGE = 6.0 * 448.0


def _nan_blocks(codes, bad, mx: MXFormat):
  """What a branch returns: codes, NaN blocks filled, packed in part.

  Codes (..., n_blocks, block) with the NaN fill in blocks holding NaN or
  Inf; fp8 codes bitcast to their element dtype, narrower ones through
  :func:`mx_pack.pack_groups` (6-bit codes only where
  ``compat.MX_PACK_6BIT_IN_BRANCH``: on JAX 0.11 they pack faster in one loop
  after the branch); :func:`_storage` finishes.
  """
  fill = _nan_fill(mx) if mx.power_of_two_scales else 0
  codes = jnp.where(bad[..., None], jnp.asarray(fill, codes.dtype), codes)
  if mx.bits == 8 and mx.element is not INT8:  # in-branch; after it, a copy
    return lax.bitcast_convert_type(codes, mx.element.dtype)
  return mx_pack.pack_groups(codes, mx.bits) if _groups_in_branch(mx) else codes


def _groups_in_branch(mx: MXFormat) -> bool:
  """Whether a branch packs its codes into groups (:func:`_nan_blocks`), so
  that :func:`_storage` only turns the groups into bytes."""
  return mx.bits < 8 and (mx.bits != 6 or compat.MX_PACK_6BIT_IN_BRANCH)


def _storage(groups, mx: MXFormat):
  """MXArray data from :func:`_nan_blocks`' result."""
  groups = mx_pack.merge_last(groups)
  if mx.bits == 8:  # fp8 elements have their dtype already
    return groups
  if _groups_in_branch(mx):
    return mx_pack.pack_bytes(groups, mx.bits)
  return mx_pack.pack(groups, mx.bits)  # the branch left the codes unpacked


def _one_of(fast_ok, fast, exact, rounding: str, *operands):
  """``exact(*operands)``, or ``fast(*operands)`` where it is exact.

  A ``lax.cond``: one branch runs. The branches take the float32 blocks, not
  their bits, and return codes packed in part (:func:`_nan_blocks`): XLA
  then copies nothing into them, and finishes the packing in a loop of its
  own (fused into the element arithmetic, it runs element by element, 8x
  slower).
  """
  if rounding != "nearest":
    return exact(*operands)
  return lax.cond(fast_ok, fast, exact, *operands)


def _quantize_mx(xp, rand, mx: MXFormat, block_size: int, mode: str,
                 rounding: str):
  # NaN sorts above Inf
  amax = _block_max(lax.bitcast_convert_type(xp, _U32), block_size)
  xb = _blocks(xp, block_size)
  bad, zero = amax >= _INF, amax == 0
  k = _scale_exponents(jnp.where(bad | zero, _U32(0x3F800000), amax), mx, mode)
  k = jnp.where(zero, -127, k)
  scales = jnp.where(bad, 255, k + 127).astype(jnp.uint8)
  k_min = _fast_min_exponent(mx)

  # The branches take the scale codes alone: a per-block array is a pass.
  def exact(xb, s, rand):
    k, bad = _e8m0_parts(s)
    bits = lax.bitcast_convert_type(xb, _U32)
    y = _ldexp(_finite_magnitude(bits), -k[..., None])
    codes = element_codes((bits & _U32(0x80000000)) | y, mx,
                          rounding=rounding, rand=rand)
    return _nan_blocks(codes, bad, mx)

  def fast(xb, s, rand):
    del rand
    k, bad = _e8m0_parts(s)
    # All-zero and NaN blocks decode the same whatever k their elements take.
    codes = _fast_element_codes(lax.bitcast_convert_type(xb, _U32),
                               jnp.clip(k, k_min, 127), mx)
    return _nan_blocks(codes, bad, mx)

  fast_ok = jnp.all(bad | zero | (k >= k_min))
  codes = _one_of(fast_ok, fast, exact, rounding, xb, scales, rand)
  return _storage(codes, mx), scales, None


# Below this tensor exponent, float32 subnormal inputs may quantize to nonzero
# nvfp4 elements: x / 2^j / scale > 2^-126 / 2^j / 2^-9 exceeds 0.25, half
# the smallest e2m1 subnormal.
_NV_FAST_MIN_EXPONENT = -115


def _quantize_nv(xp, rand, mx: MXFormat, block_size: int, mode: str,
                 rounding: str):
  # NaN sorts above Inf
  bmax = _block_max(lax.bitcast_convert_type(xp, _U32), block_size)
  xb = _blocks(xp, block_size)
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
  sc = _scale_codes(q, mx.scale, scale_rounding)
  if scale_rounding == "up":  # x / 2^j or q may be below float32's range
    sc = jnp.where((bmax > 0) & (sc == 0), jnp.uint8(1), sc)
  sc = jnp.where(bad, jnp.uint8(mx.scale.nan_code), sc)
  sv = _scale_values(sc, mx)

  # |x| / 2^j <= 2688: exact except below float32's normal range, where the
  # quotients by the scale round to zero either way (their sign is kept).
  def exact(xb, j, sv, rand):
    bad = jnp.isnan(sv)  # the NaN scale code (no flag array of its own)
    bits = lax.bitcast_convert_type(xb, _U32)
    xs = _ldexp(_finite_magnitude(bits), -j)
    ym = lax.bitcast_convert_type(xs, jnp.float32) / sv[..., None]
    ym = lax.bitcast_convert_type(ym, _U32)
    ym = jnp.where((xs < 0x800000) | (sv == 0)[..., None], _U32(0), ym)
    codes = element_codes((bits & _U32(0x80000000)) | ym, mx,
                          rounding=rounding, rand=rand)
    return _nan_blocks(codes, bad, mx)

  def fast(xb, j, sv, rand):
    del rand
    bad = jnp.isnan(sv)  # the NaN scale code
    # x / 2^j on the bits: exact where x and the quotient are normal, zero
    # where either is not (at j >= _NV_FAST_MIN_EXPONENT that is exact too).
    bits = lax.bitcast_convert_type(xb, _U32)
    mag = (bits & 0x7FFFFFFF).astype(_I32)
    xs = mag - (j << 23)
    xs = jnp.where((mag >= 0x800000) & (xs >= 0x800000), xs, 0)
    ym = lax.bitcast_convert_type(xs, jnp.float32) / sv[..., None]
    ym = lax.bitcast_convert_type(ym, _U32)
    ym = jnp.where((sv == 0)[..., None], _U32(0), ym)
    codes = _fast_element_codes((bits & _U32(0x80000000)) | ym,
                               jnp.zeros(sv.shape, _I32), mx)
    return _nan_blocks(codes, bad, mx)

  codes = _one_of(j >= _NV_FAST_MIN_EXPONENT, fast, exact, rounding, xb, j, sv,
                  rand)
  return _storage(codes, mx), sc, tensor_scale


def _scale_codes(q, fmt, rounding: str):
  """``round_to_codes(q, fmt, rounding=...)`` (saturating) for q >= 0 finite.

  The fast path's arithmetic with directed roundings, for nvfp4's block
  scales: the generic rounding costs as much as the whole cast here. Float32
  subnormal q (flushed to 0 by XLA) give 0 also where rounding up gives the
  smallest subnormal: the caller sets that one.
  """
  m, emin = fmt.mantissa_bits, fmt.min_exponent
  b = lax.bitcast_convert_type(q, _U32)
  sh = 23 - m
  z = q * np.float32(2.0**(m - emin))  # below the normal range: in units
  if rounding == "down":                # of the smallest subnormal
    r, low = b >> sh, z.astype(_U32)
  elif rounding == "up":
    r = (b + ((1 << sh) - 1)) >> sh
    t = z.astype(_U32)
    low = t + (t.astype(jnp.float32) < z).astype(_U32)
  else:
    r = (b + ((1 << (sh - 1)) - 1) + ((b >> sh) & 1)) >> sh
    low = lax.bitcast_convert_type(z + _MAGIC, _U32) - _U32(_MAGIC_BITS)
  high = jnp.minimum(r - _U32((127 - fmt.bias) << m), _U32(_max_code(fmt)))
  normal = b >= _U32((emin + 127) << 23)
  return jnp.where(normal, high, low).astype(jnp.uint8)


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5, 6))
def _quantize_jit(x, rand, fmt_name: str, block_size: int, axis: int,
                  mode: str, rounding: str):
  mx = get_format(fmt_name)
  xp = _padded(x, axis, block_size)
  if rand is not None:
    rand = _blocks(_padded(rand, axis, block_size), block_size)
  quantize = _quantize_mx if mx.power_of_two_scales else _quantize_nv
  data, scales, tensor_scale = quantize(xp, rand, mx, block_size, mode,
                                        rounding)
  return (jnp.moveaxis(data, -1, axis), jnp.moveaxis(scales, -1, axis),
          tensor_scale)


def quantize_blocks(x32: jax.Array, mx: MXFormat, *, block_size: int,
                    axis: int, scale_mode: str, rounding: str,
                    rand: jax.Array | None = None
                    ) -> tuple[jax.Array, jax.Array, jax.Array | None]:
  """The storage of ``x32`` in ``mx``: (data, scale codes, tensor scale).

  The arrays of an :class:`~jaxfp8._src.mx.array.MXArray`, laid out as its
  docstring describes; the arguments are checked by
  :func:`jaxfp8._src.mx.array.quantize`, which documents the scale modes.

  Args:
    x32: float32 array.
    mx: the MX format.
    block_size: elements per block (a multiple of the packing group).
    axis: the blocked axis, negative; its length is padded to whole blocks
      with zeros.
    scale_mode: one of :data:`SCALE_MODES`.
    rounding: one of :data:`ROUNDINGS`.
    rand: uint32 random bits of ``x32``'s shape for stochastic rounding.

  Returns:
    ``(data, scales, tensor_scale)``; ``tensor_scale`` is None for the MX
    formats (E8M0 scales) and a float32 scalar for nvfp4.
  """
  return _quantize_jit(x32, rand, mx.name, block_size, axis, scale_mode,
                       rounding)


# -- dequantize ----------------------------------------------------------------

def _unpacked_codes(data, mx: MXFormat, axis: int):
  """Element codes, one per element, blocked axis last: (..., padded)."""
  data = jnp.moveaxis(data, axis, -1)
  if mx.bits == 8 and mx.element is not INT8:
    return lax.bitcast_convert_type(data, jnp.uint8)
  return mx_pack.unpack(data, mx.bits) if mx.bits < 8 else data


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6))
def _dequantize_jit(data, scales, tensor_scale, fmt_name: str, axis: int,
                    length: int, block_size: int):
  mx = get_format(fmt_name)
  codes = _unpacked_codes(data, mx, axis)
  codes = codes.reshape(*codes.shape[:-1], codes.shape[-1] // block_size,
                        block_size)
  vals = element_values(codes, mx)
  sc = jnp.moveaxis(scales, axis, -1)
  if mx.power_of_two_scales:
    k, nan_block = _e8m0_parts(sc)
  else:
    sv = _scale_values(sc, mx)
    vals = vals * sv[..., None]  # exact: <= 6 significant bits, >= 2^-10
    ts = lax.bitcast_convert_type(tensor_scale, _U32)
    ts = ts.reshape(ts.shape + (1,) * (sc.ndim - ts.ndim))
    k = (ts >> 23).astype(_I32) - 127
    nan_block = (sc & 0x7F) == 0x7F
  out = _mul_pow2(vals, k[..., None])
  out = jnp.where(nan_block[..., None], np.float32(np.nan), out)
  out = mx_pack.merge_last(out)[..., :length]
  return jnp.moveaxis(out, -1, axis)


def dequantize_blocks(data: jax.Array, scales: jax.Array,
                      tensor_scale: jax.Array | None, mx: MXFormat, *,
                      axis: int, length: int, block_size: int) -> jax.Array:
  """float32 values ``element * scale`` of an MX storage, exactly rounded.

  The inverse of :func:`quantize_blocks`: ``data``, ``scales`` and
  ``tensor_scale`` as an :class:`~jaxfp8._src.mx.array.MXArray` holds them, cut to
  ``length`` along ``axis`` (negative). Blocks with a NaN scale give NaN.
  """
  return _dequantize_jit(data, scales, tensor_scale, mx.name, axis, length,
                         block_size)
