"""Exact casts into narrow formats: five rounding modes, saturating by default.

The public faces of the rounding core (:mod:`jaxfp8._src.numerics.rounding`), which
rounds on the float32 bit pattern with integer arithmetic: the result is
exact even where XLA on CPU flushes float32 subnormals to zero, and formats
XLA can't hold come back as :class:`jaxfp8.CodeArray`.
"""
from __future__ import annotations

from typing import Any

import jax

from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import rounding as rounding_lib
from jaxfp8._src.numerics import validate
from jaxfp8._src.numerics.codes import CodeArray
from jaxfp8._src.numerics.codes import decode
from jaxfp8._src.numerics.codes import remember_source
from jaxfp8._src.numerics.rounding import Rounding
from jaxfp8._src.numerics.rounding import ROUNDINGS


def _prepare(x, fmt, rounding, saturate, key, fn):
  fmt = formats.get(fmt, arg="fmt", fn=fn)
  validate.check_choice(rounding, ROUNDINGS, "rounding", fn)
  validate.check_bool(saturate, "saturate", fn)
  x32 = rounding_lib.to_float32(x, fn=fn)
  return x32, fmt, rounding_lib.stochastic_bits(rounding, key, x32.shape,
                                                fn=fn)


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
    TypeError: for a non-array ``x`` (or one of objects, strings or complex
      numbers), a non-floating ``fmt``, a non-bool ``saturate`` or a bad
      ``key``.
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
  x32, fmt, rand = _prepare(x, fmt, rounding, saturate, key, "cast")
  if fmt.bits == 32:
    if rounding != "nearest":
      raise ValueError(f"`cast` to float32 rounds nothing: rounding must be "
                       f"'nearest', got {rounding!r}")
    return x32
  out = rounding_lib.round_to(x32, fmt, rounding=rounding,
                             saturate=bool(saturate), rand=rand)
  return remember_source(out, x32)


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
  x32, fmt, rand = _prepare(x, fmt, rounding, saturate, key, "encode")
  if not fmt.narrow:
    raise TypeError(f"`fmt` argument to `encode` must be a narrow format, got "
                    f"{fmt.name}")
  codes = rounding_lib.round_to_codes(x32, fmt, rounding=rounding,
                                      saturate=bool(saturate), rand=rand)
  return remember_source(CodeArray(codes, fmt), x32)
