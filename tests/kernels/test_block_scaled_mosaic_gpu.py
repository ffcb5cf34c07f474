"""The Mosaic GPU block-scaled kernel both block-scaled ops run
(``kernels/block_scaled_mosaic_gpu.py``) lowers for CUDA without a GPU.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest

from jaxfp8._src.kernels import mosaic_gpu_common
from jaxfp8._src.kernels import block_scaled_mosaic_gpu as block_scaled
from kernel_reference import E4M3
from kernel_reference import LOWER_SHAPES
from kernel_reference import OUTS
from kernel_reference import lowered_mosaic_gpu as _lowered

S = jax.ShapeDtypeStruct


@pytest.mark.parametrize("out_dtype", OUTS, ids=lambda d: d.name)
@pytest.mark.parametrize("m,n,k", LOWER_SHAPES)
@pytest.mark.parametrize("scale_block", block_scaled.SCALE_BLOCKS)
def test_block_scaled_kernel_lowers(scale_block, m, n, k, out_dtype):
  # One kernel for MXFP8 (blocks of 32) and fp8 blockwise (128).
  tiles = mosaic_gpu_common.choose_tiles(
      m, n, k, fn="t", max_block_m=64, k_multiple=scale_block,
      out_itemsize=out_dtype.itemsize,
      step_bytes=block_scaled.step_bytes(scale_block))
  kb = -(-k // scale_block)
  f = functools.partial(block_scaled.gemm, out_dtype=out_dtype,
                        mode="compiled", tiles=tiles, scale_block=scale_block)
  text = _lowered(f, S((m, kb * scale_block), E4M3),
                  S((n, kb * scale_block), E4M3), S((m, kb), jnp.float32),
                  S((n, kb), jnp.float32), S((2,), jnp.float32))
  assert text.count("custom_call @mosaic_gpu") == 1
