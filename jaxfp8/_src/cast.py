"""Exact casts into narrow formats: five rounding modes, saturating by default.

Rounding is done on the float32 bit pattern with integer arithmetic, so the
result is exact even where XLA on CPU flushes float32 subnormals to zero, and
the same code serves formats XLA can hold (the result is a native array) and
formats it can't (the result is a :class:`jaxfp8.CodeArray` of uint8 codes).

For a float32 magnitude ``b`` (as bits) and a format with ``m`` mantissa bits,
the two neighbours are ``lo = b`` with its low ``shift`` bits cleared and
``hi = lo + 2^shift`` (a carry into the exponent is exactly the next binade),
where ``shift = 23 - m`` plus the distance below the format's smallest normal
exponent. Below the smallest subnormal the neighbours are 0 and that value.
"""
from __future__ import annotations

import functools
from typing import Any, Literal

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src import formats
from jaxfp8._src import validate
from jaxfp8._src.codes import CodeArray
from jaxfp8._src.codes import decode
from jaxfp8._src.codes import remember_source

Rounding = Literal["nearest", "stochastic", "down", "up", "toward_zero"]
ROUNDINGS: tuple[str, ...] = ("nearest", "stochastic", "down", "up",
                              "toward_zero")

_U32 = jnp.uint32
_F32_MIN_NORMAL = float(np.finfo(np.float32).tiny)


def _f32_bits(v: float) -> int:
  return int(np.array(v, np.float32).view(np.uint32))


def _classify(bits):
  """(magnitude bits, negative, NaN, Inf) of float32 bit patterns.

  Bit tests only: XLA on CPU may fuse a float comparison with these and then
  treat float32 subnormals as zero.
  """
  mag = bits & _U32(0x7FFFFFFF)
  inf_bits = _U32(0x7F800000)
  return mag, (bits >> 31) == 1, mag > inf_bits, mag == inf_bits


def _below_grid_threshold(b, fmt: formats.Format):
  """``2^32 x / min_subnormal`` as uint32, for magnitudes ``x`` (bits ``b``)
  below the format's smallest subnormal: P(round up) in units of 2^-32.

  When that subnormal is below float32's smallest normal (bfloat16), every
  such ``x`` is a float32 subnormal, ``b * 2^-149``: the threshold is an
  integer shift of ``b`` (float arithmetic would overflow the factor, and XLA
  on CPU flushes subnormal operands). Otherwise one float multiply is exact.
  """
  k = -int(np.log2(fmt.min_subnormal))
  if k > 126:
    return b << _U32(k + 32 - 149)
  x = lax.bitcast_convert_type(b, jnp.float32)
  return (x * np.float32(2.0**(32 + k))).astype(_U32)


def _round_magnitude(b, neg, fmt: formats.Format, rounding: str, rand):
  """Rounds float32 magnitudes (bits ``b``, finite) to the format's grid.

  Returns the float32 bits of the rounded magnitude, not yet limited to max.
  """
  m, emin = fmt.mantissa_bits, fmt.min_exponent
  e = jnp.maximum((b >> 23).astype(jnp.int32), 1) - 127
  shift = (23 - m) + jnp.maximum(emin - e, 0)
  in_grid = shift <= 23  # otherwise |x| < smallest subnormal: lo = 0
  one = jnp.left_shift(_U32(1), jnp.minimum(shift, 23).astype(_U32))
  lo = jnp.where(in_grid, b & ~(one - 1), _U32(0))
  hi = jnp.where(in_grid, lo + one, _U32(_f32_bits(fmt.min_subnormal)))
  rem = b - lo  # bit distance above lo; compared in the same units as half
  if rounding == "nearest":
    half = jnp.where(in_grid, one >> 1, _U32(_f32_bits(fmt.min_subnormal / 2)))
    # The code's last bit sits at bit `shift`: the implicit 1 when shift == 23.
    odd = in_grid & (((lo & one) != 0) | (shift == 23))
    up = (rem > half) | ((rem == half) & odd)
  elif rounding == "stochastic":
    threshold = jnp.where(in_grid, rem, _below_grid_threshold(b, fmt))
    up = jnp.where(in_grid, rand & (one - 1), rand) < threshold
  elif rounding == "up":
    up = (rem != 0) & ~neg
  elif rounding == "down":
    up = (rem != 0) & neg
  else:  # toward_zero
    up = jnp.zeros_like(neg)
  return jnp.where(up, hi, lo)


def _limit(mag, neg, fmt: formats.Format, rounding: str, saturate: bool):
  """Applies the overflow rule; returns (magnitude bits, overflowed)."""
  max_bits = _U32(_f32_bits(fmt.max))
  over = mag > max_bits
  if saturate or not (fmt.has_inf or fmt.has_nan) or rounding == "toward_zero":
    overflow = jnp.zeros_like(over)
  elif rounding == "down":  # positive overflow rounds toward zero, to max
    overflow = over & neg
  elif rounding == "up":
    overflow = over & ~neg
  else:
    overflow = over
  return jnp.minimum(mag, max_bits), overflow


def _codes_from_magnitude(mag, neg, fmt: formats.Format):
  """Code of an exactly representable magnitude (float32 bits) with a sign."""
  m, emin, bias = fmt.mantissa_bits, fmt.min_exponent, fmt.bias
  e = (mag >> 23).astype(jnp.int32) - 127
  normal = (((e + bias).astype(_U32) << m)
            | ((mag >> (23 - m)) & _U32(2**m - 1)))
  sub_shift = jnp.clip(23 - m + emin - e, 0, 31).astype(_U32)
  subnormal = ((mag & _U32(0x7FFFFF)) | _U32(0x800000)) >> sub_shift
  code = jnp.where(mag == 0, _U32(0), jnp.where(e >= emin, normal, subnormal))
  signed = neg & ((mag != 0) | fmt.has_negative_zero)
  return code | jnp.where(signed, _U32(1 << (fmt.bits - 1)), _U32(0))


def _e8m0_codes(x, rounding: str, saturate: bool, rand):
  """E8M0 (unsigned powers of two 2^-127..2^127, NaN 0xFF) from float32."""
  mag, neg, nan, inf = _classify(lax.bitcast_convert_type(x, _U32))
  be, mant = mag >> 23, mag & _U32(0x7FFFFF)
  sub = be == 0  # float32 subnormal: 2^-127 is mantissa 0x400000
  frac = jnp.where(sub, jnp.where(mant >= 0x400000, (mant - 0x400000) << 1, 0),
                   mant)
  code = jnp.where(sub, _U32(0), be)
  half = _U32(0x400000)
  if rounding == "nearest":  # no mantissa bit to make even: ties go up, as in
    up = frac >= half         # ml_dtypes and the MX spec's scale rounding
  elif rounding == "stochastic":
    up = (rand >> 9) < frac
  elif rounding == "up":
    up = frac != 0
  else:  # down and toward_zero agree on positive numbers
    up = jnp.zeros(x.shape, bool)
  code = code + up.astype(_U32)
  code = jnp.where((code > 254) | inf, _U32(254 if saturate else 255), code)
  invalid = nan | neg | (mag == 0)
  return jnp.where(invalid, _U32(255), code).astype(jnp.uint8)


def _specials(nan_in, inf_in, fmt: formats.Format, saturate: bool):
  """(NaN result, Inf result, max result) masks from NaN/Inf inputs."""
  if saturate or not fmt.has_inf:
    to_max = inf_in & (saturate or not fmt.has_nan)
    to_inf = jnp.zeros_like(inf_in)
    to_nan = nan_in | (inf_in & ~to_max)
  else:
    to_max, to_inf, to_nan = jnp.zeros_like(inf_in), inf_in, nan_in
  return to_nan, to_inf, to_max


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5))
def _cast_jit(x, rand, fmt_name: str, rounding: str, saturate: bool,
              as_codes: bool):
  fmt = formats.get(fmt_name)
  if fmt.name == "float8_e8m0fnu":
    codes = _e8m0_codes(x, rounding, saturate, rand)
    if as_codes:
      return codes
    return lax.bitcast_convert_type(codes, fmt.dtype)
  if (rounding == "nearest" and saturate and fmt.native and fmt.has_nan
      and not as_codes and fmt.min_subnormal >= _F32_MIN_NORMAL):
    # XLA's own convert rounds to nearest-even; clipping first saturates.
    # (Bit-identical to the integer path: the tests check both.) Formats with
    # values below float32's smallest normal (bfloat16's subnormals) take the
    # integer path: XLA on CPU flushes float32 subnormals in clip and convert.
    return jnp.clip(x, -fmt.max, fmt.max).astype(fmt.dtype)
  bits = lax.bitcast_convert_type(x, _U32)
  mag, neg, nan_in, inf_in = _classify(bits)
  mag = _round_magnitude(jnp.where(nan_in | inf_in, _U32(0), mag), neg, fmt,
                         rounding, rand)
  mag, overflow = _limit(mag, neg, fmt, rounding, saturate)
  to_nan, to_inf, to_max = _specials(nan_in, inf_in, fmt, saturate)
  if fmt.has_inf:
    to_inf |= overflow
  else:
    to_nan |= overflow
  mag = jnp.where(to_max, _U32(_f32_bits(fmt.max)), mag)
  if as_codes or not fmt.native:
    codes = _codes_from_magnitude(mag, neg, fmt)
    sign = jnp.where(neg, _U32(1 << (fmt.bits - 1)), _U32(0))
    if fmt.has_inf:
      codes = jnp.where(to_inf, _U32(fmt.inf_code) | sign, codes)
    nan_code = fmt.nan_code if fmt.has_nan else 1 << (fmt.bits - 1)
    return jnp.where(to_nan, _U32(nan_code), codes).astype(jnp.uint8)
  value = lax.bitcast_convert_type(mag | (bits & _U32(0x80000000)),
                                   jnp.float32)
  value = jnp.where(to_inf, jnp.where(neg, -jnp.inf, jnp.inf), value)
  # Formats without NaN take NaN to -0, as ml_dtypes does.
  value = jnp.where(to_nan, jnp.float32(jnp.nan if fmt.has_nan else -0.0),
                    value)
  return value.astype(fmt.dtype)


def _ste(x, rand, fmt_name, rounding, saturate, as_codes):
  return _cast_jit(x, rand, fmt_name, rounding, saturate, as_codes)


_ste = jax.custom_jvp(_ste, nondiff_argnums=(2, 3, 4, 5))


@_ste.defjvp
def _ste_jvp(fmt_name, rounding, saturate, as_codes, primals, tangents):
  # The identity, as far as a narrow tangent can hold it: JAX wants the
  # tangent of a narrow result in its format, and uint8 codes take none.
  # `decode` of the result differentiates around it, exactly (codes.py).
  x, rand = primals
  out = _ste(x, rand, fmt_name, rounding, saturate, as_codes)
  if as_codes or not formats.get(fmt_name).native:
    return out, np.zeros(out.shape, jax.dtypes.float0)
  return out, tangents[0].astype(out.dtype)


def _to_float32(x, fn: str, arg: str = "x"):
  """``x`` as float32 (narrow arrays and CodeArrays decoded exactly)."""
  validate.check_array(x, arg, fn)
  if isinstance(x, CodeArray) or formats.is_narrow(getattr(x, "dtype", None)):
    return decode(x, jnp.float32)
  x = jnp.asarray(x)
  if not (jnp.issubdtype(x.dtype, jnp.floating)
          or jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == bool):
    raise TypeError(f"`{arg}` argument to `{fn}` must be real numbers, got "
                    f"{x.dtype}")
  return x.astype(jnp.float32)


def _prepare(x, fmt, rounding, key, fn):
  fmt = formats.get(fmt, arg="fmt", fn=fn)
  validate.check_choice(rounding, ROUNDINGS, "rounding", fn)
  x32 = _to_float32(x, fn)
  rand = None
  if rounding == "stochastic":
    if key is None:
      raise ValueError(f"`{fn}` with rounding='stochastic' needs a `key` "
                       "argument (a jax.random key)")
    key = validate.check_key(key, fn)
    rand = jax.random.bits(key, x32.shape, jnp.uint32)
  return x32, fmt, rand


def cast(x: Any, fmt: formats.FormatLike, *, rounding: Rounding = "nearest",
         saturate: bool = True, key: jax.Array | None = None):
  """Rounds ``x`` into a floating format, exactly.

  Args:
    x: an array or scalar of real numbers; narrow-format arrays and
      :class:`jaxfp8.CodeArray` are decoded first (exactly). float64 input is
      first rounded to float32.
    fmt: the target format: name, alias, dtype or Format (``"e4m3"``,
      ``jnp.float8_e5m2``...); bfloat16 and float16 take every rounding mode
      too (stochastic rounding of bf16 parameters, say).
    rounding: ``"nearest"`` (to nearest, ties to even), ``"stochastic"``
      (up with probability equal to the fraction of the gap, so the result is
      unbiased; needs ``key``), ``"down"`` (toward -inf), ``"up"`` (toward
      +inf) or ``"toward_zero"``.
    saturate: if True (default), finite values beyond the range and +-Inf
      become +-max. If False, overflow follows IEEE: Inf where the format has
      it, else NaN; modes rounding toward zero still give +-max.
    key: a PRNG key, required for ``rounding="stochastic"``.

  Returns:
    A ``jax.Array`` of the format if the installed JAX can hold it, else a
    :class:`jaxfp8.CodeArray`. NaN stays NaN; formats without NaN (float6,
    float4) take NaN to -0, as ml_dtypes does. E8M0 has no zero and no sign:
    zero, negatives and NaN become NaN, values below 2^-127 become 2^-127.
    Gradients pass straight through: ``decode(cast(x, fmt))`` (and
    ``cast(x, fmt).astype(...)`` of a CodeArray) differentiates as the
    identity in ``x``, exactly. Differentiated through the narrow array
    itself (``cast(x, fmt).astype(jnp.float32)`` of a native array, or any
    JAX op on it), the identity's tangent is held in ``fmt``, as JAX holds
    every narrow tangent: rounded, and NaN or Inf beyond ``fmt``'s max.

  Raises:
    TypeError: for a non-array ``x``, a non-floating ``fmt`` or a bad ``key``.
    ValueError: for an unknown format or rounding mode, or stochastic rounding
      without a key.

  >>> import jax.numpy as jnp, jaxfp8
  >>> cast(jnp.array([1.0, 465.0, -1e6, jnp.inf]), "e4m3")
  Array([1, 448, -448, 448], dtype=float8_e4m3fn)
  >>> cast(jnp.array([1.1, -1.1]), "e4m3", rounding="up")
  Array([1.125, -1], dtype=float8_e4m3fn)
  >>> cast(jnp.array([1000.0]), "e4m3", saturate=False)
  Array([nan], dtype=float8_e4m3fn)
  """
  x32, fmt, rand = _prepare(x, fmt, rounding, key, "cast")
  if fmt.bits == 32:
    if rounding != "nearest":
      raise ValueError(f"`cast` to float32 rounds nothing: rounding must be "
                       f"'nearest', got {rounding!r}")
    return x32
  out = _ste(x32, rand, fmt.name, rounding, bool(saturate), False)
  return remember_source(out if fmt.native else CodeArray(out, fmt), x32)


def encode(x: Any, fmt: formats.FormatLike, *,
           rounding: Rounding = "nearest", saturate: bool = True,
           key: jax.Array | None = None) -> CodeArray:
  """Rounds ``x`` into a narrow format and returns its uint8 codes.

  Works for every narrow format, native or not (float6 on today's XLA), with
  the same arguments and rounding as :func:`cast`; :func:`decode` inverts it.

  >>> import jax.numpy as jnp
  >>> y = encode(jnp.array([1.0, 0.3, 9.0]), "float6_e2m3fn")
  >>> y.codes
  Array([ 8,  2, 31], dtype=uint8)
  >>> decode(y)
  Array([1.  , 0.25, 7.5 ], dtype=float32)
  """
  x32, fmt, rand = _prepare(x, fmt, rounding, key, "encode")
  if not fmt.narrow:
    raise TypeError(f"`fmt` argument to `encode` must be a narrow format, got "
                    f"{fmt.name}")
  codes = _ste(x32, rand, fmt.name, rounding, bool(saturate), True)
  return remember_source(CodeArray(codes, fmt), x32)
