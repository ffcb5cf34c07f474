"""The per-tensor fp8 Triton kernel (``scaled_matmul/triton.py``), compiled on
a GPU and interpreted on CPU, and its CUDA lowering.

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

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8 import ops
from jaxfp8._src.kernels import triton_common
from jaxfp8._src.kernels.scaled_matmul import triton as scaled_triton
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


def test_default_tiles():
  big = triton_common.choose_tiles(8192, 8192, 8192, caps=scaled_triton._CAPS,
                                   fn="t")
  assert (big.block_m, big.block_n, big.block_k, big.num_warps,
          big.num_stages) == (128, 256, 128, 8, 3)
  small = triton_common.choose_tiles(3, 40, 70, caps=scaled_triton._CAPS,
                                     fn="t")
  assert (small.block_m, small.block_n, small.block_k, small.num_warps) == (
      16, 64, 128, 4)


@pytest.mark.parametrize("dtypes", FP8_PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (100, 300, 700)])
@pytest.mark.parametrize("widen", [False, True], ids=["fp8mma", "bf16mma"])
def test_scaled_matmul_lowers_to_triton(dtypes, m, n, k, widen):
  a = jax.ShapeDtypeStruct((m, k), dtypes[0])
  b = jax.ShapeDtypeStruct((n, k), dtypes[1])
  s = jax.ShapeDtypeStruct((), jnp.float32)
  tiles = triton_common.choose_tiles(m, n, k, caps=scaled_triton._CAPS,
                              fn="test")
  f = functools.partial(scaled_triton._scaled_matmul,
                        out_dtype=np.dtype(jnp.bfloat16), mode="compiled",
                        tiles=tiles, widen=widen)
  [call] = kernel_reference.triton_calls(kernel_reference.lowered_triton(f, a, b, s, s))
  grid = -(-m // tiles.block_m) * -(-n // tiles.block_n)
  assert f"grid_x = {grid} : i32" in call
  assert f"num_warps = {tiles.num_warps} : i32" in call
  assert f"num_stages = {tiles.num_stages} : i32" in call


# -- the kernel, compiled and interpreted ------------------------------------

class TestCompiledScaledMatmul:
  """Compiled by Triton: a GPU of compute capability >= 8.9.

  ``interpret=None`` (the default) is the compiled kernel on a GPU and the
  jnp reference elsewhere; tests that call it check whichever it is.
  """
  INTERPRET = False

  def setup_method(self):
    kernel_reference.skip_unless_triton_gpu()

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


class TestInterpretScaledMatmul(TestCompiledScaledMatmul):
  """The same tests in Pallas' interpreter, on CPU."""
  INTERPRET = True

  def setup_method(self):
    kernel_reference.skip_unless_cpu()
