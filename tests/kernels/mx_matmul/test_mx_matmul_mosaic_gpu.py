"""The MXFP8 Mosaic GPU kernel (``mx_matmul/mosaic_gpu.py``), compiled on
Hopper and interpreted on CPU, and its CUDA lowering.

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

import jaxfp8
from jaxfp8 import ops
from jaxfp8._src import compat
from jaxfp8._src.kernels import mosaic_gpu_common
from jaxfp8._src.kernels import block_scaled_mosaic_gpu as block_scaled
from jaxfp8._src.kernels.mx_matmul import mosaic_gpu as mx_mosaic_gpu
import kernel_reference
import kernel_reference as ref_lib
from kernel_reference import E4M3
from kernel_reference import F32
from kernel_reference import OUTS
from kernel_reference import PAIR_IDS
from kernel_reference import PAIRS
from kernel_reference import SHAPE_IDS
from kernel_reference import SHAPES
from kernel_reference import skip_unless_mixed_pair
from kernel_reference import lowered_mosaic_gpu as _lowered

S = jax.ShapeDtypeStruct


def _mx(rng, shape, fmt, spread):
  x = rng.standard_normal(shape) * np.exp2(rng.integers(
      -spread, spread + 1, (shape[0], 1)))
  return jaxfp8.mx.quantize(jax.device_put(x.astype(np.float32)), fmt,
                            pad=True)


# -- tests that run no kernel --------------------------------------------------

def test_mx_matmul_mgpu_errors():
  x = jnp.ones((4, 64))
  a = jaxfp8.mx.quantize(x, "mxfp8_e4m3")
  with pytest.raises(TypeError, match="`a` argument to `mx_matmul_mgpu`"):
    ops.mx_matmul_mgpu(a.data, a)
  with pytest.raises(NotImplementedError, match="mxfp4_e2m1"):
    ops.mx_matmul_mgpu(jaxfp8.mx.quantize(x, "mxfp4"), a)
  if compat.mosaic_gpu_interpret_params() is not None:
    small = jaxfp8.mx.quantize(x, "mxfp8_e4m3", block_size=16)
    with pytest.raises(NotImplementedError, match="block size of 32, 64, 128"):
      ops.mx_matmul_mgpu(small, small, interpret=True)


def test_wrapper_lowers():
  # The MX wrapper's plan and exact fallback (a cond): one kernel call.
  m, n, k = 300, 200, 512
  tiles = mosaic_gpu_common.choose_tiles(m, n, k, fn="t", max_block_m=64, k_multiple=32,
                              step_bytes=block_scaled.step_bytes(32))
  f = functools.partial(mx_mosaic_gpu._mx_matmul, out_dtype=OUTS[0],
                        mode="compiled", tiles=tiles, block_size=32)
  text = _lowered(f, S((m, k), E4M3), S((m, k // 32), jnp.uint8),
                  S((n, k), E4M3), S((n, k // 32), jnp.uint8))
  assert text.count("custom_call @mosaic_gpu") == 1


# -- the kernel, compiled and interpreted ------------------------------------

class TestCompiledMxMatmulMgpu:
  """Compiled by Mosaic GPU: a Hopper GPU (compute capability 9.x)."""
  INTERPRET = False
  RTOL = 2.0**-10

  def setup_method(self):
    kernel_reference.skip_unless_hopper()

  @pytest.mark.parametrize("pair", PAIRS, ids=PAIR_IDS)
  @pytest.mark.parametrize("m,n,k,tiles", SHAPES, ids=SHAPE_IDS)
  def test_mx_matmul_matches_float64(self, m, n, k, tiles, pair):
    skip_unless_mixed_pair(pair)
    rng = np.random.default_rng(m + n * k)
    fmts = ["mxfp8_e4m3" if d == E4M3 else "mxfp8_e5m2" for d in pair]
    a, b = _mx(rng, (m, k), fmts[0], 20), _mx(rng, (n, k), fmts[1], 20)
    out = ops.mx_matmul_mgpu(a, b, out_dtype=F32, interpret=self.INTERPRET,
                             **tiles)
    av, bv = ref_lib.mx_f64(a), ref_lib.mx_f64(b)
    ref_lib.check(out, av @ bv.T, np.abs(av) @ np.abs(bv).T, F32,
                  rtol=self.RTOL)

  @pytest.mark.parametrize("codes", [([0, 1], [250, 240]),
                                     ([1, 254], [254, 1])],
                           ids=["shifted", "exact"])
  def test_mx_matmul_extreme_scales(self, codes):
    # Scale codes 0 (2^-127) and 1 against large ones need the shifted
    # domain; codes 1 and 254 in one row fit no shift: the exact path runs.
    rng = np.random.default_rng(3)
    data = ref_lib.fp8(rng, (20, 64), E4M3)

    def mx(rows, c):
      c = jax.device_put(np.asarray([c] * rows, np.uint8))
      return jaxfp8.mx.MXArray(data[:rows], c, "mxfp8_e4m3", axis=-1,
                               length=64, block_size=32)

    a, b = mx(20, codes[0]), mx(9, codes[1])
    out = ops.mx_matmul_mgpu(a, b, out_dtype=F32, interpret=self.INTERPRET)
    av, bv = ref_lib.mx_f64(a), ref_lib.mx_f64(b)
    ref_lib.check(out, av @ bv.T, np.abs(av) @ np.abs(bv).T, F32,
                  rtol=self.RTOL)

  def test_mx_matmul_nan_scale_is_nan_in_its_row_only(self):
    rng = np.random.default_rng(4)
    a, b = _mx(rng, (20, 64), "mxfp8_e4m3", 2), _mx(rng, (9, 64),
                                                    "mxfp8_e4m3", 2)
    codes = np.asarray(a.scales).copy()
    codes[3, 1] = 255
    a = jaxfp8.mx.MXArray(a.data, jax.device_put(codes), "mxfp8_e4m3",
                          axis=-1, length=64, block_size=32)
    out = np.asarray(ops.mx_matmul_mgpu(a, b, out_dtype=F32,
                                        interpret=self.INTERPRET))
    assert np.isnan(out[3]).all() and not np.isnan(np.delete(out, 3, 0)).any()


class TestInterpretMxMatmulMgpu(TestCompiledMxMatmulMgpu):
  """Pallas' Mosaic GPU interpreter, on CPU (JAX >= 0.11)."""
  INTERPRET = True
  RTOL = 1e-6

  def setup_method(self):
    kernel_reference.skip_unless_mosaic_interpreter()
