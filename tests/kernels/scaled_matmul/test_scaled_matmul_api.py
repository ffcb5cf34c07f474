"""The per-tensor fp8 matmul's dispatch (``scaled_matmul/api.py``): which
implementation runs where (pure functions of platform, compute capability
and format), ``implementation=``, and ``ops.dot_general`` through each
backend.
"""
from __future__ import annotations

import logging


import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8 import ops
from jaxfp8._src import compat
from jaxfp8._src.kernels.scaled_matmul import api as scaled_api
import kernel_reference
import kernel_reference as ref_lib

E4M3, E5M2 = np.dtype(jnp.float8_e4m3fn), np.dtype(jnp.float8_e5m2)
MIXED_OK = compat.mosaic_gpu_mixed_fp8()
HAS_INTERPRETER = compat.mosaic_gpu_interpret_params() is not None


@pytest.mark.parametrize("platform,cc,pair,widen,want", [
    ("gpu", 90, (E4M3, E4M3), False, "mosaic"),
    ("gpu", 90, (E5M2, E5M2), False, "mosaic"),
    ("gpu", 100, (E4M3, E4M3), False, "xla"),  # Blackwell: no wgmma
    ("gpu", 120, (E4M3, E4M3), False, "xla"),
    ("gpu", 90, (E4M3, E5M2), False, "mosaic" if MIXED_OK else "xla"),
    ("gpu", 90, (E4M3, E4M3), True, "xla"),  # HIGHEST: XLA's own dot
    ("gpu", 89, (E4M3, E4M3), False, "xla"),  # Ada: not Triton by default
    ("gpu", 80, (E4M3, E4M3), False, "xla"),
    ("cpu", None, (E4M3, E4M3), False, "xla"),
    ("tpu", None, (E4M3, E4M3), False, "xla"),
])
def test_fp8_backend_by_default(platform, cc, pair, widen, want):
  assert scaled_api.fp8_backend(platform, *pair, widen=widen,
                              compute_capability=cc) == want


def test_fp8_backend_named_and_interpreted():
  for name in ("mosaic", "triton", "xla"):
    assert scaled_api.fp8_backend("cpu", E4M3, E4M3, backend=name) == name
  want = "mosaic" if HAS_INTERPRETER else "triton"
  assert scaled_api.fp8_backend("cpu", E4M3, E4M3, interpret=True) == want
  assert scaled_api.fp8_backend("cpu", E4M3, E4M3, interpret=True,
                              widen=True) == "triton"
  assert scaled_api.fp8_backend("gpu", E4M3, E4M3, interpret=False,
                              compute_capability=89) == "triton"
  with pytest.raises(ValueError, match="`backend` argument to `dot_general`"):
    scaled_api.fp8_backend("cpu", E4M3, E4M3, backend="cublas")


@pytest.mark.parametrize("backend", ["xla", "triton", "mosaic"])
def test_dot_general_through_each_backend(backend):
  if backend == "mosaic" and not HAS_INTERPRETER:
    pytest.skip(f"JAX {jax.__version__} has no Mosaic GPU interpreter")
  rng = np.random.default_rng(8)
  lhs = ref_lib.fp8(rng, (2, 3, 40), jnp.float8_e4m3fn)
  rhs = ref_lib.fp8(rng, (40, 5), jnp.float8_e4m3fn)
  dims = (((2,), (0,)), ((), ()))
  interpret = None if backend == "xla" else True
  out = ops.dot_general(lhs, rhs, dims, interpret=interpret, backend=backend)
  want = np.einsum("abk,kn->abn", ref_lib.f64(lhs), ref_lib.f64(rhs))
  assert out.dtype == jnp.float32 and out.shape == want.shape
  np.testing.assert_allclose(np.asarray(out), want, rtol=1e-6, atol=1e-6)
  with pytest.raises(ValueError, match="`backend` argument to `dot_general`"):
    ops.dot_general(lhs, rhs, dims, backend="cublas")


def _values(x) -> np.ndarray:
  """Exact float64 values of a cast result, read in NumPy.

  A CodeArray is read through its format's code table, what decode computes;
  eager decode ops would compile once per format.
  """
  if isinstance(x, jaxfp8.CodeArray):
    codes = np.asarray(x.codes).astype(np.int64) & ((1 << x.format.bits) - 1)
    return x.format.code_table[codes].astype(np.float64)
  return np.asarray(x).astype(np.float64)


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


# -- scaled_matmul_dispatch: implementation= ----------------------------------

def _pair(m=9, n=11, k=70, dtypes=(E4M3, E4M3)):
  rng = np.random.default_rng(m + n + k)
  return (kernel_reference.fp8(rng, (m, k), dtypes[0], 2),
          kernel_reference.fp8(rng, (n, k), dtypes[1], 2))


def _want(a, b, sa, sb):
  return kernel_reference.f64(a) @ kernel_reference.f64(b).T * sa * sb


@pytest.mark.parametrize("implementation", ["xla", "triton", "mosaic_gpu"])
def test_dispatch_runs_each_implementation_named(implementation):
  if implementation == "mosaic_gpu" and not HAS_INTERPRETER:
    pytest.skip(f"JAX {jax.__version__} has no Mosaic GPU interpreter")
  a, b = _pair()
  interpret = None if implementation == "xla" else True
  out = ops.scaled_matmul_dispatch(a, b, 0.5, 3.0, out_dtype=jnp.float32,
                                   implementation=implementation,
                                   interpret=interpret)
  assert out.dtype == jnp.float32
  np.testing.assert_allclose(np.asarray(out), _want(a, b, 0.5, 3.0),
                             rtol=1e-6)


def test_dispatch_xla_is_jittable_and_takes_a_mixed_pair():
  a, b = _pair(dtypes=(E4M3, E5M2))
  f = jax.jit(lambda a, b: ops.scaled_matmul_dispatch(
      a, b, 2.0, 0.25, out_dtype=jnp.float32, implementation="xla"))
  np.testing.assert_allclose(np.asarray(f(a, b)), _want(a, b, 2.0, 0.25),
                             rtol=1e-6)


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="CPU behaviour")
def test_dispatch_none_falls_back_and_logs_why(caplog):
  a, b = _pair()
  with caplog.at_level(logging.DEBUG, logger=scaled_api.__name__):
    out = ops.scaled_matmul_dispatch(a, b, 1.0, 1.0, out_dtype=jnp.float32)
  np.testing.assert_allclose(np.asarray(out), _want(a, b, 1.0, 1.0),
                             rtol=1e-6)
  [record] = caplog.records
  assert "not mosaic_gpu" in record.getMessage()
  assert "compute capability 9.x" in record.getMessage()
  # interpret=True asks for a kernel: Mosaic GPU's interpreter where this
  # JAX has one, else the Triton one (the fallback logged).
  caplog.clear()
  with caplog.at_level(logging.DEBUG, logger=scaled_api.__name__):
    jaxpr = str(jax.make_jaxpr(lambda a, b: ops.scaled_matmul_dispatch(
        a, b, 1.0, 1.0, interpret=True))(a, b))
  if HAS_INTERPRETER:
    assert not caplog.records
  else:
    assert "pallas_call" in jaxpr
    assert "JAX >= 0.11" in caplog.records[0].getMessage()


def test_dispatch_none_chooses_as_fp8_backend_does():
  # HIGHEST precision: the Mosaic GPU kernel can't widen; with interpret=True
  # the Triton kernel runs, as fp8_backend says.
  a, b = _pair()
  assert scaled_api.fp8_backend(jax.default_backend(), a.dtype, b.dtype,
                                interpret=True, widen=True) == "triton"
  jaxpr = str(jax.make_jaxpr(lambda a, b: ops.scaled_matmul_dispatch(
      a, b, 1.0, 1.0, precision="highest", interpret=True))(a, b))
  assert "pallas_call" in jaxpr and "scaled_matmul_mgpu" not in jaxpr


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="CPU behaviour")
def test_dispatch_explicit_impossible_raises():
  a, b = _pair()
  fn = "`scaled_matmul_dispatch`"
  with pytest.raises(NotImplementedError,
                     match=f"{fn} with implementation='mosaic_gpu'.*Hopper"):
    ops.scaled_matmul_dispatch(a, b, 1.0, 1.0, implementation="mosaic_gpu")
  with pytest.raises(NotImplementedError,
                     match=f"{fn} with implementation='triton'.*compute "
                     "capability >= 8.9"):
    ops.scaled_matmul_dispatch(a, b, 1.0, 1.0, implementation="triton")
  with pytest.raises(NotImplementedError, match="implementation='mosaic_gpu'"
                     ".*precision=HIGHEST"):
    ops.scaled_matmul_dispatch(a, b, 1.0, 1.0, precision="highest",
                               implementation="mosaic_gpu", interpret=True)
  # interpret=False asks for a compiled kernel: no XLA fallback.
  with pytest.raises(NotImplementedError, match="implementation=None and "
                     "interpret=False.*mosaic_gpu:.*triton:"):
    ops.scaled_matmul_dispatch(a, b, 1.0, 1.0, interpret=False)


def test_dispatch_argument_errors():
  a, b = _pair()
  fn = "`scaled_matmul_dispatch`"
  with pytest.raises(ValueError, match=f"`implementation` argument to {fn}"):
    ops.scaled_matmul_dispatch(a, b, 1.0, 1.0, implementation="cublas")
  with pytest.raises(TypeError, match=f"`interpret` argument to {fn}"):
    ops.scaled_matmul_dispatch(a, b, 1.0, 1.0, interpret="yes")
  with pytest.raises(TypeError, match=f"`a` argument to {fn}"):
    ops.scaled_matmul_dispatch(np.ones((2, 3), np.float32), b, 1.0, 1.0)
