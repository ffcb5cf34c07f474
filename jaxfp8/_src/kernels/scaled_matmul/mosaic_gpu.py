"""Per-tensor scaled fp8 matmul on Mosaic GPU: ``(a * a_scale) @ (b * b_scale).T``.

``a`` (M, K) and ``b`` (N, K) are fp8 (e4m3 or e5m2, mixed allowed: Hopper's
``wgmma`` takes the pair) and K-major. Each program owns one output tile:
the pipeline (:func:`jaxfp8._src.kernels.mosaic_gpu_common.pipeline`) streams the
operand tiles into shared memory, ``wgmma`` accumulates their products in a
float32 accumulator over all of K, and both scales multiply the float32 sum
(as :func:`jaxfp8._src.kernels.common.apply_scales` splits them, so their
product can't overflow or underflow where the result doesn't) before the one
rounding to ``out_dtype``. Shapes that don't divide the tiles are zero-padded.

The op and its reference are those of the Triton kernel
(:func:`jaxfp8.ops.scaled_matmul`, :func:`jaxfp8.ops.scaled_matmul_reference`).
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from jaxfp8._src.kernels import common as shared
from jaxfp8._src.kernels import mosaic_gpu_common as common
from jaxfp8._src.kernels.scaled_matmul import reference



def _kernel(a_gmem, b_gmem, post_gmem, o_gmem, o_smem, *, tiles: common.Tiles,
            grid_m: int, grid_n: int):
  """One output tile: fp8 wgmma over all of K, then the two scale factors."""
  tm, tn = common.tile_of_program(grid_m, grid_n)
  bm, bn, bk = tiles.block_m, tiles.block_n, tiles.block_k
  k_steps = a_gmem.shape[1] // bk

  # With two or more steps in flight, one wgmma stays in flight while the
  # next tiles land; its slot is released a step late (delay_release).
  lag = 1 if common.concurrent_steps(tiles, k_steps) > 1 else 0

  def scoped(acc_ref):
    def step(_, a_smem, b_smem):
      common.mma(acc_ref, a_smem, b_smem)
      common.wait(lag)

    common.pipeline(
        step, [common.rows_of(a_gmem, tm * bm, bm),
               common.rows_of(b_gmem, tn * bn, bn)],
        [common.operand_spec(bm, bk, lambda k: (0, k), delay_release=lag),
         common.operand_spec(bn, bk, lambda k: (0, k), delay_release=lag)],
        k_steps=k_steps, tiles=tiles)
    common.wait(0)
    out = acc_ref[...] * post_gmem[0] * post_gmem[1]
    common.store(out, o_smem, o_gmem, tm, tn, tiles)

  common.run_scoped(scoped, common.accumulator(tiles))


def _post_factors(a_scale, b_scale) -> jax.Array:
  """float32[2]: the factors :func:`scale_factors` orders, for the kernel."""
  return jnp.stack(shared.scale_factors(a_scale, b_scale))


@functools.partial(jax.jit, static_argnames=("out_dtype", "mode", "tiles"))
def _scaled_matmul(a, b, a_scale, b_scale, *, out_dtype, mode: str,
                   tiles: common.Tiles):
  if mode == "reference":
    return reference.scaled_matmul_reference(a, b, a_scale, b_scale, out_dtype=out_dtype)
  m, n = a.shape[0], b.shape[0]
  bm, bn, bk = tiles.block_m, tiles.block_n, tiles.block_k
  a = shared.pad_to(a, (bm, bk))
  b = shared.pad_to(b, (bn, bk))
  grid_m, grid_n = common.grid(a.shape[0], b.shape[0], tiles)
  out = common.launch(
      functools.partial(_kernel, tiles=tiles, grid_m=grid_m, grid_n=grid_n),
      out_shape=jax.ShapeDtypeStruct((a.shape[0], b.shape[0]), out_dtype),
      scratch=[common.out_scratch(tiles, out_dtype)],
      num_programs=grid_m * grid_n, mode=mode, name="scaled_matmul_mgpu",
  )(a, b, _post_factors(a_scale, b_scale))
  return out[:m, :n]


def scaled_matmul_mgpu(a: jax.Array, b: jax.Array, a_scale: Any,
                       b_scale: Any, *, out_dtype: Any = jnp.bfloat16,
                       interpret: bool | None = None,
                       block_m: int | None = None, block_n: int | None = None,
                       block_k: int | None = None,
                       max_concurrent_steps: int | None = None) -> jax.Array:
  """fp8 matmul with per-tensor scales, on Mosaic GPU (Hopper ``wgmma``).

  ``(a * a_scale) @ (b * b_scale).T``: the fp8 tiles go from global to
  shared memory by TMA and into the tensor cores as they are; the float32
  sum is multiplied by both scales and rounded once to ``out_dtype``. The
  same op as :func:`jaxfp8.ops.scaled_matmul` (Pallas' Triton backend,
  deprecated by JAX), on the backend JAX keeps.

  Args:
    a: (M, K) float8_e4m3fn or float8_e5m2 array (K-major).
    b: (N, K) float8_e4m3fn or float8_e5m2 array (K-major: the transposed
      right operand). Mixed formats are multiplied as they are.
    a_scale: float32 scale of ``a``: a scalar or a one-element array.
    b_scale: float32 scale of ``b``.
    out_dtype: bfloat16 (default), float16 or float32.
    interpret: None (default): compiled on a GPU of compute capability
      9.x, the jnp reference elsewhere. True: the kernel in Pallas'
      Mosaic GPU interpreter (CPU; JAX >= 0.11). False: compiled.
    block_m: rows of an output tile, 64 or 128 (default by shape).
    block_n: columns of an output tile, a power of two in [16, 256].
    block_k: K step, 32, 64 or 128 (default 128).
    max_concurrent_steps: K steps whose copies are in flight (default 4).

  Returns:
    The (M, N) product in ``out_dtype``.

  Raises:
    TypeError: an operand is not an fp8 array, or a scale is not real.
    ValueError: shapes don't match, or a tile is not one the kernel takes.
    NotImplementedError: an fp8 format tensor cores can't take, an
      unsupported ``out_dtype``, ``interpret=False`` without a Hopper-class
      GPU, or ``interpret=True`` on a JAX without the interpreter.

  >>> import jax.numpy as jnp, jaxfp8
  >>> a = jnp.full((4, 64), 2, jnp.float8_e4m3fn)
  >>> b = jnp.full((3, 64), 0.5, jnp.float8_e5m2)
  >>> jaxfp8.ops.scaled_matmul_mgpu(a, b, 1.0, 0.25)  # reference on CPU
  Array([[16, 16, 16],
         [16, 16, 16],
         [16, 16, 16],
         [16, 16, 16]], dtype=bfloat16)
  """
  fn = "scaled_matmul_mgpu"
  a, b = shared.check_fp8_pair(a, b, fn)
  a_scale = shared.check_scale(a_scale, "a_scale", fn)
  b_scale = shared.check_scale(b_scale, "b_scale", fn)
  out_dtype = shared.check_out_dtype(out_dtype, fn)
  mode = common.resolve_mode(interpret, fn)
  if mode != "reference":
    common.check_pair_dtypes(a.dtype, b.dtype, fn)
  (m, k), n = a.shape, b.shape[0]
  tiles = common.choose_tiles(
      m, n, k, fn=fn, block_m=block_m, block_n=block_n,
      block_k=block_k, max_concurrent_steps=max_concurrent_steps,
      out_itemsize=out_dtype.itemsize)
  if m == 0 or n == 0 or k == 0:
    return jnp.zeros((m, n), out_dtype)
  return _scaled_matmul(a, b, a_scale, b_scale, out_dtype=out_dtype,
                        mode=mode, tiles=tiles)
