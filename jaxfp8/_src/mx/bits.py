"""Exact float32 arithmetic on bit patterns, for MX scales and elements.

MX conversion multiplies by powers of two down to 2^-127 (the smallest E8M0
scale) and below, into float32's subnormals, which XLA on CPU flushes to zero
in float arithmetic. These functions do that arithmetic on the uint32 bit
patterns instead: powers of two are applied by adding to the exponent field,
with round-to-nearest-even when a result lands among the subnormals.

One float trick is exact and used throughout: for ``0 <= z < 2^23``,
``z + 2^23`` in float32 rounds ``z`` to an integer (nearest even, the
hardware's), which :func:`nearest_integer` reads back from the sum's bits.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.numerics import rounding as rounding_lib

U32, I32 = jnp.uint32, jnp.int32
# float32 bit patterns: +Inf (the smallest non-finite magnitude), a quiet NaN.
INF = 0x7F800000
NAN = 0x7FC00000
SIGN = 0x80000000

_MAGIC = np.float32(2.0**23)
_MAGIC_BITS = 0x4B000000


def nearest_integer(z: jax.Array) -> jax.Array:
  """``round(z)`` as uint32 (ties to even) for float32 ``0 <= z < 2^23``."""
  return lax.bitcast_convert_type(z + _MAGIC, U32) - U32(_MAGIC_BITS)


def split(mag: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Magnitude bits -> (e, s), value = s * 2^(e - 150), s in [2^23, 2^24).

  Subnormals are normalized (``e`` drops below 1) by converting their integer
  mantissa to float32, which is exact and normal; zero gives ``s = 0``.
  """
  big_e = (mag >> 23).astype(I32)
  mant = mag & 0x7FFFFF
  as_float = lax.bitcast_convert_type(mant.astype(jnp.int32).astype(
      jnp.float32), U32)  # mant * 2^-149 == float(mant) * 2^-149
  sub = big_e == 0
  e = jnp.where(sub, (as_float >> 23).astype(I32) - 149, big_e)
  s = (jnp.where(sub, as_float, mant) & 0x7FFFFF) | 0x800000
  return e, jnp.where(mag == 0, U32(0), s)


def ldexp(mag: jax.Array, k: jax.Array) -> jax.Array:
  """Finite magnitude bits times 2^k, nearest even; Inf on overflow."""
  e, s = split(mag)
  e2 = e + k
  normal = (jnp.maximum(e2, 0).astype(U32) << 23) | (s & 0x7FFFFF)
  shift = jnp.clip(1 - e2, 0, 25).astype(U32)
  q = s >> shift
  rem = s - (q << shift)
  half = (U32(1) << shift) >> 1
  up = (rem > half) | ((rem == half) & ((q & 1) == 1))
  out = jnp.where(e2 >= 1, normal, q + up.astype(U32))
  out = jnp.where(e2 >= 255, U32(INF), out)
  return jnp.where(s == 0, U32(0), out)


def frac_bits(v: float) -> int:
  """The 23 fraction bits of v's normalized float32 significand."""
  return rounding_lib.f32_bits(v) & 0x7FFFFF


def finite_magnitude(bits: jax.Array) -> jax.Array:
  """Magnitude bits of float32 bit patterns, 0 for NaN and Inf."""
  mag = bits & 0x7FFFFFFF
  return jnp.where(mag >= INF, U32(0), mag)


def pow2_float(e: jax.Array) -> jax.Array:
  """2.0^e as float32 for int32 ``e`` in [-126, 127]."""
  return lax.bitcast_convert_type(((e + 127) << 23).astype(U32), jnp.float32)


def mul_pow2(v: jax.Array, k: jax.Array) -> jax.Array:
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
  bits = lax.bitcast_convert_type(v, U32)
  mag, sign = bits & 0x7FFFFFFF, bits & U32(SIGN)
  normal = mag >= (jnp.maximum(1 - k, 1) << 23).astype(U32)
  big = jnp.minimum(mag + (k << 23).astype(U32), U32(INF))
  # A subnormal product is an integer multiple of 2^-149: v * 2^(k + 149),
  # below 2^23, rounded to an integer by the float add. (The factor is capped
  # at 2^127, for k > -22, where only |v| < 2^-104 could give one.)
  z = lax.bitcast_convert_type(mag, jnp.float32) * pow2_float(
      jnp.minimum(k + 149, 127))
  small = nearest_integer(z)
  out = jnp.where(normal, big, small) | sign
  out = jnp.where(mag >= INF, bits, out)
  return lax.bitcast_convert_type(out, jnp.float32)
