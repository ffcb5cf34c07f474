"""The Mosaic GPU block-scaled kernel both block-scaled ops run
(``kernels/block_scaled_mosaic_gpu.py``) lowers for CUDA without a GPU.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8._src.kernels import mosaic_gpu_common
from jaxfp8._src.kernels import block_scaled_mosaic_gpu as block_scaled
import kernel_reference

E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2
PAIRS = [(E4M3, E4M3), (E5M2, E5M2), (E4M3, E5M2)]
PAIR_IDS = ["e4m3", "e5m2", "mixed"]
F32, BF16 = np.dtype(jnp.float32), np.dtype(jnp.bfloat16)
# (M, N, K, tiles): odd shapes over several ragged tiles, and one tile.
SHAPES = [(37, 45, 200, dict(block_n=32)), (130, 70, 300, {}),
          (8, 16, 64, {})]
SHAPE_IDS = ["odd", "ragged-2x1", "one-tile"]
S = jax.ShapeDtypeStruct
LOWER_SHAPES = [(4096, 4096, 4096), (100, 300, 700)]
OUTS = [np.dtype(jnp.bfloat16), np.dtype(jnp.float32)]
_lowered = kernel_reference.lowered_mosaic_gpu


def _mixed_ok(pair) -> None:
  if not mosaic_gpu_common.takes_pair(*pair):
    pytest.skip(f"this JAX's Mosaic GPU wgmma takes no mixed fp8 pair "
                f"({jax.__version__})")


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
