"""Per-tensor scaled fp8 matmul: ``(a * a_scale) @ (b * b_scale).T``.

``a`` (M, K) and ``b`` (N, K) are fp8 and K-major, the layout fp8 tensor
cores read. Each program of a 1-D grid owns one (block_m, block_n) output tile:
it walks K in ``block_k`` steps, multiplies the fp8 tiles with float32
accumulation, and applies both scales once, to the float32 sum, before the
single rounding to ``out_dtype``. Shapes that don't divide the tiles are
zero-padded (zeros along K add nothing; padded rows and columns are cut off).
"""
from __future__ import annotations

import functools
from typing import Any

import jax
from jax import lax
from jax.experimental import pallas as pl
import jax.numpy as jnp

from jaxfp8._src.kernels import common
from jaxfp8._src.kernels import triton_common
from jaxfp8._src.kernels.scaled_matmul import reference



# Largest default tiles: 128 x 256 x 128 fp8 keeps three pipeline stages in
# Hopper's shared memory and the float32 accumulator in 8 warps' registers.
_CAPS = (128, 256, 128)


def _kernel(a_ref, b_ref, a_scale_ref, b_scale_ref, o_ref, *, block_k: int,
            upcast: bool):
  """One output tile: sum over K tiles of fp8 products, then both scales."""
  def body(k, acc):
    a = a_ref[:, pl.ds(k * block_k, block_k)]
    b = b_ref[:, pl.ds(k * block_k, block_k)]
    if upcast:
      # Mixed formats (Triton's dot wants one element type) or HIGHEST
      # precision: bfloat16 holds every e4m3 and e5m2 value exactly.
      a, b = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
    return acc + lax.dot_general(a, b, common.CONTRACT_K,
                                 preferred_element_type=jnp.float32)

  num_k = a_ref.shape[1] // block_k
  acc = lax.fori_loop(0, num_k, body, jnp.zeros(o_ref.shape, jnp.float32))
  o_ref[...] = common.apply_scales(acc, a_scale_ref[0],
                                  b_scale_ref[0]).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("out_dtype", "mode", "tiles",
                                             "widen"))
def _scaled_matmul(a, b, a_scale, b_scale, *, out_dtype, mode: str,
                   tiles: triton_common.Tiles, widen: bool = False):
  if mode == "reference":
    return reference.scaled_matmul_reference(a, b, a_scale, b_scale, out_dtype=out_dtype)
  m, n = a.shape[0], b.shape[0]
  bm, bn, bk = tiles.block_m, tiles.block_n, tiles.block_k
  a = common.pad_to(a, (bm, bk))
  b = common.pad_to(b, (bn, bk))
  (mp, kp), np_ = a.shape, b.shape[0]
  grid_m, grid_n = mp // bm, np_ // bn
  tile = functools.partial(common.tile_of_program, grid_m=grid_m,
                           grid_n=grid_n, group_m=tiles.group_m)
  out = pl.pallas_call(
      functools.partial(_kernel, block_k=bk,
                        upcast=widen or a.dtype != b.dtype),
      out_shape=jax.ShapeDtypeStruct((mp, np_), out_dtype),
      grid=(grid_m * grid_n,),
      in_specs=[
          pl.BlockSpec((bm, kp), lambda p: (tile(p)[0], 0)),
          pl.BlockSpec((bn, kp), lambda p: (tile(p)[1], 0)),
          pl.BlockSpec((1,), lambda p: (0,)),
          pl.BlockSpec((1,), lambda p: (0,)),
      ],
      out_specs=pl.BlockSpec((bm, bn), lambda p: tile(p)),
      interpret=mode == "interpret",
      compiler_params=triton_common.compiler_params(mode, tiles),
      name="scaled_matmul",
  )(a, b, a_scale.reshape(1), b_scale.reshape(1))
  return out[:m, :n]


def scaled_matmul(a: jax.Array, b: jax.Array, a_scale: Any, b_scale: Any, *,
                  out_dtype: Any = jnp.bfloat16, interpret: bool | None = None,
                  precision: Any = None, block_m: int | None = None,
                  block_n: int | None = None, block_k: int | None = None,
                  num_warps: int | None = None,
                  num_stages: int | None = None) -> jax.Array:
  """fp8 matmul with per-tensor scales: ``(a * a_scale) @ (b * b_scale).T``.

  A Pallas kernel: fp8 tiles are multiplied with float32 accumulation, and the
  scales multiply the float32 sum before the one rounding to ``out_dtype``.

  Args:
    a: (M, K) float8_e4m3fn or float8_e5m2 array (K-major).
    b: (N, K) float8_e4m3fn or float8_e5m2 array (K-major, i.e. the
      transposed right operand, as fp8 tensor cores read it). Mixed formats
      are multiplied exactly in bfloat16.
    a_scale: float32 scale of ``a``: a scalar or a one-element array.
    b_scale: float32 scale of ``b``.
    out_dtype: bfloat16 (default), float16 or float32.
    interpret: None (default): the compiled kernel on a GPU, the jnp reference
      elsewhere. True: the kernel in Pallas' interpreter (any backend).
      False: the compiled kernel (GPU only).
    precision: None (default) multiplies the fp8 tiles with the fp8 MMA;
      ``jax.lax.Precision.HIGHEST`` widens them to bfloat16 in the kernel
      (exact) for the bfloat16 MMA's full float32 accumulation, at half the
      fp8 rate.
    block_m: rows of an output tile (power of two >= 16; default by shape).
    block_n: columns of an output tile (power of two >= 16).
    block_k: K step (power of two >= 32).
    num_warps: Triton warps per program (default 8 for large tiles, else 4).
    num_stages: Triton software-pipelining depth (default 3).

  Returns:
    The (M, N) product in ``out_dtype``.

  Raises:
    TypeError: an operand is not an fp8 array, or a scale is not real.
    ValueError: shapes don't match, or a tile is not a power of two.
    NotImplementedError: an fp8 format tensor cores can't take, an
      unsupported ``out_dtype``, or ``interpret=False`` without a GPU.

  >>> import jax.numpy as jnp, jaxfp8
  >>> a = jnp.full((4, 64), 2, jnp.float8_e4m3fn)
  >>> b = jnp.full((3, 64), 0.5, jnp.float8_e5m2)
  >>> jaxfp8.ops.scaled_matmul(a, b, 1.0, 0.25, interpret=True)
  Array([[16, 16, 16],
         [16, 16, 16],
         [16, 16, 16],
         [16, 16, 16]], dtype=bfloat16)
  """
  fn = "scaled_matmul"
  a, b = common.check_fp8_pair(a, b, fn)
  a_scale = common.check_scale(a_scale, "a_scale", fn)
  b_scale = common.check_scale(b_scale, "b_scale", fn)
  out_dtype = common.check_out_dtype(out_dtype, fn)
  widen = common.widen_to_bf16(precision, fn)
  mode = triton_common.resolve_mode(interpret, fn)
  (m, k), n = a.shape, b.shape[0]
  tiles = triton_common.choose_tiles(
      m, n, k, caps=_CAPS, fn=fn, block_m=block_m, block_n=block_n,
      block_k=block_k, num_warps=num_warps, num_stages=num_stages)
  if m == 0 or n == 0 or k == 0:
    return jnp.zeros((m, n), out_dtype)
  with triton_common.quiet_triton_deprecation(mode):
    return _scaled_matmul(a, b, a_scale, b_scale, out_dtype=out_dtype,
                          mode=mode, tiles=tiles, widen=widen)
