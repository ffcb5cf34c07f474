"""What the Mosaic GPU kernels share: run modes, tiles, the K pipeline, the
epilogue.

The kernels are written with Pallas' Mosaic GPU backend (``plgpu``), the GPU
backend JAX keeps (its Triton backend is deprecated from JAX 0.11). Each
program of a 1-D grid owns one ``(block_m, block_n)`` output tile, computed
by one warpgroup: :func:`pipeline` streams the ``(block_m, block_k)`` and
``(block_n, block_k)`` fp8 tiles of both K-major operands (and any per-step
scales) from global to shared memory by TMA, ``max_concurrent_steps`` steps
ahead, and ``wgmma`` multiplies the fp8 tiles straight from shared memory
into float32 accumulators; :func:`store` rounds the float32 tile once to the
output dtype and writes it back by TMA.

A kernel runs in one of three modes, picked from the ``interpret`` argument:

- ``"compiled"``: lowered by Mosaic GPU, on a GPU of compute capability
  9.x: ``wgmma`` is Hopper's (Blackwell's tensor cores take ``tcgen05``
  instead, which these kernels don't issue).
- ``"interpret"``: the same kernel in Pallas' Mosaic GPU interpreter, on
  CPU (JAX >= 0.11; slow, for tests).
- ``"reference"``: the plain-jnp reference of the op.

``interpret=None`` means compiled on such a GPU and reference elsewhere.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu
import jax.numpy as jnp
import numpy as np

from jaxfp8._src import compat
from jaxfp8._src.kernels import common as shared

# wgmma (warpgroup MMA with fp8 operands) is Hopper's, sm_90: Blackwell
# (10.x, 12.x) has tcgen05 in its place.
MIN_COMPUTE_CAPABILITY, MAX_COMPUTE_CAPABILITY = 90, 99


def is_hopper(compute_capability: int | None) -> bool:
  """Whether a GPU of this compute capability (90 for 9.0) runs wgmma."""
  return (compute_capability is not None and MIN_COMPUTE_CAPABILITY
          <= compute_capability <= MAX_COMPUTE_CAPABILITY)

# One warpgroup's wgmma covers 64 rows; a tile is one or two of them.
_BLOCK_M = (64, 128)
# Shared-memory swizzles are at most 128 bytes: 128 fp8 elements of K.
_BLOCK_K = (32, 64, 128)
# Shared memory a Hopper block may hold (227 KiB; what Mosaic GPU checks).
SMEM_BYTES = 232448


_GPU_PLATFORMS = ("gpu", "cuda", "rocm")


def hopper(platform: str, compute_capability: int | None = None) -> bool:
  """Whether ``platform`` runs the kernels compiled: a GPU of compute
  capability 9.x (``compute_capability`` defaults to the first device's)."""
  if platform not in _GPU_PLATFORMS:
    return False
  if compute_capability is None:
    compute_capability = shared.gpu_compute_capability()
  return is_hopper(compute_capability)


def resolve_mode(interpret: Any, fn: str, *, platform: str | None = None,
                 compute_capability: int | None = None) -> str:
  """Returns "compiled", "interpret" or "reference" for ``interpret``.

  ``platform`` and ``compute_capability`` default to the first device's.
  """
  if interpret is not None and not isinstance(interpret, (bool, np.bool_)):
    raise TypeError(f"`interpret` argument to `{fn}` must be None, True or "
                    f"False, got {interpret!r}")
  if interpret:
    if compat.mosaic_gpu_interpret_params() is None:
      raise NotImplementedError(
          f"`{fn}` with interpret=True needs Pallas' Mosaic GPU interpreter, "
          f"which JAX >= 0.11 ships; this is JAX {jax.__version__}. Use "
          "interpret=None for the jnp reference.")
    return "interpret"
  if platform is None:
    platform = jax.default_backend()
  if hopper(platform, compute_capability):
    return "compiled"
  if interpret is None:
    return "reference"
  if compute_capability is None and platform == "gpu":
    compute_capability = shared.gpu_compute_capability()
  where = (f"a GPU of compute capability {compute_capability / 10:.1f}"
           if platform == "gpu" and compute_capability is not None
           else f"the {platform!r} backend")
  raise NotImplementedError(
      f"`{fn}` with interpret=False needs a Hopper GPU, compute capability "
      f"9.x (the kernels issue wgmma, which Blackwell replaced with "
      f"tcgen05), not {where}. Use interpret=True "
      "(the Mosaic GPU interpreter) or interpret=None (jnp reference).")


def check_pair_dtypes(a_dtype: Any, b_dtype: Any, fn: str) -> None:
  """Raises where this JAX's ``wgmma`` can't take an e4m3 / e5m2 pair."""
  if np.dtype(a_dtype) != np.dtype(b_dtype) and not compat.mosaic_gpu_mixed_fp8():
    raise NotImplementedError(
        f"`{fn}` with mixed fp8 formats ({np.dtype(a_dtype).name} and "
        f"{np.dtype(b_dtype).name}) needs JAX >= 0.12, whose Mosaic GPU wgmma "
        f"takes the pair; this is JAX {jax.__version__}. Use one format, or "
        "the Triton kernel")


def takes_pair(a_dtype: Any, b_dtype: Any) -> bool:
  """Whether the kernels take this operand pair on this JAX."""
  return np.dtype(a_dtype) == np.dtype(b_dtype) or compat.mosaic_gpu_mixed_fp8()


@dataclasses.dataclass(frozen=True)
class Tiles:
  """Tile sizes and pipeline depth of one kernel call."""
  block_m: int
  block_n: int
  block_k: int
  max_concurrent_steps: int


def _check_choice_int(v: Any, arg: str, fn: str, allowed: Sequence[int],
                      what: str) -> int:
  if (not isinstance(v, (int, np.integer)) or isinstance(v, bool)
      or int(v) not in allowed):
    raise ValueError(f"`{arg}` argument to `{fn}` must be one of "
                     f"{', '.join(map(str, allowed))} ({what}), got {v!r}")
  return int(v)


def choose_tiles(m: int, n: int, k: int, *, fn: str, max_block_m: int = 128,
                 max_block_n: int = 128, block_m: int | None = None,
                 block_n: int | None = None, block_k: int | None = None,
                 max_concurrent_steps: int | None = None,
                 k_multiple: int = 32, out_itemsize: int = 4,
                 step_bytes: Callable[[int, int, int], int] | None = None
                 ) -> Tiles:
  """Tiles for an (m, n, k) product: given ones checked, the rest defaulted.

  ``block_m`` is 64 or 128 (one or two wgmma row groups), ``block_n`` a
  power of two in [16, 256], ``block_k`` 32, 64 or 128 (a shared-memory
  swizzle of that many bytes) and a multiple of ``k_multiple`` (a kernel
  whose scales change every ``k_multiple`` elements of K). Defaults: the
  largest tile up to ``max_block_m`` x ``max_block_n`` the problem fills,
  ``block_k`` 128, up to 4 pipeline steps in flight, as many as fit in
  shared memory beside the output tile (``out_itemsize`` bytes per element)
  with each step holding both operand tiles and ``step_bytes(bm, bn, bk)``
  bytes more (the kernel's scales). Shapes that don't divide the tiles are
  zero-padded by the caller.
  """
  bm = (min(max_block_m, 64 if m <= 64 else 128) if block_m is None else
        _check_choice_int(block_m, "block_m", fn, _BLOCK_M,
                          "wgmma row groups of 64"))
  allowed_n = [1 << i for i in range(4, 9)]
  bn = (min(max_block_n, shared.pow2_at_least(n, 16)) if block_n is None else
        _check_choice_int(block_n, "block_n", fn, allowed_n,
                          "a power of two a wgmma takes"))
  allowed_k = [v for v in _BLOCK_K if v % k_multiple == 0]
  bk = (max(allowed_k) if block_k is None else
        _check_choice_int(block_k, "block_k", fn, allowed_k,
                          f"a shared-memory swizzle and a multiple of "
                          f"{k_multiple}"))
  per_step = (bm + bn) * bk + (step_bytes(bm, bn, bk) if step_bytes else 0)
  fixed = bm * bn * out_itemsize
  fit = (SMEM_BYTES - fixed) // per_step
  steps = (min(4, fit) if max_concurrent_steps is None
           else max_concurrent_steps)
  if (not isinstance(steps, (int, np.integer)) or isinstance(steps, bool)
      or steps < 1):
    raise ValueError(f"`max_concurrent_steps` argument to `{fn}` must be a "
                     f"positive integer, got {max_concurrent_steps!r}")
  if fixed + steps * per_step > SMEM_BYTES:
    raise ValueError(
        f"tiles ({bm}, {bn}, {bk}) with {steps} steps in flight need "
        f"{fixed + steps * per_step} bytes of shared memory in `{fn}`, more "
        f"than a Hopper block has ({SMEM_BYTES}); use smaller tiles or fewer "
        "`max_concurrent_steps`")
  del k
  return Tiles(bm, bn, bk, int(steps))


def grid(m: int, n: int, tiles: Tiles) -> tuple[int, int]:
  """(row tiles, column tiles) of padded (m, n)."""
  return m // tiles.block_m, n // tiles.block_n


def tile_of_program(grid_m: int, grid_n: int):
  """(row tile, column tile) of this program: grouped by 8 row tiles, so
  neighbouring programs share operand tiles in L2 (as the Triton kernels)."""
  pid = lax.axis_index("tiles")
  return shared.tile_of_program(pid, grid_m, grid_n, 8)


def _transforms(width: int, itemsize: int):
  """Tiling and swizzle of a shared tile whose rows hold ``width`` elements
  of ``itemsize`` bytes: 8-row tiles, swizzled over the widest span (32,
  64 or 128 bytes) a row fills, the layout wgmma and TMA read fastest."""
  swizzle = plgpu.find_swizzle(width * itemsize * 8)
  return (plgpu.TilingTransform((8, swizzle // itemsize)),
          plgpu.SwizzleTransform(swizzle))


def operand_spec(rows: int, block_k: int, index_map: Callable, *,
                 delay_release: int = 0):
  """The shared-memory block of one fp8 operand: (rows, block_k), tiled
  and swizzled as wgmma reads it (a row of K is ``block_k`` bytes).
  ``delay_release``: steps the pipeline keeps the slot after the body
  returns (1 where a wgmma reading it may still be in flight)."""
  return plgpu.BlockSpec((rows, block_k), index_map,
                         transforms=_transforms(block_k, 1),
                         delay_release=delay_release)


def concurrent_steps(tiles: Tiles, k_steps: int) -> int:
  """Pipeline steps in flight: the tiles' choice, at most the K steps."""
  return min(tiles.max_concurrent_steps, k_steps)


def factor_spec(per_step: int, size: int):
  """The shared block of a K step's float32 factors: ``per_step`` K blocks
  of ``size`` rows or columns (a (K blocks, rows) array, read by step)."""
  return plgpu.BlockSpec((per_step, size), lambda k: (k, 0))


def rows_of(ref, start, size: int):
  """``ref[start:start + size]`` along the first axis, as a ref view."""
  return ref.at[pl.ds(start, size)]


def columns_of(ref, start, size: int):
  """``ref[:, start:start + size]``, as a ref view."""
  return ref.at[:, pl.ds(start, size)]


def pipeline(body: Callable, operands: Sequence[Any], specs: Sequence[Any],
             *, k_steps: int, tiles: Tiles, init_carry: Any = None):
  """Runs ``body(step, *smem_refs[, carry])`` over the K steps, the TMA
  copies of ``operands`` (global refs) into ``specs``' shared blocks
  running ``max_concurrent_steps`` ahead; returns the last carry."""
  kwargs = {} if init_carry is None else {"init_carry": init_carry}
  return plgpu.emit_pipeline(
      body, grid=(k_steps,), in_specs=list(specs),
      max_concurrent_steps=concurrent_steps(tiles, k_steps),
      **kwargs)(*operands)


def mma(acc_ref, a_smem, b_smem) -> None:
  """``acc_ref += a_smem @ b_smem.T`` on the tensor cores (asynchronous)."""
  plgpu.wgmma(acc_ref, a_smem, compat.mosaic_gpu_transposed(b_smem))


def store(value, o_smem, o_gmem, tile_m, tile_n, tiles: Tiles) -> None:
  """Rounds the float32 tile ``value`` once to the output dtype and copies
  it to its place in ``o_gmem`` (through ``o_smem``)."""
  bm, bn = tiles.block_m, tiles.block_n
  o_smem[...] = value.astype(o_smem.dtype)
  plgpu.commit_smem()
  plgpu.copy_smem_to_gmem(
      o_smem, o_gmem.at[pl.ds(tile_m * bm, bm), pl.ds(tile_n * bn, bn)])
  plgpu.wait_smem_to_gmem(0)


def out_scratch(tiles: Tiles, out_dtype: Any):
  """The shared-memory staging tile of the output, swizzled for TMA."""
  transforms = _transforms(tiles.block_n, np.dtype(out_dtype).itemsize)
  return plgpu.SMEM((tiles.block_m, tiles.block_n), out_dtype,
                    transforms=transforms)


def launch(kernel: Callable, *, out_shape, scratch, num_programs: int,
           mode: str, name: str) -> Callable:
  """The ``plgpu.kernel`` of ``kernel`` on a 1-D grid named ``"tiles"``,
  compiled or in the interpreter as ``mode`` says."""
  interpret = (compat.mosaic_gpu_interpret_params() if mode == "interpret"
               else None)
  return compat.mosaic_gpu_kernel(
      kernel, out_shape=out_shape, scratch=scratch, grid=(num_programs,),
      grid_names=("tiles",), interpret=interpret, name=name)


def accumulator(tiles: Tiles):
  """A float32 wgmma accumulator of one output tile (zero when allocated)."""
  return plgpu.ACC((tiles.block_m, tiles.block_n), jnp.float32)


def run_scoped(fn: Callable, *allocations):
  return pl.run_scoped(fn, *allocations)


def wait(pending: int) -> None:
  """Waits until at most ``pending`` wgmma groups are in flight."""
  plgpu.wgmma_wait(pending)


def load_vector(ref, axis: int):
  """A row (``axis=0``: per output row) or column (``axis=1``) vector of
  float32 factors, in the layout that broadcasts against the accumulator."""
  return compat.mosaic_gpu_load(ref, plgpu.Layout.WGMMA.reduce(1 - axis))


def zeros_like_acc(tiles: Tiles):
  return plgpu.layout_cast(
      jnp.full((tiles.block_m, tiles.block_n), 0, jnp.float32),
      plgpu.Layout.WGMMA)


