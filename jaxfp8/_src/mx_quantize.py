"""The arithmetic of MX quantization: block scales and elements, spec-exact.

:func:`quantize_blocks` turns a float32 array into packed element codes and
scale codes, :func:`dequantize_blocks` turns them back into float32 values;
:mod:`jaxfp8._src.mx` checks the arguments and wraps the results in an
:class:`~jaxfp8._src.mx.MXArray`.

Every step that touches a scale is integer arithmetic on float32 bit
patterns: the smallest E8M0 scale, 2^-127, is itself a float32 subnormal, and
XLA on CPU flushes those to zero in float arithmetic. Powers of two are
applied by adding to the exponent field, with round-to-nearest-even when a
result lands among the subnormals.
"""
from __future__ import annotations

import functools
import math
from typing import Literal

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src import codes as codes_lib
from jaxfp8._src import mx_pack
from jaxfp8._src import rounding as rounding_lib
from jaxfp8._src.mx_formats import get_format
from jaxfp8._src.mx_formats import INT8
from jaxfp8._src.mx_formats import MXFormat

ScaleMode = Literal["floor", "rceil", "ceil", "even"]
SCALE_MODES: tuple[str, ...] = ("floor", "rceil", "ceil", "even")
# Directed roundings would need the sticky bits of quotients below float32's
# range, which the scaled values don't keep; the MX spec asks for these two.
ROUNDINGS: tuple[str, ...] = ("nearest", "stochastic")

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
  :func:`jaxfp8._src.codes.values_of_codes`, for the float formats, and
  ``int / 64`` for MXINT8.
  """
  elem = mx.element
  if elem is INT8:
    return codes.astype(jnp.float32) * np.float32(2.0**-6)
  return codes_lib.values_of_codes(codes, elem)


def _nan_fill(mx: MXFormat) -> int:
  """Element code stored in a NaN block (the element NaN where there is one)."""
  elem = mx.element
  return elem.nan_code if elem.has_nan else 0


# -- quantize ------------------------------------------------------------------

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
  codes = element_codes((bits & _U32(0x80000000)) | y, mx, rounding=rounding,
                        rand=rand)
  codes = jnp.where(bad[..., None], jnp.asarray(_nan_fill(mx), codes.dtype),
                    codes)
  return codes, scales, None


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
  codes = element_codes((bits & _U32(0x80000000)) | ym, mx, rounding=rounding,
                        rand=rand)
  codes = jnp.where(bad[..., None], jnp.uint8(0), codes)
  return codes, sc, tensor_scale


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5, 6))
def _quantize_jit(x, rand, fmt_name: str, block_size: int, axis: int,
                  mode: str, rounding: str):
  mx = get_format(fmt_name)
  bits = lax.bitcast_convert_type(_to_blocks(x, axis, block_size), _U32)
  if rand is not None:
    rand = _to_blocks(rand, axis, block_size)
  quantize = _quantize_mx if mx.power_of_two_scales else _quantize_nv
  codes, scales, tensor_scale = quantize(bits, rand, mx, mode, rounding)
  codes = mx_pack.merge_last(codes)
  if mx.bits == 8 and mx.element is not INT8:
    data = lax.bitcast_convert_type(codes, mx.element.dtype)
  else:
    data = mx_pack.pack(codes, mx.bits) if mx.bits < 8 else codes
  return (jnp.moveaxis(data, -1, axis), jnp.moveaxis(scales, -1, axis),
          tensor_scale)


def quantize_blocks(x32: jax.Array, mx: MXFormat, *, block_size: int,
                    axis: int, scale_mode: str, rounding: str,
                    rand: jax.Array | None = None
                    ) -> tuple[jax.Array, jax.Array, jax.Array | None]:
  """The storage of ``x32`` in ``mx``: (data, scale codes, tensor scale).

  The arrays of an :class:`~jaxfp8._src.mx.MXArray`, laid out as its
  docstring describes; the arguments are checked by
  :func:`jaxfp8._src.mx.quantize`, which documents the scale modes.

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


def dequantize_blocks(data: jax.Array, scales: jax.Array,
                      tensor_scale: jax.Array | None, mx: MXFormat, *,
                      axis: int, length: int, block_size: int) -> jax.Array:
  """float32 values ``element * scale`` of an MX storage, exactly rounded.

  The inverse of :func:`quantize_blocks`: ``data``, ``scales`` and
  ``tensor_scale`` as an :class:`~jaxfp8._src.mx.MXArray` holds them, cut to
  ``length`` along ``axis`` (negative). Blocks with a NaN scale give NaN.
  """
  return _dequantize_jit(data, scales, tensor_scale, mx.name, axis, length,
                         block_size)
