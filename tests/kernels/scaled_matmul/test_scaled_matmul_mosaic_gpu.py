"""The per-tensor fp8 Mosaic GPU kernel (``scaled_matmul/mosaic_gpu.py``),
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
from jaxfp8._src import compat
from jaxfp8._src.kernels import mosaic_gpu_common
from jaxfp8._src.kernels.scaled_matmul import mosaic_gpu as scaled_mosaic_gpu
import kernel_reference
import kernel_reference as ref_lib
from kernel_reference import BF16
from kernel_reference import E4M3
from kernel_reference import E5M2
from kernel_reference import F32
from kernel_reference import LOWER_SHAPES
from kernel_reference import OUTS
from kernel_reference import PAIR_IDS
from kernel_reference import PAIRS
from kernel_reference import SHAPE_IDS
from kernel_reference import SHAPES
from kernel_reference import skip_unless_mixed_pair
from kernel_reference import lowered_mosaic_gpu as _lowered

S = jax.ShapeDtypeStruct


# -- tests that run no kernel --------------------------------------------------

@pytest.mark.skipif(compat.mosaic_gpu_interpret_params() is not None,
                    reason="this JAX has the Mosaic GPU interpreter")
def test_interpret_names_the_jax_that_has_it():
  a = jnp.ones((16, 64), E4M3)
  with pytest.raises(NotImplementedError, match="JAX >= 0.11"):
    ops.scaled_matmul_mgpu(a, a, 1.0, 1.0, interpret=True)


def test_scaled_matmul_mgpu_errors():
  host = np.ones((4, 64), jnp.float8_e4m3fn)
  a = jax.device_put(host)
  fn = "`scaled_matmul_mgpu`"
  with pytest.raises(TypeError, match=f"`a` argument to {fn}"):
    ops.scaled_matmul_mgpu(jax.device_put(np.ones((4, 64), np.float32)), a,
                           1.0, 1.0)
  with pytest.raises(ValueError, match="same K"):
    ops.scaled_matmul_mgpu(a, jax.device_put(host[:, :32]), 1.0, 1.0)
  with pytest.raises(ValueError, match=f"`b_scale` argument to {fn}"):
    ops.scaled_matmul_mgpu(a, a, 1.0, jax.device_put(np.ones(2, np.float32)))
  with pytest.raises(NotImplementedError, match="out_dtype"):
    ops.scaled_matmul_mgpu(a, a, 1.0, 1.0, out_dtype=jnp.float8_e4m3fn)
  with pytest.raises(ValueError, match="`block_k` argument"):
    ops.scaled_matmul_mgpu(a, a, 1.0, 1.0, block_k=256)
  with pytest.raises(TypeError, match=f"`interpret` argument to {fn}"):
    ops.scaled_matmul_mgpu(a, a, 1.0, 1.0, interpret=1)


def test_references_on_cpu_match_the_triton_ops():
  # interpret=None off a Hopper GPU is the reference the Triton op shares.
  rng = np.random.default_rng(6)
  a, b = ref_lib.fp8(rng, (9, 70), E4M3, 2), ref_lib.fp8(rng, (11, 70), E4M3)
  if jax.default_backend() != "gpu":
    np.testing.assert_array_equal(
        np.asarray(ops.scaled_matmul_mgpu(a, b, 0.5, 3.0, out_dtype=F32)),
        np.asarray(ops.scaled_matmul_reference(a, b, 0.5, 3.0,
                                               out_dtype=F32)))


@pytest.mark.parametrize("out_dtype", OUTS, ids=lambda d: d.name)
@pytest.mark.parametrize("m,n,k", LOWER_SHAPES)
@pytest.mark.parametrize("pair", [(E4M3, E4M3), (E5M2, E5M2), (E4M3, E5M2)],
                         ids=["e4m3", "e5m2", "mixed"])
def test_scaled_matmul_lowers(pair, m, n, k, out_dtype):
  if not mosaic_gpu_common.takes_pair(*pair):
    pytest.skip("this JAX's wgmma takes no mixed fp8 pair")
  tiles = mosaic_gpu_common.choose_tiles(m, n, k, fn="t", out_itemsize=out_dtype.itemsize)
  f = functools.partial(scaled_mosaic_gpu._scaled_matmul, out_dtype=out_dtype,
                        mode="compiled", tiles=tiles)
  text = _lowered(f, S((m, k), pair[0]), S((n, k), pair[1]),
                  S((), jnp.float32), S((), jnp.float32))
  assert text.count("custom_call @mosaic_gpu") == 1


# -- the kernel, compiled and interpreted ------------------------------------

class TestCompiledScaledMatmulMgpu:
  """Compiled by Mosaic GPU: a Hopper GPU (compute capability 9.x)."""
  INTERPRET = False
  RTOL = 2.0**-10

  def setup_method(self):
    kernel_reference.skip_unless_hopper()

  @pytest.mark.parametrize("pair", PAIRS, ids=PAIR_IDS)
  @pytest.mark.parametrize("m,n,k,tiles", SHAPES, ids=SHAPE_IDS)
  def test_scaled_matmul_matches_float64(self, m, n, k, tiles, pair):
    skip_unless_mixed_pair(pair)
    rng = np.random.default_rng(m * n + k)
    a, b = ref_lib.fp8(rng, (m, k), pair[0], 3), ref_lib.fp8(rng, (n, k),
                                                             pair[1], 3)
    sa, sb = 0.37, 2.0**-5 * 3
    out = ops.scaled_matmul_mgpu(a, b, sa, sb, out_dtype=F32,
                                 interpret=self.INTERPRET, **tiles)
    av, bv = ref_lib.f64(a), ref_lib.f64(b)
    ref_lib.check(out, (av * sa) @ (bv * sb).T,
                  (np.abs(av) * sa) @ (np.abs(bv) * sb).T, F32,
                  rtol=self.RTOL)

  def test_scaled_matmul_bf16_out_huge_scales_and_jit(self):
    # The scales' product (2^140) overflows float32; the result does not.
    rng = np.random.default_rng(1)
    a, b = ref_lib.fp8(rng, (70, 96), E4M3), ref_lib.fp8(rng, (33, 96), E4M3)
    f = jax.jit(lambda a, b, s: ops.scaled_matmul_mgpu(
        a, b, s, 2.0**-70, out_dtype=BF16, interpret=self.INTERPRET,
        block_k=32))
    out = f(a, b, jnp.float32(2.0**70))
    assert out.dtype == BF16
    av, bv = ref_lib.f64(a), ref_lib.f64(b)
    ref_lib.check(out, av @ bv.T, np.abs(av) @ np.abs(bv).T, BF16,
                  rtol=self.RTOL)

  def test_the_kernel_runs_and_none_is_the_platform_default(self):
    a = jnp.ones((16, 64), E4M3)
    kernel = str(jax.make_jaxpr(lambda a: ops.scaled_matmul_mgpu(
        a, a, 1.0, 1.0, interpret=self.INTERPRET))(a))
    default = str(jax.make_jaxpr(lambda a: ops.scaled_matmul_mgpu(
        a, a, 1.0, 1.0))(a))
    reference = str(jax.make_jaxpr(lambda a: ops.scaled_matmul_reference(
        a, a, 1.0, 1.0))(a))
    assert kernel != reference
    assert (default == kernel) == (jax.default_backend() == "gpu")


class TestInterpretScaledMatmulMgpu(TestCompiledScaledMatmulMgpu):
  """Pallas' Mosaic GPU interpreter, on CPU (JAX >= 0.11)."""
  INTERPRET = True
  RTOL = 1e-6

  def setup_method(self):
    kernel_reference.skip_unless_mosaic_interpreter()
