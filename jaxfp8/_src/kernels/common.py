"""What every matmul kernel and reference shares, whatever its backend:
argument checks, the per-tensor scale factors, padding and the grouped
program order, the GPU's compute capability.

The backends' own machinery is beside it: :mod:`.triton_common` (the Triton
kernels' run mode and tiles) and :mod:`.mosaic_gpu_common` (the Mosaic GPU
kernels'); :mod:`.implementation` picks among the backends of an op.
"""
from __future__ import annotations

from typing import Any

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src.numerics import formats

# The fp8 formats tensor cores multiply (and Triton's dot accepts).
FP8_DTYPES: tuple[np.dtype, ...] = tuple(
    formats.get(f).dtype for f in ("e4m3", "e5m2"))
OUT_DTYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(d) for d in (jnp.bfloat16, jnp.float16, jnp.float32))

# Contract dimension 1 of both operands: out = a @ b.T with K-major a and b.
CONTRACT_K = (((1,), (1,)), ((), ()))


def gpu_compute_capability() -> int | None:
  """The first device's compute capability as an int (89 for 8.9), or None.

  None where the device has none (CPU) or reports it in an unknown form.
  """
  cc = getattr(jax.devices()[0], "compute_capability", None)
  try:
    return int(str(cc).replace(".", ""))
  except ValueError:
    return None


def check_fp8_matrix(x: Any, arg: str, fn: str) -> jax.Array:
  """Returns ``x`` as a 2-D e4m3/e5m2 array, or raises naming ``arg``."""
  if not hasattr(x, "dtype") or not hasattr(x, "shape"):
    raise TypeError(f"`{arg}` argument to `{fn}` must be a 2-D fp8 array, got "
                    f"{type(x).__name__}")
  if np.dtype(x.dtype) not in FP8_DTYPES:
    if formats.is_narrow(x.dtype):
      raise NotImplementedError(
          f"`{arg}` argument to `{fn}` is {np.dtype(x.dtype).name}: fp8 tensor "
          "cores and Triton's dot take only float8_e4m3fn and float8_e5m2")
    raise TypeError(f"`{arg}` argument to `{fn}` must be float8_e4m3fn or "
                    f"float8_e5m2, got {np.dtype(x.dtype).name}")
  if len(x.shape) != 2:
    raise ValueError(f"`{arg}` argument to `{fn}` must be 2-D (rows, K), got "
                     f"shape {tuple(x.shape)}")
  return jnp.asarray(x)


def check_fp8_pair(a: Any, b: Any, fn: str) -> tuple[jax.Array, jax.Array]:
  """``a`` (M, K) and ``b`` (N, K) checked as K-major fp8 operands of one
  product (:func:`check_fp8_matrix`, and the same K)."""
  a = check_fp8_matrix(a, "a", fn)
  b = check_fp8_matrix(b, "b", fn)
  if a.shape[1] != b.shape[1]:
    raise ValueError(f"`a` and `b` arguments to `{fn}` must have the same K "
                     f"(their last axis): got shapes {a.shape} and {b.shape}")
  return a, b


def check_out_dtype(out_dtype: Any, fn: str) -> np.dtype:
  try:
    dt = np.dtype(out_dtype)
  except TypeError as e:
    raise TypeError(f"`out_dtype` argument to `{fn}` must be a dtype, got "
                    f"{out_dtype!r}") from e
  if dt not in OUT_DTYPES:
    raise NotImplementedError(
        f"`out_dtype` argument to `{fn}` must be one of "
        f"{', '.join(d.name for d in OUT_DTYPES)} (the float32 accumulator is "
        f"rounded once to it), got {dt.name}")
  return dt


def _as_precision(p: Any) -> lax.Precision:
  """One ``lax.Precision`` from an enum or a name, as lax.dot_general reads
  them ("DEFAULT", "highest", "float32", "bfloat16"...)."""
  if isinstance(p, lax.Precision):
    return p
  if isinstance(p, str):
    try:
      return lax.Precision[p.upper()]
    except KeyError:
      return lax.Precision(p.lower())
  raise TypeError(p)


def widen_to_bf16(precision: Any, fn: str) -> bool:
  """Whether ``precision`` asks for fp8 tiles widened to bfloat16 in-kernel.

  ``precision`` is what ``lax.dot_general`` takes: None, a
  ``lax.Precision``, its name, or a pair of those (lhs, rhs). None / DEFAULT
  / HIGH: fp8 MMA. HIGHEST (for either operand): both tiles are widened to
  bfloat16 (exact for every e4m3 and e5m2 value) and multiplied by the
  bfloat16 MMA, which accumulates at full float32 precision, at half the fp8
  rate. (Hopper's fp8 MMA sums each 32-long product block with fewer bits
  than float32 keeps.)
  """
  if precision is None:
    return False
  pair = (tuple(precision) if isinstance(precision, (tuple, list))
          and len(precision) == 2 else (precision,))
  try:
    ps = [_as_precision(p) for p in pair if p is not None]
  except (ValueError, TypeError, KeyError) as e:
    raise ValueError(f"`precision` argument to `{fn}` must be None, a "
                     f"jax.lax.Precision or its name, or a pair of those, got "
                     f"{precision!r}") from e
  return lax.Precision.HIGHEST in ps


def scale_factors(a_scale: jax.Array, b_scale: jax.Array
                  ) -> tuple[jax.Array, jax.Array]:
  """(first, second): ``acc * first * second`` is ``acc * a_scale * b_scale``
  without a spurious overflow or underflow.

  The scales' product comes first (and 1 second) when it is a normal float32
  number (or 0); when it overflows, the smaller scale comes first, when it
  underflows, the larger, so the result is finite and nonzero whenever the
  true product is, whichever operand holds which scale. Only scalar
  comparisons and selects (Triton and Mosaic GPU lower them).
  """
  p = a_scale * b_scale
  a_big = jnp.abs(a_scale) >= jnp.abs(b_scale)
  big = jnp.where(a_big, a_scale, b_scale)
  small = jnp.where(a_big, b_scale, a_scale)
  mag = jnp.abs(p)
  normal = (mag <= _F32_MAX) & ((mag >= _F32_TINY) | (small == 0))
  overflow = mag > _F32_MAX  # also for an infinite scale: inf either way
  first = jnp.where(normal, p, jnp.where(overflow, small, big))
  second = jnp.where(normal, jnp.float32(1), jnp.where(overflow, big, small))
  return first, second


def apply_scales(acc: jax.Array, a_scale: jax.Array, b_scale: jax.Array
                 ) -> jax.Array:
  """``acc * a_scale * b_scale`` as :func:`scale_factors` orders it."""
  first, second = scale_factors(a_scale, b_scale)
  return acc * first * second


_F32_MAX = np.float32(np.finfo(np.float32).max)
_F32_TINY = np.float32(np.finfo(np.float32).tiny)


def pow2_at_least(n: int, floor: int) -> int:
  """The smallest power of two >= ``n``, at least ``floor``."""
  return max(floor, 1 << (max(n, 1) - 1).bit_length())


def pad_to(x: jax.Array, multiples: tuple[int, ...], value: Any = 0
           ) -> jax.Array:
  """Pads each axis of ``x`` at the end up to a multiple (no copy if none)."""
  pads = [(0, -d % mult) for d, mult in zip(x.shape, multiples)]
  if not any(p for _, p in pads):
    return x
  return jnp.pad(x, pads, constant_values=np.array(value, x.dtype))


def tile_of_program(pid, grid_m: int, grid_n: int, group_m: int):
  """(row tile, column tile) that program ``pid`` of a 1-D grid computes.

  Programs walk down ``group_m`` row tiles before moving one column tile
  right, so neighbouring programs share operand tiles in L2.
  """
  # lax.div / lax.rem: truncating ops, exact for these non-negative ints and
  # lowered by Triton without jnp's floor-division sign fix-ups.
  per_group = group_m * grid_n
  first_m = lax.div(pid, per_group) * group_m
  rows = jnp.minimum(grid_m - first_m, group_m)
  local = lax.rem(pid, per_group)
  return first_m + lax.rem(local, rows), lax.div(local, rows)


def check_scale(s: Any, arg: str, fn: str) -> jax.Array:
  """A per-tensor scale as a float32 scalar, or raises naming ``fn``."""
  dtype = getattr(s, "dtype", None)
  if dtype is None:
    if not isinstance(s, (int, float, np.number)) or isinstance(s, bool):
      raise TypeError(f"`{arg}` argument to `{fn}` must be a real "
                      f"scalar or a one-element array, got {type(s).__name__}")
  elif not (jnp.issubdtype(dtype, jnp.floating)
            or jnp.issubdtype(dtype, jnp.integer)):
    raise TypeError(f"`{arg}` argument to `{fn}` must be real, got "
                    f"dtype {np.dtype(dtype).name}")
  if int(np.prod(np.shape(s))) != 1:
    raise ValueError(f"`{arg}` argument to `{fn}` must hold one "
                     f"per-tensor scale, got shape {tuple(np.shape(s))}")
  return jnp.asarray(s, jnp.float32).reshape(())
