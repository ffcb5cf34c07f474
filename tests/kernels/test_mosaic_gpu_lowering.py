"""The Mosaic GPU kernels lower for CUDA, checked without a GPU.

``jit(...).trace(...).lower(lowering_platforms=("cuda",))`` runs Pallas'
Mosaic GPU lowering (kernel body to Mosaic GPU MLIR, shared-memory budget,
swizzle and tiling checks) on any machine, inside
``compat.gpu_lowering_target()``. Errors of the compiled path that the
interpreter can't see (a tile too big for shared memory, a layout wgmma or
TMA doesn't take) show up here; the rest is benchmarks/gpu_check.sh's.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8._src import compat
from jaxfp8._src.kernels import block_scaled
from jaxfp8._src.kernels.blockwise_matmul import mosaic_gpu as blockwise_matmul
from jaxfp8._src.kernels.mx_matmul import mosaic_gpu as mx_matmul
from jaxfp8._src.kernels import mosaic_common as common
from jaxfp8._src.kernels.scaled_matmul import mosaic_gpu as scaled_matmul

S = jax.ShapeDtypeStruct
E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2
SHAPES = [(4096, 4096, 4096), (100, 300, 700)]
OUTS = [np.dtype(jnp.bfloat16), np.dtype(jnp.float32)]


def _lowered(f, *args) -> str:
  with compat.gpu_lowering_target():
    return jax.jit(f).trace(*args).lower(
        lowering_platforms=("cuda",)).as_text()


@pytest.mark.parametrize("out_dtype", OUTS, ids=lambda d: d.name)
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("pair", [(E4M3, E4M3), (E5M2, E5M2), (E4M3, E5M2)],
                         ids=["e4m3", "e5m2", "mixed"])
def test_scaled_matmul_lowers(pair, m, n, k, out_dtype):
  if not common.takes_pair(*pair):
    pytest.skip("this JAX's wgmma takes no mixed fp8 pair")
  tiles = common.choose_tiles(m, n, k, fn="t", out_itemsize=out_dtype.itemsize)
  f = functools.partial(scaled_matmul._scaled_matmul, out_dtype=out_dtype,
                        mode="compiled", tiles=tiles)
  text = _lowered(f, S((m, k), pair[0]), S((n, k), pair[1]),
                  S((), jnp.float32), S((), jnp.float32))
  assert text.count("custom_call @mosaic_gpu") == 1


@pytest.mark.parametrize("out_dtype", OUTS, ids=lambda d: d.name)
@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("scale_block", block_scaled.SCALE_BLOCKS)
def test_block_scaled_kernel_lowers(scale_block, m, n, k, out_dtype):
  # One kernel for MXFP8 (blocks of 32) and fp8 blockwise (128).
  tiles = common.choose_tiles(
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


def test_mx_and_blockwise_wrappers_lower():
  # The MX wrapper's plan and exact fallback (a cond), the blockwise one's
  # scale expansion: one kernel call each.
  m, n, k = 300, 200, 512
  tiles = common.choose_tiles(m, n, k, fn="t", max_block_m=64, k_multiple=32,
                              step_bytes=block_scaled.step_bytes(32))
  f = functools.partial(mx_matmul._mx_matmul, out_dtype=OUTS[0],
                        mode="compiled", tiles=tiles, block_size=32)
  text = _lowered(f, S((m, k), E4M3), S((m, k // 32), jnp.uint8),
                  S((n, k), E4M3), S((n, k // 32), jnp.uint8))
  assert text.count("custom_call @mosaic_gpu") == 1
  tiles = common.choose_tiles(m, n, k, fn="t", max_block_m=64, k_multiple=128,
                              step_bytes=block_scaled.step_bytes(128))
  f = functools.partial(blockwise_matmul._blockwise_matmul,
                        out_dtype=OUTS[0], mode="compiled", tiles=tiles,
                        a_block=(1, 128), b_block=(128, 128))
  text = _lowered(f, S((m, k), E4M3), S((m, 4), jnp.float32),
                  S((n, k), E4M3), S((2, 4), jnp.float32))
  assert text.count("custom_call @mosaic_gpu") == 1
