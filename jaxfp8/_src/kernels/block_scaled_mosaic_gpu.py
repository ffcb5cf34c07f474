"""The block-scaled fp8 GEMM kernel on Mosaic GPU, shared by MXFP8 and fp8
blockwise.

``out = post0 * post1 * sum_kb (a_kb @ b_kb.T) * (row[kb][:, None] *
col[kb][None, :])``: ``a`` (M, K) and ``b`` (N, K) are fp8 and K-major, cut
along K into blocks of ``scale_block`` elements (32 for MX, 128 for
DeepSeek-V3 / Transformer Engine blockwise); block ``kb`` of row ``i`` of
``a`` carries the float32 factor ``row[kb, i]``, block ``kb`` of column ``j``
of ``b`` the factor ``col[kb, j]``.

The operands stay fp8 all the way into the tensor cores: per K block,
``wgmma`` multiplies the two fp8 shared-memory tiles into a fresh float32
partial sum, which is multiplied in registers by the outer product of the
block's row and column factors and added to the float32 accumulator (the
promotion DeepSeek-V3 describes, section 3.3.2), so the accumulator never
sums fp8 products over more than one block. Hopper has no block-scaled MMA;
this is how one runs there at fp8 rate.

A K step of ``block_k`` holds ``block_k / scale_block`` blocks. Shared
memory tiles can't be sliced inside their swizzle, so each block of each
operand is its own pipelined tile (swizzled over ``scale_block`` bytes).
The accumulator and the partial sum both live in registers: tiles default to
64 x 128.
"""
from __future__ import annotations

import functools

import jax
from jax import lax
import jax.numpy as jnp

from jaxfp8._src.kernels import common as shared
from jaxfp8._src.kernels import mosaic_gpu_common as common

# Scale blocks the kernel takes: a divisor of the 128-element K step that
# one fp8 wgmma (K = 32) can cover.
SCALE_BLOCKS: tuple[int, ...] = (32, 64, 128)


def _kernel(a_gmem, b_gmem, row_gmem, col_gmem, post_gmem, o_gmem, o_smem, *,
            tiles: common.Tiles, grid_m: int, grid_n: int, scale_block: int):
  """One output tile: per K block, an fp8 partial sum times its factors."""
  tm, tn = common.tile_of_program(grid_m, grid_n)
  bm, bn, bk = tiles.block_m, tiles.block_n, tiles.block_k
  per = bk // scale_block
  k_steps = a_gmem.shape[1] // bk

  def step(_, *refs):
    *refs, acc = refs
    a_refs, b_refs = refs[:per], refs[per:2 * per]
    row_smem, col_smem = refs[2 * per:]
    for j in range(per):
      def partial(p_ref, j=j):
        common.mma(p_ref, a_refs[j], b_refs[j])
        common.wait(0)
        return p_ref[...]
      part = common.run_scoped(partial, common.accumulator(tiles))
      row = common.load_vector(row_smem.at[j], axis=0)
      col = common.load_vector(col_smem.at[j], axis=1)
      factor = (lax.broadcast_in_dim(row, part.shape, (0,))
                * lax.broadcast_in_dim(col, part.shape, (1,)))
      acc = acc + part * factor
    return acc

  def block_spec(rows, j):
    return common.operand_spec(rows, scale_block,
                               lambda k, j=j: (0, k * per + j))

  a_rows = common.rows_of(a_gmem, tm * bm, bm)
  b_rows = common.rows_of(b_gmem, tn * bn, bn)
  acc = common.pipeline(
      step,
      [a_rows] * per + [b_rows] * per + [
          common.columns_of(row_gmem, tm * bm, bm),
          common.columns_of(col_gmem, tn * bn, bn)],
      [block_spec(bm, j) for j in range(per)]
      + [block_spec(bn, j) for j in range(per)]
      + [common.factor_spec(per, bm), common.factor_spec(per, bn)],
      k_steps=k_steps, tiles=tiles, init_carry=common.zeros_like_acc(tiles))
  common.store(acc * post_gmem[0] * post_gmem[1], o_smem, o_gmem, tm, tn,
               tiles)


def step_bytes(scale_block: int):
  """Shared bytes a K step holds beyond the operand tiles: its factors."""
  def of(bm: int, bn: int, bk: int) -> int:
    return (bm + bn) * (bk // scale_block) * 4
  return of


@functools.partial(jax.jit, static_argnames=("out_dtype", "mode", "tiles",
                                             "scale_block"))
def gemm(a, b, row, col, post, *, out_dtype, mode: str, tiles: common.Tiles,
         scale_block: int) -> jax.Array:
  """The kernel on unpadded operands: ``a`` (M, K), ``b`` (N, K) fp8,
  ``row`` (M, K blocks), ``col`` (N, K blocks) float32 factors, ``post``
  float32[2]; ``mode`` "compiled" or "interpret". Returns (M, N).

  Padding: zeros in the operands (a padded block adds 0), ones in the
  factors (finite, so ``0 * factor`` stays 0).
  """
  m, n = a.shape[0], b.shape[0]
  bm, bn, bk = tiles.block_m, tiles.block_n, tiles.block_k
  a = shared.pad_to(a, (bm, bk))
  b = shared.pad_to(b, (bn, bk))
  kb = a.shape[1] // scale_block
  row = shared.pad_to(row, (bm, kb), 1).T[:kb]
  col = shared.pad_to(col, (bn, kb), 1).T[:kb]
  grid_m, grid_n = common.grid(a.shape[0], b.shape[0], tiles)
  out = common.launch(
      functools.partial(_kernel, tiles=tiles, grid_m=grid_m, grid_n=grid_n,
                        scale_block=scale_block),
      out_shape=jax.ShapeDtypeStruct((a.shape[0], b.shape[0]), out_dtype),
      scratch=[common.out_scratch(tiles, out_dtype)],
      num_programs=grid_m * grid_n, mode=mode, name="block_scaled_mgpu",
  )(a, b, row, col, post.astype(jnp.float32))
  return out[:m, :n]
