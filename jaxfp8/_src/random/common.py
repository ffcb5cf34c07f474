"""Pieces every sampling method shares: formats, keys, parameters, output.

Samplers work on *codes* (the format's uint8 bit patterns) and turn them into
the caller's array type at the very end, so one code path serves formats the
installed XLA can hold (a native array comes back) and formats it can't
(float6: a :class:`jaxfp8.CodeArray`).
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src import compat
from jaxfp8._src import formats
from jaxfp8._src import rounding
from jaxfp8._src import validate
from jaxfp8._src import codes as codes_lib
from jaxfp8._src.codes import CodeArray


def out_format(dtype: Any, fn: str) -> formats.Format | None:
  """The narrow format asked for, or None for a wide float (or ``None``).

  Raises:
    TypeError: for integer, boolean or other non-floating dtypes, naming
      ``fn`` and the ``dtype`` argument.
  """
  if dtype is None or dtype is float:
    return None
  try:  # float64 and other wide NumPy floats go to jax.random as given
    dt = np.dtype(dtype)
    if np.issubdtype(dt, np.floating) and not formats.is_narrow(dt):
      return None
  except TypeError:
    pass  # a format name such as "e4m3": the registry knows it
  try:
    fmt = formats.get(dtype, arg="dtype", fn=fn)
  except TypeError as e:
    raise TypeError(f"`dtype` argument to `{fn}` must be a floating format "
                    f"(float32, bfloat16, float16, or a narrow format such as "
                    f"float8_e4m3fn), got {_dtype_name(dtype)}") from e
  return fmt if fmt.narrow else None


def _dtype_name(dtype: Any) -> str:
  try:
    return np.dtype(dtype).name
  except TypeError:
    return repr(dtype)


def check_key(key: Any, fn: str) -> jax.Array:
  """A typed key or raw uint32 key, else a TypeError naming `key`."""
  return validate.check_key(key, fn)


def check_finite(params: dict[str, Any], fn: str,
                 allow_inf: tuple[str, ...] = ()) -> None:
  """ValueError naming the parameter when a concrete one holds NaN or (unless
  allowed) an infinity: the samples would be NaN or meaningless.

  Python numbers, NumPy values and 0-d arrays are checked; device arrays
  with elements are not (that would be a device-to-host copy per call).
  """
  for arg, v in params.items():
    if isinstance(v, jax.Array) and v.ndim:
      continue
    a = concrete_array(v)
    if a is None:
      continue
    bad = np.isnan(a) if arg in allow_inf else ~np.isfinite(a)
    if bad.any():
      raise ValueError(f"`{arg}` argument to `{fn}` must be "
                       f"{'not NaN' if arg in allow_inf else 'finite'}, got "
                       f"{a if a.ndim == 0 else a[bad][:4]}")


def as_float32(x: Any, arg: str, fn: str) -> jax.Array:
  """A parameter as float32 (narrow arrays and CodeArrays decoded exactly)."""
  return rounding.to_float32(x, fn=fn, arg=arg)


def as_jax_param(x: Any, arg: str, fn: str) -> Any:
  """A parameter as jax.random takes it: narrow formats decoded to float32,
  Python numbers left weakly typed, other arrays unchanged."""
  if isinstance(x, (int, float)) and not isinstance(x, bool):
    return x
  return as_float32(x, arg, fn)


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


def check_positive_array(x: Any, arg: str, fn: str,
                         allow_zero: bool = False) -> None:
  """ValueError if any element of a concrete parameter is not positive."""
  a = concrete_array(x)
  if a is None:
    return
  ok = a >= 0 if allow_zero else a > 0
  if not np.all(ok):
    want = "non-negative" if allow_zero else "positive"
    raise ValueError(f"`{arg}` argument to `{fn}` must be {want}, got "
                     f"{a if a.ndim == 0 else a[~ok][:4]}")


def check_array_less(lo: Any, hi: Any, lo_arg: str, hi_arg: str,
                     fn: str, or_equal: bool = False) -> None:
  """ValueError unless ``lo < hi`` (``<=`` with ``or_equal``) element-wise;
  checked when both are concrete (traced parameters are not checked)."""
  a, b = concrete_array(lo), concrete_array(hi)
  if a is None or b is None:
    return
  ok = a <= b if or_equal else a < b
  if not np.all(ok):
    rel = "at most" if or_equal else "less than"
    raise ValueError(f"`{lo_arg}` argument to `{fn}` must be {rel} "
                     f"`{hi_arg}` (every element), got {lo_arg}={lo} and "
                     f"{hi_arg}={hi}")


def codes_table(fmt: formats.Format) -> np.ndarray:
  """uint8 code of each of ``fmt.values`` (sorted finite values)."""
  return fmt.codes.astype(np.uint8)


from_codes = codes_lib.from_codes


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
