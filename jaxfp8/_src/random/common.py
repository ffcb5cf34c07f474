"""Pieces every sampling method shares: formats, parameters, output.

Samplers work on *codes* (the format's uint8 bit patterns) and turn them into
the caller's array type at the very end, so one code path serves formats the
installed XLA can hold (a native array comes back) and formats it can't
(float6: a :class:`jaxfp8.CodeArray`).
"""
from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxfp8._src import compat
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import rounding
from jaxfp8._src.numerics import validate
from jaxfp8._src.numerics.codes import CodeArray
from jaxfp8._src.random import distributions


def out_format(dtype: Any, fn: str) -> tuple[formats.Format | None, Any]:
  """``(narrow format, None)``, or ``(None, dtype)`` for a wide float.

  ``dtype`` is read by :func:`jaxfp8._src.numerics.formats.get_dtype`, so
  every name and alias works: a narrow one (``"e4m3"``, ``jnp.float8_e5m2``)
  is sampled here, a wide one (``"bf16"``, ``"f16"``, ``jnp.float32``,
  ``"f64"``) goes to jax.random as that dtype, and None stays None
  (jax.random's default).

  Raises:
    TypeError: for integer, boolean or other non-floating dtypes, naming
      ``fn`` and the ``dtype`` argument.
    ValueError: for an unknown format name.
  """
  if dtype is None:
    return None, None
  try:
    dt = formats.get_dtype(dtype, arg="dtype", fn=fn)
  except TypeError as e:
    raise TypeError(f"`dtype` argument to `{fn}` must be a floating format "
                    f"(float32, bfloat16, float16, or a narrow format such as "
                    f"float8_e4m3fn), got {_dtype_name(dtype)}") from e
  if formats.is_narrow(dt):
    return formats.get(dt), None
  return None, dt


def _dtype_name(dtype: Any) -> str:
  try:
    return np.dtype(dtype).name
  except TypeError:
    return repr(dtype)


def check_params(fn: str, params: dict[str, Any]) -> None:
  """Checks concrete parameters against the domain of ``fn``'s distribution.

  Every concrete value is checked element by element (Python numbers, NumPy
  arrays, concrete jax arrays, CodeArrays decoded exactly); traced ones are
  not. The rules are the distribution table's
  (:func:`jaxfp8._src.random.distributions.check_domain`).

  Raises:
    ValueError: naming ``fn`` and the parameter.
  """
  distributions.check_domain(
      fn, {k: concrete_array(v) for k, v in params.items()})


# Laws jax.random computes from a difference of two parameters in float32.
_SPANS = {"uniform": ("minval", "maxval"), "triangular": ("left", "right")}
# Where jax.random's float32 arithmetic itself gives NaN (measured: the F
# draw's two gamma draws both underflow to 0 for small degrees of freedom, or
# overflow for huge ones; the Wald draw overflows for a huge mean).
_CAST_RANGES = {"f": {"dfnum": (0.25, 1e18), "dfden": (0.25, 1e18)},
                "wald": {"mean": (0.0, 1e18)}}
_TINY32 = float(np.finfo(np.float32).tiny)


def check_float32_params(fn: str, params: dict[str, Any]) -> None:
  """Checks that concrete parameters survive float32, as the cast method
  (jax.random's float32 draw) needs.

  Each finite value must stay finite in float32, the domain rules must hold
  for the float32 values (a positive parameter that underflows to zero, or an
  ordered pair that collapses, is refused), and for uniform and triangular
  the span ``maxval - minval`` (``right - left``) must be finite in float32:
  otherwise jax.random's float32 arithmetic gives NaN or a wrong law.

  Raises:
    ValueError: naming ``fn``, the parameter and float32's range.
  """
  arrays = {k: concrete_array(v) for k, v in params.items()}
  f32 = {}
  with np.errstate(over="ignore", under="ignore", invalid="ignore"):
    for arg, a in arrays.items():
      if a is None:
        f32[arg] = None
        continue
      a32 = a.astype(np.float32)
      bad = np.isfinite(a) & ~np.isfinite(a32)
      if bad.any():
        raise ValueError(
            f"`{arg}` argument to `{fn}` must be within float32's range "
            f"(|x| <= 3.4e38) for method='cast' (a float32 draw), got "
            f"{a if a.ndim == 0 else a[bad][:4]}; method='exact' takes "
            "float64 scalar parameters")
      f32[arg] = a32
      d = distributions.get(fn)
      lo, hi = _CAST_RANGES.get(fn, {}).get(arg, (None, None))
      if arg in d.positive and lo is None:
        lo = _TINY32  # XLA on CPU flushes smaller (subnormal) ones to zero
      if lo is not None:
        ok = ~np.isfinite(a) | ((a >= lo) & (a <= (hi or np.inf)))
        if not np.all(ok):
          raise ValueError(
              f"`{arg}` argument to `{fn}` must be within [{lo:.3g}, "
              f"{hi or 3.4e38:.3g}] for method='cast' (jax.random's float32 "
              f"draw gives NaN or zero beyond), got "
              f"{a if a.ndim == 0 else a[~ok][:4]}")
    span = _SPANS.get(fn)
    if span and f32[span[0]] is not None and f32[span[1]] is not None:
      width = f32[span[1]] - f32[span[0]]
      if not np.all(np.isfinite(width)):
        raise ValueError(
            f"`{span[1]} - {span[0]}` of `{fn}` must be within float32's "
            f"range (<= 3.4e38) for method='cast' (a float32 draw), got "
            f"{span[0]}={arrays[span[0]]}, {span[1]}={arrays[span[1]]}; "
            "method='exact' takes float64 scalar parameters")
  try:
    distributions.check_domain(fn, f32)
  except ValueError as e:
    raise ValueError(f"{e} once rounded to float32 for method='cast' (a "
                     "float32 draw); method='exact' takes float64 scalar "
                     "parameters") from e


def check_broadcast(fn: str, params: dict[str, Any], shape: Any) -> None:
  """ValueError unless every parameter broadcasts to ``shape`` (jax.random
  would fail inside its arithmetic, naming neither)."""
  if shape is None:
    return
  for arg, v in params.items():
    s = tuple(getattr(v, "shape", np.shape(v)))
    try:
      ok = np.broadcast_shapes(s, tuple(shape)) == tuple(shape)
    except ValueError:
      ok = False
    if not ok:
      raise ValueError(f"`{arg}` argument to `{fn}` has shape {s}, which does "
                       f"not broadcast to the `shape` argument {tuple(shape)}")


def as_jax_param(x: Any, arg: str, fn: str) -> Any:
  """A parameter as jax.random takes it: narrow formats decoded to float32,
  Python numbers left weakly typed (ints beyond int32 rounded once to
  float32 instead of wrapping), other arrays as float32."""
  if isinstance(x, float) or (isinstance(x, int) and not isinstance(x, bool)
                              and -2**31 <= x < 2**31):
    return x
  return rounding.to_float32(x, fn=fn, arg=arg)


def concrete_scalar(x: Any) -> float | None:
  """The value of a concrete 0-d parameter, or None if traced or per-element.

  Narrow arrays are decoded exactly; Python numbers and float64 NumPy scalars
  keep their full precision (the exact law uses them as given).
  """
  if isinstance(x, compat.Tracer):
    return None
  if isinstance(x, (int, float, bool, np.integer, np.floating)):
    return float(x)
  if isinstance(x, CodeArray):
    if x.ndim or isinstance(x.codes, compat.Tracer):
      return None
    return float(np.asarray(x).astype(np.float64))
  arr = getattr(x, "ndim", None)
  if arr != 0:
    return None
  try:
    return float(np.asarray(x).astype(np.float64))
  except (TypeError, jax.errors.ConcretizationTypeError):
    return None


def concrete_array(x: Any) -> np.ndarray | None:
  """A concrete parameter as float64 NumPy (narrow decoded), else None."""
  if isinstance(x, CodeArray):
    x = x.codes if isinstance(x.codes, compat.Tracer) else np.asarray(x)
  if isinstance(x, compat.Tracer):
    return None
  try:
    return np.asarray(x).astype(np.float64)
  except (TypeError, ValueError, jax.errors.ConcretizationTypeError):
    return None


def codes_table(fmt: formats.Format) -> np.ndarray:
  """uint8 code of each of ``fmt.values`` (sorted finite values)."""
  return fmt.codes.astype(np.uint8)


def wrap(out: jax.Array, fmt: formats.Format):
  """Output of ``jaxfp8.cast``'s private kernel -> the caller's array."""
  return out if fmt.native else CodeArray(out, fmt)


def shard(out, out_sharding):
  """Applies ``out_sharding`` like jax.random does (samples don't change)."""
  if out_sharding is None:
    return out
  if isinstance(out, CodeArray):
    return CodeArray(shard(out.codes, out_sharding), out.format)
  return compat.reshard(out, out_sharding)


def broadcast_shape(shape: Any, params: dict[str, Any], fn: str
                    ) -> tuple[int, ...]:
  """``shape`` checked, or (when None) the broadcast shape of the params."""
  if shape is not None:
    return validate.check_shape(shape, fn)
  shapes = [np.shape(p) if not isinstance(p, CodeArray) else p.shape
            for p in params.values()]
  try:
    return tuple(np.broadcast_shapes(*shapes))
  except ValueError as e:
    raise ValueError(f"parameters of `{fn}` don't broadcast together: "
                     f"{dict(zip(params, shapes))}") from e
