"""fp8 blockwise matmul on Mosaic GPU: DeepSeek-V3's and Transformer Engine's
``Float8BlockScaling`` GEMM, ``(a * a_scales) @ (b * b_scales).T``.

``a`` (M, K) and ``b`` (N, K) are fp8 codes and K-major, each with float32
*decode* scales (value = code * scale) of 128-long blocks along K: a
``(1, 128)`` operand (activations, gradients) has a scale per row and K
block, shape (M, ceil(K / 128)); a ``(128, 128)`` operand (weights) a scale
per square tile, shape (ceil(N / 128), ceil(K / 128)). That is what
:func:`jaxfp8._src.mx.blockwise.quantize` gives, and what the
``"fp8_blockwise"`` recipe's GEMMs multiply.

The block-scaled kernel (:mod:`jaxfp8._src.kernels.block_scaled_mosaic_gpu`)
keeps the operands fp8 into the tensor cores and multiplies each 128-long K
block's float32 partial sum by ``a_scale[i] * b_scale[j]`` in registers, as
DeepSeek-V3's GEMM promotes (a tile scale is the column factor of every
column in the tile). The jnp reference does the same sums in float32 at
HIGHEST precision.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from jaxfp8._src.kernels import block_scaled_mosaic_gpu as block_scaled
from jaxfp8._src.kernels import mosaic_gpu_common as common
from jaxfp8._src.kernels.blockwise_matmul import reference as reference_lib



@functools.partial(jax.jit, static_argnames=("out_dtype", "mode", "tiles",
                                             "a_block", "b_block"))
def _blockwise_matmul(a, a_scales, b, b_scales, *, out_dtype, mode: str,
                      tiles: common.Tiles, a_block, b_block):
  if mode == "reference":
    return reference_lib.reference(a, a_scales, b, b_scales, out_dtype=out_dtype,
                      a_block=a_block, b_block=b_block)
  return block_scaled.gemm(
      a, b, reference_lib.per_row(a_scales, a.shape[0], a_block),
      reference_lib.per_row(b_scales, b.shape[0], b_block), jnp.ones((2,), jnp.float32),
      out_dtype=out_dtype, mode=mode, tiles=tiles, scale_block=reference_lib.BLOCK_K)


def blockwise_matmul(a: jax.Array, a_scales: jax.Array, b: jax.Array,
                     b_scales: jax.Array, *,
                     a_block: tuple[int, int] = (1, 128),
                     b_block: tuple[int, int] = (128, 128),
                     out_dtype: Any = jnp.bfloat16,
                     interpret: bool | None = None,
                     block_m: int | None = None, block_n: int | None = None,
                     max_concurrent_steps: int | None = None) -> jax.Array:
  """fp8 blockwise matmul on Mosaic GPU: ``(a * a_scales) @ (b * b_scales).T``.

  The GEMM of DeepSeek-V3's fp8 training and Transformer Engine's
  ``Float8BlockScaling`` (jaxfp8's ``"fp8_blockwise"`` recipe): fp8
  operands with float32 scales of 1x128 or 128x128 blocks, 128 along K. On
  Hopper the fp8 tiles go into ``wgmma`` as they are and each K block's
  float32 partial sum is scaled in registers.

  Args:
    a: (M, K) float8_e4m3fn or float8_e5m2 codes (K-major).
    a_scales: float32 decode scales of ``a``'s blocks: (M, ceil(K / 128))
      for ``a_block=(1, 128)``, (ceil(M / 128), ceil(K / 128)) for
      ``(128, 128)``.
    b: (N, K) fp8 codes (K-major: the transposed right operand).
    b_scales: float32 decode scales of ``b``'s blocks, as for ``a``.
    a_block: ``(1, 128)`` (default) or ``(128, 128)``.
    b_block: ``(128, 128)`` (default) or ``(1, 128)``.
    out_dtype: bfloat16 (default), float16 or float32.
    interpret: None (default): compiled on a GPU of compute capability
      9.x, the jnp reference elsewhere. True: the kernel in Pallas'
      Mosaic GPU interpreter (CPU; JAX >= 0.11). False: compiled.
    block_m: rows of an output tile, 64 or 128 (default 64).
    block_n: columns of an output tile, a power of two in [16, 256].
    max_concurrent_steps: K steps whose copies are in flight.

  Returns:
    The (M, N) product in ``out_dtype``.

  Raises:
    TypeError: an operand is not an fp8 array, or scales not float32.
    ValueError: shapes don't match, a block is not one of the two, or a
      tile the kernel doesn't take.
    NotImplementedError: an fp8 format tensor cores can't take, an
      unsupported ``out_dtype``, ``interpret=False`` without a Hopper-class
      GPU, or ``interpret=True`` on a JAX without the interpreter.

  >>> import jax.numpy as jnp, jaxfp8
  >>> a = jnp.ones((2, 256), jnp.float8_e4m3fn)
  >>> sa = jnp.array([[1.0, 2.0], [0.5, 0.5]], jnp.float32)
  >>> b = jnp.ones((1, 256), jnp.float8_e4m3fn)
  >>> sb = jnp.array([[4.0, 1.0]], jnp.float32)
  >>> jaxfp8.ops.blockwise_matmul(a, sa, b, sb, out_dtype=jnp.float32)
  Array([[768.],
         [320.]], dtype=float32)
  """
  fn = "blockwise_matmul"
  mode = common.resolve_mode(interpret, fn)

  def run(a, a_scales, b, b_scales, *, out_dtype, a_block, b_block):
    if mode != "reference":
      common.check_pair_dtypes(a.dtype, b.dtype, fn)
    tiles = common.choose_tiles(
        a.shape[0], b.shape[0], a.shape[1], fn=fn, max_block_m=64,
        block_m=block_m, block_n=block_n, block_k=reference_lib.BLOCK_K,
        max_concurrent_steps=max_concurrent_steps, k_multiple=reference_lib.BLOCK_K,
        out_itemsize=out_dtype.itemsize,
        step_bytes=block_scaled.step_bytes(reference_lib.BLOCK_K))
    return _blockwise_matmul(a, a_scales, b, b_scales, out_dtype=out_dtype,
                             mode=mode, tiles=tiles, a_block=a_block,
                             b_block=b_block)

  return reference_lib.checked(a, a_scales, b, b_scales, a_block, b_block, out_dtype, fn,
                  run)
