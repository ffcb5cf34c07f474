"""MX element codes: float32 values already divided by their scale <-> codes.

:func:`element_codes` rounds and saturates into the element format of an MX
format (exactly, through :mod:`jaxfp8._src.numerics.rounding`), and
:func:`element_values` decodes codes back to float32. Nearest-even
quantization also has a fast path, :func:`fast_element_codes`, which takes
the values before the division by a power-of-two scale.

The fast path: since a scale is a power of two, x / 2^k has x's
significand. In the element's normal range the rounding position therefore
does not depend on k, and below it x / 2^k in units of the element's
smallest subnormal is below 2^mantissa_bits, where adding 2^23 in float32
rounds it to an integer (nearest even, the hardware's). That is a few vector
operations per element. The exact path (:func:`jaxfp8._src.mx.bits.ldexp`,
then :func:`element_codes`) stays for tensors with blocks of tiny scale,
where float32 subnormal inputs matter and XLA on CPU would flush them.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.mx import bits as bits_lib
from jaxfp8._src.mx.formats import INT8
from jaxfp8._src.mx.formats import MXFormat
from jaxfp8._src.numerics import codes as codes_lib
from jaxfp8._src.numerics import rounding as rounding_lib

ROUNDINGS: tuple[str, ...] = rounding_lib.NEAREST_OR_STOCHASTIC

U32, I32 = bits_lib.U32, bits_lib.I32


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
    # Signed multiples of 1/64 (-0 included): times 64, exact integers.
    v = rounding_lib.saturated_bits(bits, elem, rounding=rounding, rand=rand)
    return (lax.bitcast_convert_type(v, jnp.float32) * 64).astype(jnp.int8)
  return rounding_lib.round_to_codes(
      lax.bitcast_convert_type(bits, jnp.float32), elem, rounding=rounding,
      rand=rand)


def element_values(codes: jax.Array, mx: MXFormat) -> jax.Array:
  """The exact float32 values of unpacked element codes.

  The inverse of :func:`element_codes`: the one decoder,
  :func:`jaxfp8._src.numerics.codes.values_of_codes`, for the float formats,
  its bit-operation form :func:`fp8_values` for the 8-bit ones, and
  ``int / 64`` for MXINT8.
  """
  elem = mx.element
  if elem is INT8:
    return codes.astype(jnp.float32) * np.float32(2.0**-6)
  if elem.bits == 8:
    return fp8_values(codes, elem)
  return codes_lib.values_of_codes(codes, elem)


def fp8_values(codes: jax.Array, elem) -> jax.Array:
  """:func:`codes_lib.values_of_codes` of fp8 codes, in bit operations.

  XLA's fp8 -> float32 convert, fused with the scaling after it, makes MX
  dequantize slower on CPU than these integer operations (the tests compare
  both on every code). Also the decoder of nvfp4's E4M3 block scales.

  Args:
    codes: uint8 (or wider integer) codes of ``elem``.
    elem: an 8-bit float format of the registry (e4m3fn or e5m2).

  Returns:
    float32 values, NaN and Inf where the codes are.
  """
  m = elem.mantissa_bits
  c = codes.astype(U32) & 0xFF
  mag = c & 0x7F
  normal = (mag << (23 - m)) + U32((127 - elem.bias) << 23)
  sub = lax.bitcast_convert_type(
      mag.astype(I32).astype(jnp.float32) * np.float32(elem.min_subnormal),
      U32)  # mag < 2^m here: the subnormal's mantissa, exactly
  v = jnp.where(mag < (1 << m), sub, normal)
  if elem.has_inf:  # e5m2: exponent field all ones
    inf_code = elem.inf_code & 0x7F
    v = jnp.where(mag >= inf_code,
                  jnp.where(mag == inf_code, U32(bits_lib.INF),
                            U32(bits_lib.NAN)), v)
  else:  # e4m3fn: only S.1111.111 is NaN
    v = jnp.where(mag == 0x7F, U32(bits_lib.NAN), v)
  return lax.bitcast_convert_type(v | ((c >> 7) << 31), jnp.float32)


def nan_fill(mx: MXFormat) -> int:
  """Element code stored in a NaN block (the element NaN where there is one)."""
  elem = mx.element
  return elem.nan_code if elem.has_nan else 0


def max_code(elem) -> int:
  """Code of a float format's largest magnitude (an element or scale format)."""
  m = elem.mantissa_bits
  mant = (rounding_lib.f32_bits(elem.max) >> (23 - m)) & ((1 << m) - 1)
  return ((math.floor(math.log2(elem.max)) + elem.bias) << m) | mant


# -- the fast path (nearest even) ----------------------------------------------

def fast_min_exponent(mx: MXFormat) -> int:
  """The smallest block exponent at which :func:`fast_element_codes` is exact.

  Its one approximation is XLA's flushing of float32 subnormal inputs x to
  zero; they round to (signed) zero in the element format exactly when
  x / 2^k is at most half its smallest subnormal, for every such x when
  2^-126 / 2^k <= 2^(min_exponent - mantissa_bits - 1).
  """
  elem = mx.element
  return -125 + elem.mantissa_bits - elem.min_exponent


def fast_element_codes(bits: jax.Array, k: jax.Array, mx: MXFormat
                       ) -> jax.Array:
  """:func:`element_codes` of ``x / 2^k`` (nearest even), computed from x.

  Args:
    bits: uint32 float32 bit patterns of x, (..., n_blocks, block); finite
      in blocks whose codes are kept.
    k: int32 block exponents (..., n_blocks), at least
      :func:`fast_min_exponent` and at most 127.
    mx: the MX format (power-of-two scales).

  Returns:
    The codes :func:`element_codes` gives for ``ldexp(x, -k)``.
  """
  elem = mx.element
  m, emin = elem.mantissa_bits, elem.min_exponent
  mag = bits & 0x7FFFFFFF
  k = k[..., None]
  z = lax.bitcast_convert_type(mag, jnp.float32) * bits_lib.pow2_float(
      m - emin - k)
  low = bits_lib.nearest_integer(z)
  neg = (bits >> 31) == 1
  if elem is INT8:  # a uniform grid: all of it is "below the normal range"
    c = jnp.minimum(low, U32(127)).astype(I32)
    return jnp.where(neg, -c, c).astype(jnp.int8)
  sh = 23 - m
  r = (mag + ((1 << (sh - 1)) - 1) + ((mag >> sh) & 1)) >> sh
  high = jnp.minimum(r - ((127 - elem.bias + k) << m).astype(U32),
                     U32(max_code(elem)))
  normal = mag >= ((emin + 127 + k) << 23).astype(U32)
  code = jnp.where(normal, high, low)
  code = code | jnp.where(neg, U32(1 << (elem.bits - 1)), U32(0))
  return code.astype(jnp.uint8)
