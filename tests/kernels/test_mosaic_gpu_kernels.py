"""The Mosaic GPU kernels of jaxfp8.ops, compiled on Hopper and interpreted
on CPU.

Written once, in :class:`MosaicKernelTests`, and run by two subclasses:
:class:`TestCompiledMosaicKernels` (``INTERPRET = False``: compiled by
Mosaic GPU, skipped without a Hopper GPU: compute capability 9.x) and
:class:`TestInterpretMosaicKernels` (``INTERPRET = True``: Pallas' Mosaic
GPU interpreter on CPU, skipped where JAX has none, before 0.11). Every
result is checked against the float64 product of the dequantized operands
(:mod:`kernel_reference`): norm-wise relative error below 1e-6 for float32
outputs in the interpreter, which sums in float32. Compiled, Hopper's fp8
``wgmma`` accumulates with fewer bits than float32 (DeepSeek-V3, section
3.3.2), so that class allows 2^-10. Tests that run no kernel are
module-level functions.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8 import ops
from jaxfp8._src import compat
from jaxfp8._src.kernels import common as triton_common
from jaxfp8._src.kernels import mosaic_common as common
from jaxfp8._src.mx import blockwise
import kernel_reference as ref_lib

E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2
PAIRS = [(E4M3, E4M3), (E5M2, E5M2), (E4M3, E5M2)]
PAIR_IDS = ["e4m3", "e5m2", "mixed"]
F32, BF16 = np.dtype(jnp.float32), np.dtype(jnp.bfloat16)
# (M, N, K, tiles): odd shapes over several ragged tiles, and one tile.
SHAPES = [(37, 45, 200, dict(block_n=32)), (130, 70, 300, {}),
          (8, 16, 64, {})]
SHAPE_IDS = ["odd", "ragged-2x1", "one-tile"]


def _mixed_ok(pair) -> None:
  if not common.takes_pair(*pair):
    pytest.skip(f"this JAX's Mosaic GPU wgmma takes no mixed fp8 pair "
                f"({jax.__version__})")


def _mx(rng, shape, fmt, spread):
  x = rng.standard_normal(shape) * np.exp2(rng.integers(
      -spread, spread + 1, (shape[0], 1)))
  return jaxfp8.mx.quantize(jax.device_put(x.astype(np.float32)), fmt,
                            pad=True)


def _blockwise(rng, shape, block, fmt, scale="pow2", spread=6):
  x = rng.standard_normal(shape) * np.exp2(rng.integers(
      -spread, spread + 1, (shape[0], 1)))
  codes, scales = blockwise.quantize(jax.device_put(x.astype(np.float32)),
                                     block=block, fmt=fmt, scale=scale)
  values = ref_lib.f64(blockwise.dequantize(codes, scales, block=block))
  return codes, scales, values


class MosaicKernelTests:
  """The three kernels against float64; subclasses say how they run."""
  INTERPRET: bool
  RTOL: float

  # -- per-tensor ------------------------------------------------------------

  @pytest.mark.parametrize("pair", PAIRS, ids=PAIR_IDS)
  @pytest.mark.parametrize("m,n,k,tiles", SHAPES, ids=SHAPE_IDS)
  def test_scaled_matmul_matches_float64(self, m, n, k, tiles, pair):
    _mixed_ok(pair)
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

  # -- MXFP8 -----------------------------------------------------------------

  @pytest.mark.parametrize("pair", PAIRS, ids=PAIR_IDS)
  @pytest.mark.parametrize("m,n,k,tiles", SHAPES, ids=SHAPE_IDS)
  def test_mx_matmul_matches_float64(self, m, n, k, tiles, pair):
    _mixed_ok(pair)
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

  # -- fp8 blockwise ---------------------------------------------------------

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


class TestCompiledMosaicKernels(MosaicKernelTests):
  """Compiled by Mosaic GPU: a Hopper GPU (compute capability 9.x)."""
  INTERPRET = False
  RTOL = 2.0**-10

  def setup_method(self):
    if jax.default_backend() != "gpu":
      pytest.skip("compiled Mosaic GPU kernels need a GPU")
    cc = triton_common.gpu_compute_capability()
    if not common.is_hopper(cc):
      pytest.skip(f"the kernels' wgmma needs compute capability 9.x "
                  f"(Hopper), this GPU has {cc}")


class TestInterpretMosaicKernels(MosaicKernelTests):
  """Pallas' Mosaic GPU interpreter, on CPU (JAX >= 0.11)."""
  INTERPRET = True
  RTOL = 1e-6

  def setup_method(self):
    if compat.mosaic_gpu_interpret_params() is None:
      pytest.skip(f"JAX {jax.__version__} has no Mosaic GPU interpreter "
                  "(JAX >= 0.11 ships it)")
    if jax.default_backend() == "gpu":
      pytest.skip("interpreted on CPU; the compiled tests cover this GPU")


# -- tests that run no kernel --------------------------------------------------

@pytest.mark.parametrize("platform,cc,interpret,mode", [
    ("gpu", 90, None, "compiled"), ("gpu", 100, None, "reference"),
    ("gpu", 89, None, "reference"), ("cpu", None, None, "reference"),
    ("tpu", None, None, "reference"), ("gpu", 90, False, "compiled")])
def test_mode_is_a_function_of_platform_and_compute_capability(
    platform, cc, interpret, mode):
  assert common.resolve_mode(interpret, "f", platform=platform,
                             compute_capability=cc) == mode


def test_compiled_mode_needs_hopper():
  for cc in (89, 100):
    with pytest.raises(NotImplementedError, match="Hopper GPU, compute "
                       "capability 9.x"):
      common.resolve_mode(False, "f", platform="gpu", compute_capability=cc)
  with pytest.raises(NotImplementedError, match="'cpu' backend"):
    common.resolve_mode(False, "f", platform="cpu")
  with pytest.raises(TypeError, match="`interpret` argument to `f`"):
    common.resolve_mode("yes", "f")


@pytest.mark.skipif(compat.mosaic_gpu_interpret_params() is not None,
                    reason="this JAX has the Mosaic GPU interpreter")
def test_interpret_names_the_jax_that_has_it():
  a = jnp.ones((16, 64), E4M3)
  with pytest.raises(NotImplementedError, match="JAX >= 0.11"):
    ops.scaled_matmul_mgpu(a, a, 1.0, 1.0, interpret=True)


def test_tiles_are_checked_and_fit_shared_memory():
  with pytest.raises(ValueError, match="`block_m` argument to `f`.*got 32"):
    common.choose_tiles(64, 64, 64, fn="f", block_m=32)
  with pytest.raises(ValueError, match="`block_n`.*got 24"):
    common.choose_tiles(64, 64, 64, fn="f", block_n=24)
  with pytest.raises(ValueError, match="multiple of 128"):
    common.choose_tiles(64, 64, 64, fn="f", block_k=32, k_multiple=128)
  with pytest.raises(ValueError, match="shared memory"):
    common.choose_tiles(64, 64, 64, fn="f", block_m=128, block_n=256,
                        max_concurrent_steps=8)
  big = common.choose_tiles(8192, 8192, 8192, fn="f", out_itemsize=2)
  assert (big.block_m, big.block_n, big.block_k,
          big.max_concurrent_steps) == (128, 128, 128, 4)
  small = common.choose_tiles(3, 40, 70, fn="f")
  assert (small.block_m, small.block_n) == (64, 64)


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


def test_references_on_cpu_match_the_triton_ops():
  # interpret=None off a Hopper GPU is the reference the Triton op shares.
  rng = np.random.default_rng(6)
  a, b = ref_lib.fp8(rng, (9, 70), E4M3, 2), ref_lib.fp8(rng, (11, 70), E4M3)
  if jax.default_backend() != "gpu":
    np.testing.assert_array_equal(
        np.asarray(ops.scaled_matmul_mgpu(a, b, 0.5, 3.0, out_dtype=F32)),
        np.asarray(ops.scaled_matmul_reference(a, b, 0.5, 3.0,
                                               out_dtype=F32)))
