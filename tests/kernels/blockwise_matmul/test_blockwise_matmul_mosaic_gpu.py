"""The fp8 blockwise Mosaic GPU kernel (``blockwise_matmul/mosaic_gpu.py``),
compiled on Hopper and interpreted on CPU, and its CUDA lowering.

Written once, in the compiled class (``INTERPRET = False``: compiled by
Mosaic GPU, skipped without a Hopper GPU: compute capability 9.x), and run
again by its interpreted subclass (``INTERPRET = True``: Pallas' Mosaic GPU
interpreter on CPU, skipped where JAX has none, before 0.11). Every result
is checked against the float64 product of the dequantized operands
(:mod:`kernel_reference`): norm-wise relative error below 1e-6 for float32
outputs in the interpreter, which sums in float32. Compiled, Hopper's fp8
``wgmma`` accumulates with fewer bits than float32 (DeepSeek-V3, section
3.3.2), so that class allows 2^-10. Tests that run no kernel are
module-level functions; the lowering tests run Pallas' Mosaic GPU lowering
for CUDA on any machine (shared-memory budget, swizzles, layouts wgmma and
TMA take).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8 import ops
from jaxfp8._src.kernels import mosaic_gpu_common
from jaxfp8._src.kernels import block_scaled_mosaic_gpu as block_scaled
from jaxfp8._src.kernels.blockwise_matmul import mosaic_gpu as blockwise_mosaic_gpu
from jaxfp8._src.mx import blockwise
import kernel_reference
import kernel_reference as ref_lib
from kernel_reference import BF16
from kernel_reference import E4M3
from kernel_reference import F32
from kernel_reference import OUTS
from kernel_reference import SHAPE_IDS
from kernel_reference import SHAPES
from kernel_reference import lowered_mosaic_gpu as _lowered

S = jax.ShapeDtypeStruct


def _blockwise(rng, shape, block, fmt, scale="pow2", spread=6):
  x = rng.standard_normal(shape) * np.exp2(rng.integers(
      -spread, spread + 1, (shape[0], 1)))
  codes, scales = blockwise.quantize(jax.device_put(x.astype(np.float32)),
                                     block=block, fmt=fmt, scale=scale)
  values = ref_lib.f64(blockwise.dequantize(codes, scales, block=block))
  return codes, scales, values


# -- tests that run no kernel --------------------------------------------------

def test_blockwise_matmul_errors():
  a = jnp.ones((4, 256), E4M3)
  sa = jnp.ones((4, 2), jnp.float32)
  sb = jnp.ones((1, 2), jnp.float32)
  fn = "`blockwise_matmul`"
  with pytest.raises(ValueError, match=f"`a_scales` argument to {fn} must "
                     r"have shape \(4, 2\)"):
    ops.blockwise_matmul(a, sb, a, sb)
  with pytest.raises(TypeError, match="`b_scales`.*float32"):
    ops.blockwise_matmul(a, sa, a, sb.astype(jnp.bfloat16))
  with pytest.raises(ValueError, match=r"`b_block`.*got \(1, 64\)"):
    ops.blockwise_matmul(a, sa, a, sa, b_block=(1, 64))
  with pytest.raises(ValueError, match="same K"):
    ops.blockwise_matmul(a, sa, a[:, :128], sb[:, :1])
  with pytest.raises(NotImplementedError, match="float8_e4m3fnuz"):
    ops.blockwise_matmul(a.astype(jnp.float8_e4m3fnuz), sa, a, sb)
  with pytest.raises(TypeError, match="`interpret` argument to "
                     "`blockwise_matmul`"):
    ops.blockwise_matmul(a, sa, a, sb, interpret="yes")


def test_wrapper_lowers():
  # The scale expansion and the kernel: one kernel call.
  m, n, k = 300, 200, 512
  tiles = mosaic_gpu_common.choose_tiles(m, n, k, fn="t", max_block_m=64, k_multiple=128,
                              step_bytes=block_scaled.step_bytes(128))
  f = functools.partial(blockwise_mosaic_gpu._blockwise_matmul,
                        out_dtype=OUTS[0], mode="compiled", tiles=tiles,
                        a_block=(1, 128), b_block=(128, 128))
  text = _lowered(f, S((m, k), E4M3), S((m, 4), jnp.float32),
                  S((n, k), E4M3), S((2, 4), jnp.float32))
  assert text.count("custom_call @mosaic_gpu") == 1


# -- the kernel, compiled and interpreted ------------------------------------

class TestCompiledBlockwiseMatmul:
  """Compiled by Mosaic GPU: a Hopper GPU (compute capability 9.x)."""
  INTERPRET = False
  RTOL = 2.0**-10

  def setup_method(self):
    kernel_reference.skip_unless_hopper()

  @pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
  @pytest.mark.parametrize("blocks", [((1, 128), (128, 128)),
                                      ((1, 128), (1, 128)),
                                      ((128, 128), (1, 128))],
                           ids=["fwd", "wgrad", "dgrad"])
  @pytest.mark.parametrize("m,n,k,tiles", SHAPES[:2], ids=SHAPE_IDS[:2])
  def test_blockwise_matmul_matches_float64(self, m, n, k, tiles, blocks,
                                            fmt):
    rng = np.random.default_rng(m * k + n)
    ca, sa, av = _blockwise(rng, (m, k), blocks[0], fmt)
    cb, sb, bv = _blockwise(rng, (n, k), blocks[1], fmt, scale="float32")
    out = ops.blockwise_matmul(ca, sa, cb, sb, a_block=blocks[0],
                               b_block=blocks[1], out_dtype=F32,
                               interpret=self.INTERPRET, **tiles)
    ref_lib.check(out, av @ bv.T, np.abs(av) @ np.abs(bv).T, F32,
                  rtol=self.RTOL)

  def test_blockwise_matmul_bf16_and_jit(self):
    rng = np.random.default_rng(5)
    ca, sa, av = _blockwise(rng, (64, 256), (1, 128), "e4m3")
    cb, sb, bv = _blockwise(rng, (128, 256), (128, 128), "e4m3")
    out = jax.jit(lambda *x: ops.blockwise_matmul(
        *x, interpret=self.INTERPRET))(ca, sa, cb, sb)
    assert out.dtype == BF16
    ref_lib.check(out, av @ bv.T, np.abs(av) @ np.abs(bv).T, BF16,
                  rtol=self.RTOL)


class TestInterpretBlockwiseMatmul(TestCompiledBlockwiseMatmul):
  """Pallas' Mosaic GPU interpreter, on CPU (JAX >= 0.11)."""
  INTERPRET = True
  RTOL = 1e-6

  def setup_method(self):
    kernel_reference.skip_unless_mosaic_interpreter()
