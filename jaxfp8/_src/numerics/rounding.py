"""The rounding core: every rounding into a format goes through this module.

``round_to`` rounds float32 values into any registered format (narrow, or
bfloat16/float16) with five rounding modes, saturating or not, and returns the
right storage itself: a native ``jax.Array`` where the installed JAX holds the
format, else a :class:`jaxfp8.CodeArray` of uint8 codes. ``round_to_codes``
gives the codes of any narrow format. Both differentiate as the identity
(straight-through). ``round_magnitude`` and ``limit_magnitude`` are the two
steps on float32 magnitude bits, for callers that build other grids on them
(MX's int8 elements).

Rounding is done on the float32 bit pattern with integer arithmetic, so the
result is exact even where XLA on CPU flushes float32 subnormals to zero.
For a float32 magnitude ``b`` (as bits) and a format with ``m`` mantissa bits,
the two neighbours are ``lo = b`` with its low ``shift`` bits cleared and
``hi = lo + 2^shift`` (a carry into the exponent is exactly the next binade),
where ``shift = 23 - m`` plus the distance below the format's smallest normal
exponent. Below the smallest subnormal the neighbours are 0 and that value.

This is a package-internal API (keyword-only options); the public faces are
:func:`jaxfp8.cast` and :func:`jaxfp8.encode`.
"""
from __future__ import annotations

import functools
from typing import Any, Literal

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import validate
from jaxfp8._src.numerics.codes import CodeArray
from jaxfp8._src.numerics.codes import decode
from jaxfp8._src.numerics.host import device_array
from jaxfp8._src.numerics.host import host_float32

Rounding = Literal["nearest", "stochastic", "down", "up", "toward_zero"]
ROUNDINGS: tuple[str, ...] = ("nearest", "stochastic", "down", "up",
                              "toward_zero")
# The roundings offered where values come from a scaled or sampled float32
# (MX elements, samplers): directed roundings would need sticky bits of
# quotients below float32's range, which the scaled values don't keep; the
# MX spec asks for these two.
NEAREST_OR_STOCHASTIC: tuple[str, ...] = ROUNDINGS[:2]

_U32 = jnp.uint32
_F32_MIN_NORMAL = float(np.finfo(np.float32).tiny)


def f32_bits(v: float) -> int:
  """The float32 bit pattern of ``v`` (a Python int)."""
  return int(np.array(v, np.float32).view(np.uint32))


def ldexp_or_zero(mag: jax.Array, k: jax.Array) -> jax.Array:
  """Finite float32 magnitude bits times 2^k where that is at least 2^-126
  (exact: a power of two moves the exponent), +0 below it, Inf on overflow.

  For callers whose result goes into a grid that holds nothing below
  2^-126: every fp8, fp6, fp4 and MXINT8 grid (and E4M3's block scales)
  rounds such a float32 to zero, and per-tensor scales are at least 2^-126.
  Rounding onto float32's subnormal grid is not needed there, and integer
  arithmetic keeps what XLA on CPU would flush.

  Args:
    mag: uint32 bit patterns of finite non-negative float32 values.
    k: int32 exponents, broadcastable against ``mag``.

  Returns:
    uint32 bit patterns of the products.

  >>> import numpy as np
  >>> m = np.array([0x3F800000, 0x00000003, 0x00800000], np.uint32)
  >>> ldexp_or_zero(m, np.array([-3, 140, -1], np.int32))  # 1/8, 3 * 2^-9, 0
  Array([1040187392, 1002438656,          0], dtype=uint32)
  """
  i32 = jnp.int32
  sub = mag < 0x800000
  # A subnormal is its bits n times 2^-149, and float(n) is exact and normal.
  base = jnp.where(sub, lax.bitcast_convert_type(
      mag.astype(i32).astype(jnp.float32), _U32), mag)
  k = jnp.where(sub, k - 149, k)
  e = (base >> 23).astype(i32) + k
  # Where e >= 1, k << 23 stays within int32 (k >= 1 - 254).
  out = jnp.where(e >= 1, (base.astype(i32) + (k << 23)).astype(_U32),
                  _U32(0))
  out = jnp.where(e >= 255, _U32(0x7F800000), out)
  return jnp.where(mag == 0, _U32(0), out)


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


def _nearest_magnitude(b, m: int, emin: int):
  """Nearest-even magnitude bits on a grid with ``m`` mantissa bits down to
  2^emin and multiples of 2^(emin - m) below, for grids whose half smallest
  step is a normal float32 (float32 subnormal inputs round to 0, so XLA's
  flushing of them changes nothing). Fewer vector operations than the
  general form: a fixed shift above 2^emin, one float rounding below."""
  sh = 23 - m
  hi = (b + _U32((1 << (sh - 1)) - 1) + ((b >> sh) & _U32(1))) & _U32(
      (0xFFFFFFFF >> sh) << sh)
  # Below 2^emin, |x| / 2^(emin - m) < 2^m: the float add in nearest_integer
  # rounds it to an integer, nearest even.
  z = lax.bitcast_convert_type(b, jnp.float32) * np.float32(2.0**(m - emin))
  n = lax.bitcast_convert_type(z + np.float32(2.0**23), _U32) - _U32(
      0x4B000000)
  lo = lax.bitcast_convert_type(
      n.astype(jnp.int32).astype(jnp.float32) * np.float32(2.0**(emin - m)),
      _U32)
  return jnp.where(b < _U32(f32_bits(2.0**emin)), lo, hi)


def round_magnitude(b, neg, fmt: formats.Format, *, rounding: str,
                    rand=None):
  """Rounds float32 magnitudes (bits ``b``, finite) to the format's grid.

  Returns the float32 bits of the rounded magnitude, not yet limited to max.
  """
  m, emin = fmt.mantissa_bits, fmt.min_exponent
  if rounding == "nearest" and fmt.min_subnormal / 2 >= _F32_MIN_NORMAL:
    return _nearest_magnitude(b, m, emin)
  e = jnp.maximum((b >> 23).astype(jnp.int32), 1) - 127
  shift = (23 - m) + jnp.maximum(emin - e, 0)
  in_grid = shift <= 23  # otherwise |x| < smallest subnormal: lo = 0
  one = jnp.left_shift(_U32(1), jnp.minimum(shift, 23).astype(_U32))
  lo = jnp.where(in_grid, b & ~(one - 1), _U32(0))
  hi = jnp.where(in_grid, lo + one, _U32(f32_bits(fmt.min_subnormal)))
  rem = b - lo  # bit distance above lo; compared in the same units as half
  if rounding == "nearest":
    half = jnp.where(in_grid, one >> 1, _U32(f32_bits(fmt.min_subnormal / 2)))
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


def limit_magnitude(mag, neg, fmt: formats.Format, *, rounding: str,
                    saturate: bool):
  """Applies the overflow rule; returns (magnitude bits, overflowed)."""
  max_bits = _U32(f32_bits(fmt.max))
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


def saturated_bits(bits, fmt: formats.Format, *, rounding: str, rand=None):
  """float32 bits of finite ``bits`` rounded into ``fmt`` and saturated at
  its max, sign kept: the value of :func:`round_to` (``saturate=True``)
  without its codes, for callers that multiply the values next."""
  neg = (bits >> 31) == 1
  mag = round_magnitude(bits & _U32(0x7FFFFFFF), neg, fmt, rounding=rounding,
                        rand=rand)
  mag, _ = limit_magnitude(mag, neg, fmt, rounding=rounding, saturate=True)
  return mag | (bits & _U32(0x80000000))


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
def _round_jit(x, rand, fmt_name: str, rounding: str, saturate: bool,
              as_codes: bool):
  fmt = formats.get(fmt_name)
  if fmt.name == "float8_e8m0fnu":
    codes = _e8m0_codes(x, rounding, saturate, rand)
    if as_codes:
      return codes
    return lax.bitcast_convert_type(codes, fmt.dtype)
  if (rounding == "nearest" and saturate and fmt.native and fmt.has_nan
      and not as_codes and fmt.min_subnormal >= _F32_MIN_NORMAL
      and jax.default_backend() != "cpu"):
    # XLA's own convert rounds to nearest-even; clipping first saturates.
    # (Bit-identical to the integer path: the tests check both.) Formats with
    # values below float32's smallest normal (bfloat16's subnormals) take the
    # integer path: XLA on CPU flushes float32 subnormals in clip and convert.
    # On CPU the integer path is faster than XLA's convert (about 2x for
    # e4m3 on AVX2), so only other backends take this one.
    x = jnp.clip(x, -fmt.max, fmt.max)
    if not fmt.has_negative_zero:
      # A negative value that rounds to zero is +0 in a format without -0.
      # XLA's CPU elemental emitter (``--xla_cpu_use_fusion_emitters=false``
      # on JAX 0.10) gives the NaN code 0x80 instead.
      x = jnp.where(jnp.abs(x) <= np.float32(fmt.min_subnormal / 2),
                    np.float32(0), x)
    return x.astype(fmt.dtype)
  bits = lax.bitcast_convert_type(x, _U32)
  mag, neg, nan_in, inf_in = _classify(bits)
  mag = round_magnitude(jnp.where(nan_in | inf_in, _U32(0), mag), neg, fmt,
                        rounding=rounding, rand=rand)
  mag, overflow = limit_magnitude(mag, neg, fmt, rounding=rounding,
                                  saturate=saturate)
  to_nan, to_inf, to_max = _specials(nan_in, inf_in, fmt, saturate)
  if fmt.has_inf:
    to_inf |= overflow
  else:
    to_nan |= overflow
  mag = jnp.where(to_max, _U32(f32_bits(fmt.max)), mag)
  # 8-bit results on CPU are made as codes and bitcast: faster there than
  # XLA's convert of the rounded float32 value.
  bitcast = (not as_codes and fmt.native and fmt.bits == 8
             and jax.default_backend() == "cpu")
  if as_codes or not fmt.native or bitcast:
    codes = _codes_from_magnitude(mag, neg, fmt)
    sign = jnp.where(neg, _U32(1 << (fmt.bits - 1)), _U32(0))
    if fmt.has_inf:
      codes = jnp.where(to_inf, _U32(fmt.inf_code) | sign, codes)
    nan_code = fmt.nan_code if fmt.has_nan else 1 << (fmt.bits - 1)
    codes = jnp.where(to_nan, _U32(nan_code), codes).astype(jnp.uint8)
    return lax.bitcast_convert_type(codes, fmt.dtype) if bitcast else codes
  value = lax.bitcast_convert_type(mag | (bits & _U32(0x80000000)),
                                   jnp.float32)
  value = jnp.where(to_inf, jnp.where(neg, -jnp.inf, jnp.inf), value)
  # Formats without NaN take NaN to -0, as ml_dtypes does.
  value = jnp.where(to_nan, jnp.float32(jnp.nan if fmt.has_nan else -0.0),
                    value)
  return value.astype(fmt.dtype)


def _ste(x, rand, fmt_name, rounding, saturate, as_codes):
  return _round_jit(x, rand, fmt_name, rounding, saturate, as_codes)


_ste = jax.custom_jvp(_ste, nondiff_argnums=(2, 3, 4, 5))


@_ste.defjvp
def _ste_jvp(fmt_name, rounding, saturate, as_codes, primals, tangents):
  # The identity, as far as a narrow tangent can hold it: JAX wants the
  # tangent of a narrow result in its format, and uint8 codes take none.
  # `decode` of the result differentiates around it, exactly (decode_grad.py).
  x, rand = primals
  out = _ste(x, rand, fmt_name, rounding, saturate, as_codes)
  if as_codes or not formats.get(fmt_name).native:
    return out, np.zeros(out.shape, jax.dtypes.float0)
  return out, tangents[0].astype(out.dtype)


def _check_rounding(rounding: str, saturate: bool) -> None:
  if rounding not in ROUNDINGS:
    raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
  if not isinstance(saturate, (bool, np.bool_)):
    raise TypeError(f"saturate must be a bool, got {type(saturate).__name__}")


def round_to(x: jax.Array, fmt: formats.FormatLike, *,
             rounding: Rounding = "nearest", saturate: bool = True,
             rand: jax.Array | None = None) -> Any:
  """Rounds float32 ``x`` into ``fmt``; a native array or a CodeArray.

  Args:
    x: a float32 array (callers convert first: :func:`to_float32`).
    fmt: any registered format but float32.
    rounding: one of :data:`ROUNDINGS`.
    saturate: overflow to +-max (True) or by IEEE rules (False).
    rand: uint32 random words of ``x``'s shape, for ``"stochastic"``.

  Returns:
    A ``jax.Array`` of ``fmt`` where the installed JAX holds it, else a
    :class:`CodeArray`. Differentiates as the identity in ``x`` (the tangent
    is held in ``fmt``, as JAX holds every narrow tangent; a CodeArray's
    codes take none: :func:`jaxfp8.decode` goes around them).

  >>> import jax.numpy as jnp
  >>> round_to(jnp.array([1.1, 500.0]), "e4m3")
  Array([1.125, 448], dtype=float8_e4m3fn)
  >>> round_to(jnp.array([0.3]), "e2m3")
  CodeArray(float6_e2m3fn, shape=(1,), values=[0.25])
  """
  fmt = formats.get(fmt)
  _check_rounding(rounding, saturate)
  out = _ste(x, rand, fmt.name, rounding, bool(saturate), not fmt.native)
  return out if fmt.native else CodeArray(out, fmt)


def round_to_codes(x: jax.Array, fmt: formats.FormatLike, *,
                   rounding: Rounding = "nearest", saturate: bool = True,
                   rand: jax.Array | None = None) -> jax.Array:
  """Like :func:`round_to`, but the uint8 codes of a narrow ``fmt``.

  >>> import jax.numpy as jnp
  >>> round_to_codes(jnp.array([1.0, -0.5]), "e2m1")
  Array([2, 9], dtype=uint8)
  """
  fmt = formats.get(fmt)
  if not fmt.narrow:
    raise TypeError(f"round_to_codes: {fmt.name} has no uint8 codes")
  _check_rounding(rounding, saturate)
  return _ste(x, rand, fmt.name, rounding, bool(saturate), True)


def stochastic_bits(rounding: str, key: Any, shape: tuple[int, ...], *,
                    fn: str) -> jax.Array | None:
  """The 32 random bits per element that ``rounding="stochastic"`` takes
  (``round_to(..., rand=...)``), drawn from ``key``; None for other modes.

  Raises:
    ValueError: stochastic rounding without a key.
    TypeError: a ``key`` that is not a PRNG key.
  """
  if rounding != "stochastic":
    return None
  if key is None:
    raise ValueError(f"`{fn}` with rounding='stochastic' needs a `key` "
                     "argument (a jax.random key)")
  return jax.random.bits(validate.check_key(key, fn), shape, jnp.uint32)


def to_float32(x: Any, *, fn: str, arg: str = "x") -> jax.Array:
  """``x`` as float32, for public functions that round it.

  Narrow arrays and CodeArrays are decoded exactly; other real arrays and
  scalars are converted, 64-bit and large Python integers on the host with
  one rounding (:func:`jaxfp8._src.numerics.host.host_float32`: no wrap
  through int32 with x64 off). Errors name ``fn`` and ``arg``: TypeError for
  non-arrays and for object, string or complex arrays.
  """
  validate.check_array(x, arg, fn)
  if isinstance(x, CodeArray) or formats.is_narrow(getattr(x, "dtype", None)):
    return decode(x, jnp.float32)
  kind = getattr(getattr(x, "dtype", None), "kind", "f")
  if kind in "OUSMm":  # objects, strings, bytes, datetimes: jnp can't take
    raise TypeError(f"`{arg}` argument to `{fn}` must be real numbers, got "
                    f"an array of dtype {x.dtype}")
  x = device_array(host_float32(x))
  if not (jnp.issubdtype(x.dtype, jnp.floating)
          or jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == bool):
    raise TypeError(f"`{arg}` argument to `{fn}` must be real numbers, got "
                    f"{x.dtype}")
  return x.astype(jnp.float32)


def operand_float32(x: Any, *, fn: str) -> jax.Array:
  """``x`` in float32 for a product: wide floats (bfloat16 too) converted
  on device, everything else read by :func:`to_float32`."""
  dtype = getattr(x, "dtype", None)
  if (dtype is not None and jnp.issubdtype(dtype, jnp.floating)
      and np.dtype(dtype).itemsize >= 2):
    return device_array(x).astype(jnp.float32)
  return to_float32(x, fn=fn)


__all__ = ["NEAREST_OR_STOCHASTIC", "ROUNDINGS", "Rounding", "f32_bits", "limit_magnitude",
           "operand_float32", "round_magnitude", "round_to", "round_to_codes",
           "to_float32"]
