"""What the matmul kernels share: run modes, argument checks, tiles, padding.

A kernel runs in one of three modes, picked from the ``interpret`` argument:

- ``"compiled"``: ``pl.pallas_call`` lowered by the Triton backend (GPU only).
- ``"interpret"``: the same ``pl.pallas_call`` run by Pallas' interpreter
  (any backend; slow, for tests).
- ``"reference"``: the plain-jnp reference of the op, no Pallas at all.

``interpret=None`` means compiled on a GPU and reference elsewhere.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any
import warnings

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

# Triton's fp8 conversions and dots need compute capability 8.9 (Ada, Hopper).
MIN_COMPUTE_CAPABILITY = 89

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


def resolve_mode(interpret: Any, fn: str) -> str:
  """Returns "compiled", "interpret" or "reference" for ``interpret``."""
  if interpret is not None and not isinstance(interpret, (bool, np.bool_)):
    raise TypeError(f"`interpret` argument to `{fn}` must be None, True or "
                    f"False, got {interpret!r}")
  backend = jax.default_backend()
  if interpret:
    return "interpret"
  if backend != "gpu":
    if interpret is None:
      return "reference"
    raise NotImplementedError(
        f"`{fn}` with interpret=False needs a GPU: the kernel is compiled by "
        f"Pallas' Triton backend, and the default backend is {backend!r}. "
        "Use interpret=True (Pallas interpreter) or interpret=None (jnp "
        "reference).")
  cc = gpu_compute_capability()
  if cc is not None and cc < MIN_COMPUTE_CAPABILITY:
    raise NotImplementedError(
        f"`{fn}` needs a GPU of compute capability >= 8.9 for fp8 tensor-core "
        f"dots (Triton has no fp8 dot below it); this one is {cc / 10:.1f}. "
        "Use interpret=True or the reference.")
  return "compiled"


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


@dataclasses.dataclass(frozen=True)
class Tiles:
  """Tile sizes and Triton launch parameters of one kernel call."""
  block_m: int
  block_n: int
  block_k: int
  num_warps: int
  num_stages: int
  group_m: int


def pow2_at_least(n: int, floor: int) -> int:
  """The smallest power of two >= ``n``, at least ``floor``."""
  return max(floor, 1 << (max(n, 1) - 1).bit_length())


def _check_tile(v: Any, arg: str, fn: str, minimum: int) -> int:
  if (not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1
      or v & (v - 1)):
    raise ValueError(f"`{arg}` argument to `{fn}` must be a power of two "
                     f"(Triton tiles are), got {v!r}")
  if v < minimum:
    raise ValueError(f"`{arg}` argument to `{fn}` must be at least {minimum} "
                     f"(the smallest fp8 MMA tile), got {v}")
  return int(v)


def choose_tiles(m: int, n: int, k: int, *, caps: tuple[int, int, int],
                 fn: str, min_k: int = 32, block_m: int | None = None,
                 block_n: int | None = None, block_k: int | None = None,
                 num_warps: int | None = None, num_stages: int | None = None,
                 group_m: int = 8) -> Tiles:
  """Tiles for an (m, n, k) product: given ones checked, the rest defaulted.

  Defaults are the largest power of two up to ``caps`` that the problem
  fills (at least 16 along M and N, ``min_k`` along K); shapes that don't
  divide the tiles are zero-padded by the caller.
  """
  bm = (pow2_at_least(m, 16) if block_m is None else
        _check_tile(block_m, "block_m", fn, 16))
  bn = (pow2_at_least(n, 16) if block_n is None else
        _check_tile(block_n, "block_n", fn, 16))
  bk = (pow2_at_least(k, min_k) if block_k is None else
        _check_tile(block_k, "block_k", fn, min_k))
  if block_m is None:
    bm = min(bm, caps[0])
  if block_n is None:
    bn = min(bn, caps[1])
  if block_k is None:
    bk = min(bk, max(caps[2], min_k))
  if num_warps is None:
    num_warps = 8 if bm * bn >= 128 * 128 else 4
  if num_stages is None:
    num_stages = 3
  for v, arg in ((num_warps, "num_warps"), (num_stages, "num_stages"),
                 (group_m, "group_m")):
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
      raise ValueError(f"`{arg}` argument to `{fn}` must be a positive "
                       f"integer, got {v!r}")
  return Tiles(bm, bn, bk, int(num_warps), int(num_stages), int(group_m))


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


def compiler_params(mode: str, tiles: Tiles):
  """Triton launch parameters for compiled mode (None otherwise)."""
  if mode != "compiled":
    return None
  from jax.experimental.pallas import triton as pltriton  # pylint: disable=g-import-not-at-top
  return pltriton.CompilerParams(num_warps=tiles.num_warps,
                                 num_stages=tiles.num_stages)


# JAX >= 0.11 warns on every Pallas-Triton lowering that the backend is
# deprecated (Mosaic GPU is its successor); the kernels are Triton's by
# design, so the warning tells a caller nothing they can act on.
_TRITON_DEPRECATION = "The Pallas Triton backend is deprecated"


@contextlib.contextmanager
def quiet_triton_deprecation(mode: str):
  """Silences only JAX's Triton-backend DeprecationWarning in compiled mode.

  The warning is raised when a compiled kernel is lowered (its first call per
  shape); other warnings, and other modes, pass through untouched.
  """
  if mode != "compiled":
    yield
    return
  with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=_TRITON_DEPRECATION,
                            category=DeprecationWarning)
    yield


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
