"""The MXFP8 Triton kernel (``mx_matmul/triton.py``), compiled on a GPU and
interpreted on CPU, and its CUDA lowering.

The kernel tests are written once, in the compiled class
(``INTERPRET = False``: the Triton-compiled kernel, skipped without a GPU of
compute capability >= 8.9), and run again by its interpreted subclass
(``INTERPRET = True``: Pallas' interpreter, on CPU; skipped on a GPU, where
the compiled class covers the same code). Tests that run no kernel are
module-level functions. Every result is checked against the float64
product of the dequantized operands: elementwise within the
float32-accumulation bound ``1e-5 * (|a| @ |b|.T)`` (plus bf16 rounding for
bf16 outputs), and norm-wise within 1e-5 for float32 outputs. The lowering
tests run the Pallas Triton lowering for CUDA on any machine (inside
``compat.gpu_lowering_target()``), so unsupported primitives, tiles or
dtypes of the compiled path show up in CI; what it can't see (Triton's
compilation to PTX, speed) is benchmarks/gpu_check.sh's.
"""
from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8 import ops
from jaxfp8._src.kernels import triton_common
from jaxfp8._src.kernels.mx_matmul import reference as mx_reference
from jaxfp8._src.kernels.mx_matmul import triton as mx_triton
import kernel_reference

FP8_DTYPES = [jnp.float8_e4m3fn, jnp.float8_e5m2]
MX_FORMATS = list(ops.MXFP8_FORMATS)
# (M, N, K, tiles, out_dtype): odd shapes over several padded tiles, and
# K = 4096 (interpret mode is slow: small M and N there).
_ODD = (37, 45, 100, dict(block_m=16, block_n=32, block_k=64))
CASES = [(*_ODD, jnp.float32), (*_ODD, jnp.bfloat16),
         (3, 5, 4096, {}, jnp.float32)]
CASE_IDS = ["odd-f32", "odd-bf16", "k4096-f32"]
FP8_PAIRS = [(jnp.float8_e4m3fn, jnp.float8_e4m3fn),
             (jnp.float8_e5m2, jnp.float8_e5m2),
             (jnp.float8_e4m3fn, jnp.float8_e5m2)]
PAIR_IDS = ["e4m3", "e5m2", "mixed"]



def _ids(xs):
  return [np.dtype(x).name if not isinstance(x, str) else x for x in xs]


_fp8, _f64, _check = kernel_reference.fp8, kernel_reference.f64, kernel_reference.check
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
  fast, _, _ = mx_reference.fast_plan(
      int32(a.scales), int32(b.scales),
      a.data.shape[1], a.data.dtype, b.data.dtype)
  return bool(fast)


# -- tests that run no kernel --------------------------------------------------

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


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="CPU behaviour")
def test_compiled_mode_needs_gpu():
  m = jaxfp8.mx.quantize(jnp.ones((4, 32)), "mxfp8")
  with pytest.raises(NotImplementedError, match="needs a GPU"):
    ops.mx_matmul(m, m, interpret=False)


def test_default_tiles():
  mx = triton_common.choose_tiles(8192, 8192, 8192, caps=mx_triton._CAPS,
                                  fn="t")
  assert (mx.block_m, mx.block_n, mx.block_k) == (128, 128, 128)


@pytest.mark.parametrize("fmts", [("mxfp8_e4m3", "mxfp8_e4m3"),
                                  ("mxfp8_e5m2", "mxfp8_e5m2"),
                                  ("mxfp8_e4m3", "mxfp8_e5m2")], ids=PAIR_IDS)
@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (100, 300, 700)])
@pytest.mark.parametrize("widen", [False, True], ids=["fp8mma", "bf16mma"])
def test_mx_matmul_lowers_both_paths_to_triton(fmts, m, n, k, widen):
  kp = -(-k // 32) * 32
  args = []
  for rows, fmt in ((m, fmts[0]), (n, fmts[1])):
    args += [jax.ShapeDtypeStruct((rows, kp), jaxfp8.mx.get_format(fmt).dtype),
             jax.ShapeDtypeStruct((rows, kp // 32), jnp.uint8)]
  tiles = triton_common.choose_tiles(m, n, kp, caps=mx_triton._CAPS, fn="test")
  f = functools.partial(mx_triton._mx_matmul,
                        out_dtype=np.dtype(jnp.float32), mode="compiled",
                        tiles=tiles, block_size=32, path="auto", widen=widen)
  calls = kernel_reference.triton_calls(kernel_reference.lowered_triton(f, *args))
  names = sorted(re.search(r'name = "(\w+)"', c).group(1) for c in calls)
  assert names == ["mx_matmul", "mx_matmul_exact"]


# -- the kernel, compiled and interpreted ------------------------------------

class TestCompiledMxMatmul:
  """Compiled by Triton: a GPU of compute capability >= 8.9.

  ``interpret=None`` (the default) is the compiled kernel on a GPU and the
  jnp reference elsewhere; tests that call it check whichever it is.
  """
  INTERPRET = False

  def setup_method(self):
    kernel_reference.skip_unless_triton_gpu()

  def _run(self, a, b, path, **kw):
    return mx_triton._mx_matmul_impl(
        a, b, out_dtype=jnp.float32, interpret=self.INTERPRET, block_m=16,
        block_n=16, block_k=64, num_warps=None, num_stages=None, path=path,
        **kw)

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

  def test_highest_precision_widens_tiles_exactly(self):
    rng = np.random.default_rng(9)
    am = jaxfp8.mx.quantize(jnp.asarray(rng.standard_normal((20, 160)),
                                        jnp.float32), "mxfp8_e4m3", pad=True)
    out = ops.mx_matmul(am, am, out_dtype=jnp.float32,
                        interpret=self.INTERPRET, precision="highest")
    _mx_check(out, am, am, jnp.float32)


class TestInterpretMxMatmul(TestCompiledMxMatmul):
  """The same tests in Pallas' interpreter, on CPU."""
  INTERPRET = True

  def setup_method(self):
    kernel_reference.skip_unless_cpu()
