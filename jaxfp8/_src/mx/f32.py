"""Correctly rounded float32 products and reciprocals that keep subnormals.

The scale rules of Transformer Engine's recipes (:mod:`.blockwise`,
:mod:`.nvfp4`) are sequences of float32 multiplies and divides, and a GPU
runs them in IEEE float32 with subnormal operands and results. XLA on CPU
flushes float32 subnormals to zero in float arithmetic, so a tile of values
below 2^-126, or a scale whose reciprocal lies there, would come out
differently. These functions give the IEEE result (round to nearest even)
on every backend:

* :func:`mul` and :func:`reciprocal` are exact for all finite inputs. They
  scale the operands into float32's normal range with powers of two (exact
  on the bit patterns, :mod:`jaxfp8._src.mx.bits`), do the one float
  operation there, and scale back; a result below 2^-126 would be rounded
  twice that way, so it is computed from the integer significands instead
  (a 48-bit product in two 24-bit words; a float32 quotient corrected by
  one such product).
* :func:`reciprocal_to_normal` is :func:`reciprocal` for operands up to
  2^126, whose reciprocals are normal or overflow: no correction step.
* :func:`mul_narrow` is :func:`mul` for a first operand of at most 8
  significant bits (a narrow format's value, times an fp8 scale or not):
  one rounding of a 32-bit integer product, no branch.
* :func:`divide` is an IEEE quotient where the divisor is broadcast (one
  block scale per block): XLA rewrites ``x / broadcast(y)`` into
  ``x * broadcast(1 / y)``, off by an ulp where ``1 / y`` is inexact.
* :func:`mul_into_narrow` is the cheap per-element product used before
  rounding into a narrow format: exact where ``|x * s| >= 2^-126``, and
  below that a value under 2^-126 with the right sign, which every fp8/fp4
  grid rounds to a signed zero just as the exact product would be.

Inputs are float32 arrays; signs follow IEEE (``mul`` of signed values,
``reciprocal`` of positive ones).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.mx import bits as bits_lib

U32, I32 = bits_lib.U32, bits_lib.I32
F32_MAX = np.float32(np.finfo(np.float32).max)
_MIN_NORMAL_BITS = 0x800000   # 2^-126
_ONE_BITS = 0x3F800000


def _u32(x: jax.Array) -> jax.Array:
  return lax.bitcast_convert_type(x, U32)


def _f32(b: jax.Array) -> jax.Array:
  return lax.bitcast_convert_type(b, jnp.float32)


def _normalized(mag: jax.Array):
  """Positive finite magnitude bits -> (m, k, s, e): value = m * 2^k with
  float32 ``m`` in [1, 2), and the integer form ``s * 2^(e - 150)``."""
  e, s = bits_lib.split(mag)
  m = _f32((s & 0x7FFFFF) | U32(_ONE_BITS))
  return m, e - 127, s, e


def _wide_product(a, b):
  """``(hi, lo)`` with ``a * b = hi * 2^24 + lo``, ``lo < 2^24``, for uint32
  ``a < 2^25`` and ``b < 2^24``: the exact product in 12-bit pieces."""
  a1, a0 = a >> 12, a & 0xFFF
  b1, b0 = b >> 12, b & 0xFFF
  mid = a1 * b0 + a0 * b1                      # < 2^26
  low = a0 * b0 + ((mid & 0xFFF) << 12)        # < 2^25
  return a1 * b1 + (mid >> 12) + (low >> 24), low & 0xFFFFFF


def _subnormal_product(sa, sb, t):
  """``round(sa * sb / 2^t)`` (nearest even) for 24-bit significands and
  ``t >= 24``: the bits of a product below 2^-126, in units of 2^-149."""
  hi, lo = _wide_product(sa, sb)
  r = (jnp.clip(t, 24, 55) - 24).astype(U32)   # shift of hi, 0..31
  q = hi >> r
  rem = hi & ((U32(1) << r) - 1)
  half = jnp.where(r == 0, U32(0), U32(1) << jnp.maximum(r, 1) - 1)
  above = jnp.where(r == 0, lo > 0x800000, (rem > half) | ((rem == half)
                                                           & (lo > 0)))
  tie = jnp.where(r == 0, lo == 0x800000, (rem == half) & (lo == 0))
  return q + (above | (tie & ((q & 1) == 1))).astype(U32)


def _exact_mul(a: jax.Array, b: jax.Array) -> jax.Array:
  """:func:`mul` by significands: right for every pair of operands."""
  ab, bb = _u32(a), _u32(b)
  sign = (ab ^ bb) & U32(bits_lib.SIGN)
  ma, mb = ab & 0x7FFFFFFF, bb & 0x7FFFFFFF
  zero = (ma == 0) | (mb == 0)
  # Stand-ins for zeros, NaN and Inf, whose products are set at the end.
  ok = ~zero & (ma < bits_lib.INF) & (mb < bits_lib.INF)
  fa, ka, sa, ea = _normalized(jnp.where(ok, ma, U32(_ONE_BITS)))
  fb, kb, sb, eb = _normalized(jnp.where(ok, mb, U32(_ONE_BITS)))
  p = _u32(fa * fb)  # in [1, 4): normal, one rounding to 24 bits
  k = ka + kb
  normal = (p >> 23).astype(I32) - 127 + k >= -126
  # A rounding to 24 bits followed by one into the subnormals is not one
  # rounding: below 2^-126 the product comes from the integer significands.
  out = jnp.where(normal, bits_lib.ldexp(p, k),
                  _subnormal_product(sa, sb, 151 - ea - eb))
  out = jnp.where(zero, U32(0), out)
  inf = U32(bits_lib.INF)
  nan = ((ma > inf) | (mb > inf) | ((ma == inf) & (mb == 0))
         | ((mb == inf) & (ma == 0)))
  out = jnp.where((ma == inf) | (mb == inf), inf, out) | sign
  return _f32(jnp.where(nan, U32(bits_lib.NAN), out))


def mul(a: jax.Array, b: jax.Array) -> jax.Array:
  """``a * b`` in float32, nearest even, subnormal operands and results kept.

  The float product is the IEEE one wherever neither operand is subnormal
  and the product is not below 2^-126 (or is an exact zero); only where some
  element is neither does the significand product run (a ``lax.cond``: one
  branch runs).

  Args:
    a: float32.
    b: float32, broadcastable against ``a``.

  Returns:
    float32: the IEEE product (Inf on overflow; NaN and Inf as IEEE says).

  >>> import jax.numpy as jnp
  >>> mul(jnp.float32(2.0**-100), jnp.float32(2.0**-40))  # 2^-140
  Array(7.17e-43, dtype=float32)
  """
  a, b = jnp.broadcast_arrays(a, b)
  p = a * b
  ma, mb = _u32(a) & 0x7FFFFFFF, _u32(b) & 0x7FFFFFFF
  # Bit tests only (a float comparison fused here may see subnormals as 0).
  zero = (ma == 0) | (mb == 0)
  plain = (zero | ((ma >= _MIN_NORMAL_BITS) & (mb >= _MIN_NORMAL_BITS)
                   & ((_u32(p) & 0x7FFFFFFF) >= _MIN_NORMAL_BITS)))
  return lax.cond(jnp.all(plain), lambda a, b, p: p,
                  lambda a, b, p: _exact_mul(a, b), a, b, p)


def mul_narrow(a: jax.Array, b: jax.Array) -> jax.Array:
  """:func:`mul` for ``a`` with a short significand, in one formula.

  ``a * b`` in float32, nearest even, subnormal results and ``b`` kept,
  where every ``a`` is zero or normal with at most 8 significant bits: an
  fp8 or fp4 value, or one times an e4m3 scale, as the recipes' quantizers
  multiply by their decode scales. Its 8-bit significand times ``b``'s 24
  bits fits a uint32, which is rounded once, to 24 bits or onto the
  subnormal grid: one elementwise formula, a fraction of :func:`mul`'s
  program (a ``lax.cond`` around a 48-bit product), so the exact branches
  that use it compile faster.

  Args:
    a: float32, each element zero or normal with at most 8 significant
      bits (other values are not checked and come out wrong); NaN and Inf
      give the plain product.
    b: float32, broadcastable against ``a``.

  Returns:
    float32: the IEEE product (Inf on overflow).

  >>> import jax.numpy as jnp
  >>> mul_narrow(jnp.float32(1.5), jnp.float32(2.0**-127))  # XLA's * gives 0
  Array(8.816208e-39, dtype=float32)
  """
  a, b = jnp.broadcast_arrays(a, b)
  ua, ub = _u32(a), _u32(b)
  # value = s * 2^(e - 150), s in [2^23, 2^24) (0 for zero); a's 8 bits
  # are the top of its s. Only b may be subnormal (split normalizes it).
  ma, mb = ua & 0x7FFFFFFF, ub & 0x7FFFFFFF
  ea = (ma >> 23).astype(I32)
  sa = jnp.where(ma == 0, U32(0), (ma & 0x7FFFFF) | U32(_MIN_NORMAL_BITS))
  eb, sb = bits_lib.split(mb)
  prod = (sa >> 16) * sb                                   # [2^30, 2^32)
  top = (prod >> 31).astype(I32)              # the leading bit: 30 + top
  # The exact product is prod * 2^e2; its leading bit has biased exponent be.
  e2 = ea + eb - 284
  be = 30 + top + e2 + 127
  # Bits below 2^-149 (subnormal) or below the 24th leading bit are cut.
  cut = jnp.maximum(7 + top, -149 - e2)
  c = jnp.clip(cut, 1, 31).astype(U32)
  q = prod >> c
  rem, half = prod & ((U32(1) << c) - 1), U32(1) << (c - 1)
  q = q + ((rem > half) | ((rem == half) & ((q & 1) == 1))).astype(U32)
  q = jnp.where(cut >= 32, ((cut == 32) & (prod > U32(0x80000000))).astype(U32),
                q)
  out = (jnp.maximum(be, 1) - 1).astype(U32) * U32(0x800000) + q
  out = jnp.minimum(out, U32(bits_lib.INF))
  # Zeros from the product: in an earlier form LLVM folded a test of the
  # magnitude's bits for zero into a float comparison, which XLA on CPU
  # runs flushing subnormal b to zero.
  out = jnp.where(prod == 0, U32(0), out) | ((ua ^ ub) & U32(bits_lib.SIGN))
  special = jnp.maximum(ma, mb) >= bits_lib.INF
  return _f32(jnp.where(special, _u32(a * b), out))


def _reciprocal_below_normal(mag):
  """Bits of ``1 / x`` for ``2^126 < x < 2^128`` (a subnormal result):
  ``round(2^K / s)``, ``x = s * 2^(e - 150)``, K = 299 - e.

  The float32 quotient ``y`` of ``2^K`` by ``s`` (both exact) is within 1/4
  of it; with ``c = floor(y)`` the result is ``c + 1`` where ``2^(K+1) >
  (2c + 1) s`` (:func:`_wide_product`; never equal), else ``c``.
  No loop and no branch: the 46-step long division behind a cond that this
  replaced made every exact scale step's program larger and slower to
  compile.
  """
  e = (mag >> 23).astype(I32)                      # x is normal: no split
  s = (mag & 0x7FFFFF) | U32(_MIN_NORMAL_BITS)
  k = 299 - e                                      # 45 or 46
  y = (jnp.where(k == 46, np.float32(2.0**46), np.float32(2.0**45))
       / s.astype(I32).astype(jnp.float32))
  c = y.astype(U32)                                # < 2^24
  hi, _ = _wide_product(2 * c + 1, s)
  return c + (hi < (U32(1) << (k - 23).astype(U32))).astype(U32)


def _normal_reciprocal(mag: jax.Array) -> jax.Array:
  """Bits of ``1 / x`` for magnitude bits ``x <= 2^126`` (results normal or
  Inf): XLA's division where ``x`` is normal (there it is the IEEE one);
  for a subnormal ``x = n * 2^-149`` (its bits n, exact as a float32), the
  IEEE quotient ``2^100 / n`` scaled by 2^49 exactly, or past float32's
  range, where IEEE's rounding overflows to Inf too (n = 0: +Inf)."""
  sub = mag < U32(_MIN_NORMAL_BITS)
  n = jnp.where(sub, mag, U32(1)).astype(I32).astype(jnp.float32)
  tiny = np.float32(2.0**100) / n * np.float32(2.0**49)
  return jnp.where(sub, _u32(tiny), _u32(np.float32(1) / _f32(mag)))


def reciprocal(a: jax.Array) -> jax.Array:
  """``1 / a`` in float32, nearest even, subnormal operands and results kept.

  Args:
    a: float32, positive (+0 gives +Inf, +Inf gives 0, NaN gives NaN).

  Returns:
    float32: the IEEE quotient (Inf where it overflows).

  >>> import jax.numpy as jnp
  >>> reciprocal(jnp.float32(2.0**127))  # 2^-127, a subnormal
  Array(5.877472e-39, dtype=float32)
  """
  mag = _u32(a) & 0x7FFFFFFF
  big = mag > U32(0x7E800000)  # 2^126: beyond it 1 / a is subnormal
  out = jnp.where(big, _reciprocal_below_normal(
      jnp.where(big, mag, U32(0x7F000000))), _normal_reciprocal(mag))
  out = jnp.where(mag == bits_lib.INF, U32(0), out)
  return _f32(jnp.where(mag > bits_lib.INF, U32(bits_lib.NAN), out))


def reciprocal_to_normal(a: jax.Array) -> jax.Array:
  """:func:`reciprocal` of ``a`` in [0, 2^126], whose reciprocals are
  normal or overflow: the same bits, without the correction that results
  below 2^-126 need (a smaller program where the operand's range is known,
  as for NVFP4's encode scales).

  Args:
    a: float32 in [0, 2^126] (larger values are not checked and come out
      wrong).

  Returns:
    float32: the IEEE quotient (Inf where it overflows).

  >>> import jax.numpy as jnp
  >>> reciprocal_to_normal(jnp.float32(2.0**-127))  # XLA's 1 / a gives Inf
  Array(1.7014118e+38, dtype=float32)
  """
  return _f32(_normal_reciprocal(_u32(a) & 0x7FFFFFFF))


def mul_into_narrow(x: jax.Array, s: jax.Array) -> jax.Array:
  """``x * s`` for rounding into a narrow format next.

  Args:
    x: float32 of any finite value (NaN and Inf give NaN or Inf).
    s: float32 scales, positive normal or ``F32_MAX``, broadcastable.

  Returns:
    float32: the IEEE product where it is at least 2^-126 in magnitude (Inf
    on overflow); a value below 2^-126 with the product's sign elsewhere.
  """
  bits = _u32(x)
  mag, sign = bits & 0x7FFFFFFF, bits & U32(bits_lib.SIGN)
  sub = mag < _MIN_NORMAL_BITS
  # A subnormal x is its integer mantissa times 2^-149: exactly normal as
  # mantissa * 2^-85 (= x * 2^64), scaled back after the product.
  mant = mag.astype(I32).astype(jnp.float32)
  xm = jnp.where(sub, mant * np.float32(2.0**-85), _f32(mag))
  y = xm * s
  y = jnp.where(sub, y * np.float32(2.0**-64), y)
  return _f32(_u32(y) | sign)


def divide(x: jax.Array, y: jax.Array) -> jax.Array:
  """``x / y`` correctly rounded (IEEE), ``y`` broadcast against ``x``.

  XLA (on CPU at least) compiles a division by a broadcast divisor, eager
  or jitted, into a product by the broadcast reciprocal, which is not the
  correctly rounded quotient where ``1 / y`` is inexact (``2.8125 / 1.875``
  comes out just above 1.5, a tie of e2m1's grid). So the divisor is made
  per element: ``y - min(|x|, 0)``, which is ``y`` itself (``-0`` kept)
  wherever ``x`` is not NaN, and NaN where ``x`` is (so is the quotient).
  XLA sees no broadcast to rewrite, and the division fuses with what
  surrounds it (a broadcast divisor held behind an optimization barrier
  was written out in full: on jaxlib 0.12 a 4096 x 4096 NVFP4 quantization
  spent most of its time there).

  >>> divide(jnp.full((2, 2), 2.8125, jnp.float32), jnp.float32(1.875))
  Array([[1.5, 1.5],
         [1.5, 1.5]], dtype=float32)
  """
  return x / (y - jnp.minimum(jnp.abs(x), np.float32(0)))


__all__ = ["F32_MAX", "divide", "mul", "mul_into_narrow", "mul_narrow",
           "reciprocal", "reciprocal_to_normal"]
