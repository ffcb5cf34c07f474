"""Pallas kernels of jaxfp8.ops, compiled on a GPU and interpreted on CPU.

The kernel tests are written once, in :class:`TestCompiledKernels`
(``INTERPRET = False``: the Triton-compiled kernels, skipped without a GPU of
compute capability >= 8.9), and run again by :class:`TestInterpretKernels`
(``INTERPRET = True``: Pallas' interpreter, on CPU; skipped on a GPU, where
the compiled class covers the same code). Tests that run no kernel are
module-level functions. Every result is checked against the float64
product of the dequantized operands: elementwise within the
float32-accumulation bound ``1e-5 * (|a| @ |b|.T)`` (plus bf16 rounding for
bf16 outputs), and norm-wise within 1e-5 for float32 outputs.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8 import ops
from jaxfp8._src.kernels import common
from jaxfp8._src.kernels.mx_matmul import triton as mx_matmul_lib
from jaxfp8._src.kernels.scaled_matmul import triton as scaled_matmul_lib
import kernel_reference

FP8_DTYPES = [jnp.float8_e4m3fn, jnp.float8_e5m2]
MX_FORMATS = list(ops.MXFP8_FORMATS)
# (M, N, K, tiles, out_dtype): odd shapes over several padded tiles, and
# K = 4096 (interpret mode is slow: small M and N there).
_ODD = (37, 45, 100, dict(block_m=16, block_n=32, block_k=64))
CASES = [(*_ODD, jnp.float32), (*_ODD, jnp.bfloat16),
         (3, 5, 4096, {}, jnp.float32)]
CASE_IDS = ["odd-f32", "odd-bf16", "k4096-f32"]


def _ids(xs):
  return [np.dtype(x).name if not isinstance(x, str) else x for x in xs]


_fp8, _f64, _check = kernel_reference.fp8, kernel_reference.f64, kernel_reference.check


def _values(x) -> np.ndarray:
  """Exact float64 values of a cast result, read in NumPy.

  A CodeArray is read through its format's code table, what decode computes;
  eager decode ops would compile once per format.
  """
  if isinstance(x, jaxfp8.CodeArray):
    codes = np.asarray(x.codes).astype(np.int64) & ((1 << x.format.bits) - 1)
    return x.format.code_table[codes].astype(np.float64)
  return np.asarray(x).astype(np.float64)


_mx_f64 = kernel_reference.mx_f64


def _mx(data, codes, fmt):
  """An MXArray from fp8 data (M, K) and chosen scale codes (M, K / 32)."""
  return jaxfp8.mx.MXArray(data, jnp.asarray(codes, jnp.uint8), fmt, axis=-1,
                           length=data.shape[1], block_size=32)


def _mx_check(out, a, b, out_dtype):
  av, bv = _mx_f64(a), _mx_f64(b)
  _check(out, av @ bv.T, np.abs(av) @ np.abs(bv).T, out_dtype)


def _plan_is_fast(a, b) -> bool:
  # int32 scale codes made in NumPy: an eager astype compiles per shape
  int32 = lambda c: jax.device_put(np.asarray(c).astype(np.int32))
  fast, _, _ = mx_matmul_lib.fast_plan(
      int32(a.scales), int32(b.scales),
      a.data.shape[1], a.data.dtype, b.data.dtype)
  return bool(fast)


# -- tests that run no kernel --------------------------------------------------

def test_scaled_matmul_errors():
  # The malformed operands are made in NumPy: slicing or converting a
  # jax.Array eagerly compiles a program for each.
  host = np.ones((4, 32), jnp.float8_e4m3fn)
  a = jax.device_put(host)
  with pytest.raises(TypeError, match="`a` argument to `scaled_matmul`"):
    ops.scaled_matmul(jax.device_put(np.ones((4, 32), np.float32)), a, 1.0, 1.0)
  with pytest.raises(NotImplementedError, match="float8_e4m3fnuz"):
    ops.scaled_matmul(jax.device_put(host.astype(jnp.float8_e4m3fnuz)), a, 1.0,
                      1.0)
  with pytest.raises(ValueError, match="same K"):
    ops.scaled_matmul(a, jax.device_put(host[:, :16]), 1.0, 1.0)
  with pytest.raises(ValueError, match="2-D"):
    ops.scaled_matmul(jax.device_put(host[0]), a, 1.0, 1.0)
  with pytest.raises(ValueError, match="per-tensor scale"):
    ops.scaled_matmul(a, a, jax.device_put(np.ones(2, np.float32)), 1.0)
  with pytest.raises(TypeError, match="b_scale"):
    ops.scaled_matmul(a, a, 1.0, "2")
  with pytest.raises(NotImplementedError, match="out_dtype"):
    ops.scaled_matmul(a, a, 1.0, 1.0, out_dtype=jnp.float8_e4m3fn)
  with pytest.raises(ValueError, match="power of two"):
    ops.scaled_matmul(a, a, 1.0, 1.0, block_m=24)
  with pytest.raises(ValueError, match="at least 32"):
    ops.scaled_matmul(a, a, 1.0, 1.0, block_k=16)
  with pytest.raises(TypeError, match="interpret"):
    ops.scaled_matmul(a, a, 1.0, 1.0, interpret="yes")


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="CPU behaviour")
def test_compiled_mode_needs_gpu():
  a = jnp.ones((4, 32), jnp.float8_e4m3fn)
  with pytest.raises(NotImplementedError, match="needs a GPU"):
    ops.scaled_matmul(a, a, 1.0, 1.0, interpret=False)
  m = jaxfp8.mx.quantize(jnp.ones((4, 32)), "mxfp8")
  with pytest.raises(NotImplementedError, match="needs a GPU"):
    ops.mx_matmul(m, m, interpret=False)


def test_mx_matmul_errors():
  x = jnp.ones((4, 64))
  a = jaxfp8.mx.quantize(x, "mxfp8_e4m3")
  with pytest.raises(TypeError, match="MXArray"):
    ops.mx_matmul(a.data, a)
  with pytest.raises(NotImplementedError, match="mxfp4_e2m1"):
    ops.mx_matmul(jaxfp8.mx.quantize(x, "mxfp4"), a)
  with pytest.raises(ValueError, match="blocked along K"):
    ops.mx_matmul(jaxfp8.mx.quantize(jnp.ones((64, 4)), "mxfp8", axis=0), a)
  with pytest.raises(ValueError, match="same K"):
    ops.mx_matmul(jaxfp8.mx.quantize(jnp.ones((4, 32)), "mxfp8"), a)
  small = jaxfp8.mx.quantize(x, "mxfp8_e4m3", block_size=16)
  with pytest.raises(ValueError, match="block size"):
    ops.mx_matmul(small, a)
  with pytest.raises(NotImplementedError, match="power of two >= 32"):
    ops.mx_matmul(small, small, interpret=True)
  with pytest.raises(ValueError, match="at least 32"):
    ops.mx_matmul(a, a, block_k=16, interpret=True)


@pytest.mark.parametrize("grid_m,grid_n,group_m", [(10, 3, 4), (5, 7, 8),
                                                    (1, 1, 8), (9, 2, 1)])
def test_grouped_program_order_covers_every_tile_once(grid_m, grid_n,
                                                      group_m):
  pids = jax.device_put(np.arange(grid_m * grid_n, dtype=np.int32))
  i, j = common.tile_of_program(pids, grid_m, grid_n, group_m)
  tiles = sorted(zip(np.asarray(i).tolist(), np.asarray(j).tolist()))
  assert tiles == [(a, b) for a in range(grid_m) for b in range(grid_n)]


def test_default_tiles():
  big = common.choose_tiles(8192, 8192, 8192, caps=scaled_matmul_lib._CAPS,
                            fn="t")
  assert (big.block_m, big.block_n, big.block_k, big.num_warps,
          big.num_stages) == (128, 256, 128, 8, 3)
  mx = common.choose_tiles(8192, 8192, 8192, caps=mx_matmul_lib._CAPS, fn="t")
  assert (mx.block_m, mx.block_n, mx.block_k) == (128, 128, 128)
  small = common.choose_tiles(3, 40, 70, caps=scaled_matmul_lib._CAPS, fn="t")
  assert (small.block_m, small.block_n, small.block_k, small.num_warps) == (
      16, 64, 128, 4)


# -- the kernels, compiled and interpreted -------------------------------------

class TestCompiledKernels:
  """The kernels as Triton compiles them: a GPU of compute capability >= 8.9.

  ``interpret=None`` (the default) is the compiled kernel on a GPU and the
  jnp reference elsewhere; tests that call it check whichever it is.
  """
  INTERPRET = False

  def setup_method(self):
    if jax.default_backend() == "cpu":
      pytest.skip("compiled Pallas kernels need a GPU")
    cc = common.gpu_compute_capability()
    if cc is not None and cc < common.MIN_COMPUTE_CAPABILITY:
      pytest.skip(f"fp8 Triton dots need compute capability >= 8.9, this "
                  f"GPU has {cc / 10:.1f}")

  def _run(self, a, b, path, **kw):
    return mx_matmul_lib._mx_matmul_impl(
        a, b, out_dtype=jnp.float32, interpret=self.INTERPRET, block_m=16,
        block_n=16, block_k=64, num_warps=None, num_stages=None, path=path,
        **kw)

  # -- scaled_matmul ---------------------------------------------------------

  @pytest.mark.parametrize("dtype", FP8_DTYPES, ids=_ids(FP8_DTYPES))
  @pytest.mark.parametrize("m,n,k,tiles,out_dtype", CASES, ids=CASE_IDS)
  def test_scaled_matmul_matches_float64(self, m, n, k, tiles, dtype,
                                         out_dtype):
    rng = np.random.default_rng(m * n + k)
    a, b = _fp8(rng, (m, k), dtype, 3), _fp8(rng, (n, k), dtype, 3)
    sa, sb = np.float32(0.37), np.float32(2.0**-5 * 3)
    out = ops.scaled_matmul(a, b, sa, sb, out_dtype=out_dtype,
                            interpret=self.INTERPRET, **tiles)
    assert out.dtype == out_dtype
    ref = (_f64(a) * float(sa)) @ (_f64(b) * float(sb)).T
    bound = (np.abs(_f64(a)) * float(sa)) @ (np.abs(_f64(b)) * float(sb)).T
    _check(out, ref, bound, out_dtype)

  def test_scaled_matmul_mixed_formats_and_jit(self):
    rng = np.random.default_rng(1)
    a = _fp8(rng, (20, 96), jnp.float8_e4m3fn, 4)
    b = _fp8(rng, (33, 96), jnp.float8_e5m2, 4)
    f = jax.jit(lambda a, b, s: ops.scaled_matmul(
        a, b, s, 4.0, out_dtype=jnp.float32, interpret=self.INTERPRET,
        block_m=16, block_n=16, block_k=32))
    out = f(a, b, jnp.float32(0.25))
    ref = _f64(a) @ _f64(b).T
    _check(out, ref, np.abs(_f64(a)) @ np.abs(_f64(b)).T, jnp.float32)

  def test_scaled_matmul_jaxpr_has_pallas_call(self):
    a = jnp.ones((16, 64), jnp.float8_e4m3fn)
    jaxpr = jax.make_jaxpr(lambda a: ops.scaled_matmul(
        a, a, 1.0, 1.0, interpret=self.INTERPRET))(a)
    assert "pallas_call" in str(jaxpr)
    jaxpr = jax.make_jaxpr(lambda a: ops.scaled_matmul(a, a, 1.0, 1.0))(a)
    if jax.default_backend() == "gpu":  # interpret=None: compiled there
      assert "pallas_call" in str(jaxpr)
    else:  # interpret=None on CPU is the jnp reference: no Pallas.
      assert "pallas_call" not in str(jaxpr)

  @pytest.mark.parametrize("dtype", FP8_DTYPES, ids=_ids(FP8_DTYPES))
  def test_scaled_matmul_reference_path_matches_kernel(self, dtype):
    rng = np.random.default_rng(2)
    a, b = _fp8(rng, (9, 70), dtype, 2), _fp8(rng, (11, 70), dtype, 2)
    kernel = ops.scaled_matmul(a, b, 0.5, 3.0, out_dtype=jnp.float32,
                               interpret=self.INTERPRET)
    reference = ops.scaled_matmul(a, b, 0.5, 3.0, out_dtype=jnp.float32)
    if jax.default_backend() == "gpu":  # interpret=None: compiled there
      reference = ops.scaled_matmul_reference(a, b, 0.5, 3.0,
                                              out_dtype=jnp.float32)
    np.testing.assert_allclose(np.asarray(kernel), np.asarray(reference),
                               rtol=1e-6, atol=1e-30)
    ref64 = _f64(a) @ _f64(b).T * 1.5
    _check(reference, ref64, np.abs(_f64(a)) @ np.abs(_f64(b)).T * 1.5,
           jnp.float32)

  def test_scaled_matmul_empty(self):
    a = jnp.zeros((0, 32), jnp.float8_e4m3fn)
    b = jnp.zeros((4, 32), jnp.float8_e4m3fn)
    assert ops.scaled_matmul(a, b, 1.0, 1.0,
                             interpret=self.INTERPRET).shape == (0, 4)
    empty = jax.device_put(np.zeros((4, 0), jnp.float8_e4m3fn))
    out = ops.scaled_matmul(empty, empty, 1.0, 1.0, interpret=self.INTERPRET)
    np.testing.assert_array_equal(np.asarray(out, np.float32),
                                  np.zeros((4, 4)))

  # -- mx_matmul -------------------------------------------------------------

  @pytest.mark.parametrize("fmt", MX_FORMATS)
  @pytest.mark.parametrize("m,n,k,tiles,out_dtype", CASES, ids=CASE_IDS)
  def test_mx_matmul_matches_float64(self, m, n, k, tiles, fmt, out_dtype):
    rng = np.random.default_rng(m + n * k)
    x = rng.standard_normal((m, k)) * np.exp2(rng.integers(-30, 30, (m, 1)))
    y = rng.standard_normal((n, k)) * np.exp2(rng.integers(-8, 8, (1, k)))
    a = jaxfp8.mx.quantize(jnp.asarray(x, jnp.float32), fmt, pad=True)
    b = jaxfp8.mx.quantize(jnp.asarray(y, jnp.float32), fmt, pad=True)
    out = ops.mx_matmul(a, b, out_dtype=out_dtype, interpret=self.INTERPRET,
                        **tiles)
    assert out.dtype == out_dtype and out.shape == (m, n)
    _mx_check(out, a, b, out_dtype)

  @pytest.mark.parametrize("fmt", MX_FORMATS)
  def test_mx_matmul_tiny_and_huge_scales(self, fmt):
    """Codes 0..4 (2^-127..) against 250..254: products near 1, exactly."""
    rng = np.random.default_rng(3)
    dtype = jaxfp8.mx.get_format(fmt).dtype
    a = _mx(_fp8(rng, (19, 128), dtype), rng.integers(0, 5, (19, 4)), fmt)
    b = _mx(_fp8(rng, (21, 128), dtype), rng.integers(250, 255, (21, 4)), fmt)
    assert _plan_is_fast(a, b)
    for path in ("fast", "exact"):
      _mx_check(self._run(a, b, path), a, b, jnp.float32)
    # Tiny times tiny is below float32's range: exactly zero.
    assert _plan_is_fast(a, a)
    out = self._run(a, a, "fast")
    np.testing.assert_array_equal(np.asarray(out), np.zeros((19, 19)))

  def test_mx_matmul_zero_blocks_keep_fast_path(self):
    """quantize gives all-zero blocks code 0 (2^-127); the fast path shifts."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((24, 256)) * 2.0**-20
    x[:, 32:96] = 0.0
    x[3] = 2.0**-120 * rng.standard_normal(256)  # tiny but visible
    a = jaxfp8.mx.quantize(jnp.asarray(x, jnp.float32), "mxfp8_e4m3")
    b = jaxfp8.mx.quantize(jnp.asarray(rng.standard_normal((17, 256)),
                                       jnp.float32), "mxfp8_e4m3")
    assert int(np.min(np.asarray(a.scales))) == 0
    assert _plan_is_fast(a, b)
    out = self._run(a, b, "auto")
    _mx_check(out, a, b, jnp.float32)
    assert np.all(np.asarray(out)[3] != 0)

  def test_mx_matmul_exact_path_for_spread_scales(self):
    """Scales 2^-127 and 2^103 in one operand: no shift fits, exact path."""
    rng = np.random.default_rng(5)
    codes = np.full((8, 4), 127)
    codes[0], codes[1, :2] = 230, 0
    a = _mx(_fp8(rng, (8, 128), jnp.float8_e5m2), codes, "mxfp8_e5m2")
    b = _mx(_fp8(rng, (9, 128), jnp.float8_e5m2),
            rng.integers(110, 141, (9, 4)), "mxfp8_e5m2")
    assert not _plan_is_fast(a, b)
    _mx_check(self._run(a, b, "auto"), a, b, jnp.float32)

  def test_mx_matmul_nan_scale_and_mixed_formats(self):
    rng = np.random.default_rng(6)
    codes = rng.integers(120, 135, (10, 3))
    codes[2, 1] = 255
    a = _mx(_fp8(rng, (10, 96), jnp.float8_e4m3fn), codes, "mxfp8_e4m3")
    b = _mx(_fp8(rng, (12, 96), jnp.float8_e5m2),
            rng.integers(120, 135, (12, 3)), "mxfp8_e5m2")
    out = np.asarray(self._run(a, b, "auto"))
    assert np.all(np.isnan(out[2])) and not np.any(
        np.isnan(np.delete(out, 2, 0)))
    a_ok = _mx(a.data, np.where(codes == 255, 127, codes), "mxfp8_e4m3")
    _mx_check(self._run(a_ok, b, "auto"), a_ok, b, jnp.float32)

  def test_mx_matmul_jaxpr_reference_and_jit(self):
    rng = np.random.default_rng(7)
    a = jaxfp8.mx.quantize(jnp.asarray(rng.standard_normal((16, 64)),
                                       jnp.float32), "mxfp8_e4m3")
    jaxpr = jax.make_jaxpr(lambda a: ops.mx_matmul(
        a, a, interpret=self.INTERPRET))(a)
    assert "pallas_call" in str(jaxpr)
    jitted = jax.jit(lambda a: ops.mx_matmul(a, a, out_dtype=jnp.float32,
                                             interpret=self.INTERPRET))(a)
    default = ops.mx_matmul(a, a, out_dtype=jnp.float32)  # CPU: jnp path
    direct = ops.mx_matmul_reference(a, a, out_dtype=jnp.float32)
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(default),
                               rtol=1e-6)
    if jax.default_backend() == "gpu":  # interpret=None: compiled there
      np.testing.assert_allclose(np.asarray(default), np.asarray(direct),
                                 rtol=1e-6)
    else:
      np.testing.assert_array_equal(np.asarray(default), np.asarray(direct))
    _mx_check(default, a, a, jnp.float32)

  # -- dot_general, precision, scales ----------------------------------------

  @pytest.mark.parametrize("dims,shapes", [
      ((((2,), (0,)), ((), ())), ((2, 3, 40), (40, 5))),
      ((((0, 2), (1, 0)), ((), ())), ((6, 3, 7), (7, 6, 4))),
  ], ids=["dense", "two-contracting"])
  def test_dot_general_through_kernel(self, dims, shapes):
    rng = np.random.default_rng(8)
    lhs = _fp8(rng, shapes[0], jnp.float8_e4m3fn)
    rhs = _fp8(rng, shapes[1], jnp.float8_e5m2)
    jaxpr = jax.make_jaxpr(lambda l, r: ops.dot_general(
        l, r, dims, interpret=self.INTERPRET, backend="triton"))(lhs, rhs)
    assert "pallas_call" in str(jaxpr)
    out = ops.dot_general(lhs, rhs, dims, interpret=self.INTERPRET,
                          backend="triton")
    # operands widened in NumPy (exact); the float32 product stays XLA's
    f32 = lambda x: jax.device_put(np.asarray(x).astype(np.float32))
    want = jax.lax.dot_general(f32(lhs), f32(rhs), dims,
                               precision=jax.lax.Precision.HIGHEST)
    assert out.dtype == jnp.float32 and out.shape == want.shape
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=1e-6,
                               atol=1e-6)
    # Batch dimensions: lax.dot_general itself (on any backend).
    lhs1 = jax.device_put(np.asarray(lhs)[None])
    batched = ops.dot_general(lhs1, lhs1,
                              (((3,), (3,)), ((0,), (0,))))
    kept = shapes[0][:-1]
    assert batched.dtype == jnp.float32 and batched.shape == (1, *kept, *kept)

  def test_highest_precision_widens_tiles_exactly(self):
    rng = np.random.default_rng(9)
    a = _fp8(rng, (20, 160), jnp.float8_e5m2, 3)
    b = _fp8(rng, (12, 160), jnp.float8_e5m2, 3)
    out = ops.scaled_matmul(a, b, 1.0, 0.5, out_dtype=jnp.float32,
                            interpret=self.INTERPRET,
                            precision=jax.lax.Precision.HIGHEST)
    _check(out, _f64(a) @ _f64(b).T * 0.5,
           np.abs(_f64(a)) @ np.abs(_f64(b)).T * 0.5, jnp.float32)
    am = jaxfp8.mx.quantize(jnp.asarray(rng.standard_normal((20, 160)),
                                        jnp.float32), "mxfp8_e4m3", pad=True)
    out = ops.mx_matmul(am, am, out_dtype=jnp.float32,
                        interpret=self.INTERPRET, precision="highest")
    _mx_check(out, am, am, jnp.float32)
    with pytest.raises(ValueError, match="precision"):
      ops.scaled_matmul(a, b, 1.0, 1.0, precision="bogus")

  @pytest.mark.parametrize("default", [False, True],
                           ids=["kernel", "reference"])
  def test_scales_applied_without_spurious_overflow(self, default):
    # interpret=None: the jnp reference on CPU, the compiled kernel on a GPU.
    interpret = None if default else self.INTERPRET
    # a @ a.T = 512 per entry
    a = jax.device_put(np.full((2, 32), 4.0, jnp.float8_e4m3fn))
    cases = [(2.0**127, 2.0**-120, 512 * 2.0**7),  # product 2^7: one multiply
             (2.0**-120, 2.0**127, 512 * 2.0**7),
             # product overflows, result too
             (2.0**100, 2.0**30, 512 * 2.0**130),
             (2.0**-90, 2.0**-40, 512 * 2.0**-130),  # underflows, result too
             (2.0**120, 2.0**-100, 512 * 2.0**20), (0.0, 2.0**127, 0.0),
             (0.5, 3.0, 768.0)]
    for sa, sb, want in cases:
      out = ops.scaled_matmul(a, a, sa, sb, out_dtype=jnp.float32,
                              interpret=interpret)
      with np.errstate(over="ignore"):  # inf past float32's range is meant
        want32 = np.float32(want)  # ... and 0 below 2^-149
      if 0 < abs(want32) < kernel_reference.TINY:  # CPU may flush float32 subnormals
        assert float(np.asarray(out)[0, 0]) in (0.0, float(want32)), (sa, sb)
      else:
        # read in NumPy: indexing a jax.Array compiles
        got = float(np.asarray(out)[0, 0])
        assert got == float(want32), (sa, sb, got)
    # Scales whose product overflows but whose result is finite.
    big = ops.scaled_matmul(a, a, 2.0**100, 2.0**100, out_dtype=jnp.float32,
                            interpret=interpret)
    assert np.isinf(np.asarray(big)).all()
    # a @ a.T = 2^-13
    tiny = jax.device_put(np.full((2, 32), 2.0**-9, jnp.float8_e4m3fn))
    out = ops.scaled_matmul(tiny, tiny, 2.0**120, 2.0**20,
                            out_dtype=jnp.float32, interpret=interpret)
    assert float(np.asarray(out)[0, 0]) == 2.0**127

  def test_dot_general_precision_as_lax_takes_it(self):
    x = jax.device_put(np.ones((2, 3, 32), jnp.float8_e4m3fn))
    w = jax.device_put(np.ones((32, 5), jnp.float8_e4m3fn))
    dims = (((2,), (0,)), ((), ()))
    for p in ("DEFAULT", "highest", "float32", jax.lax.Precision.HIGH,
              (jax.lax.Precision.HIGHEST, jax.lax.Precision.DEFAULT)):
      out = ops.dot_general(x, w, dims, precision=p, interpret=self.INTERPRET,
                            backend="triton")
      assert out.shape == (2, 3, 5)
      assert float(np.asarray(out)[0, 0, 0]) == 32.0, p
    # What lax.dot_general refuses, it refuses here too, in its own words.
    with pytest.raises((ValueError, TypeError, KeyError)):
      jax.lax.dot_general(x, w, dims, precision="bogus")
    with pytest.raises((ValueError, TypeError, KeyError)):
      ops.dot_general(x, w, dims, precision="bogus",
                      interpret=self.INTERPRET)


class TestInterpretKernels(TestCompiledKernels):
  """The same tests in Pallas' interpreter, on CPU.

  Skipped on a GPU, where :class:`TestCompiledKernels` runs them compiled
  (the interpreter there would only repeat them, slowly).
  """
  INTERPRET = True

  def setup_method(self):
    if jax.default_backend() != "cpu":
      pytest.skip("interpreted on CPU; the compiled tests cover this backend")


@pytest.mark.parametrize("fmt", [f.name for f in jaxfp8.formats.all_formats(
    narrow=True)])
def test_dot_general_takes_every_narrow_format_exactly(fmt):
  """Formats no GEMM takes (float4, float6 codes, fnuz, IEEE, E8M0) are
  decoded exactly: the float32 result equals the float64 product of the
  operands' values (small K: every partial sum is exact in float32)."""
  rng = np.random.default_rng(0)
  a = rng.standard_normal((8, 16)).astype(np.float32)
  b = rng.standard_normal((16, 4)).astype(np.float32)
  if fmt == "float8_e8m0fnu":
    a, b = np.abs(a) + 0.1, np.abs(b) + 0.1
  qa, qb = jaxfp8.cast(a, fmt), jaxfp8.cast(b, fmt)
  got = jaxfp8.ops.dot_general(qa, qb, (((1,), (0,)), ((), ())))
  want = _values(qa) @ _values(qb)
  assert got.dtype == np.float32
  np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)
