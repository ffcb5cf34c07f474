"""Which kernel runs where: pure functions of platform, compute capability
and format, and ``ops.dot_general`` through each backend."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8 import ops
from jaxfp8._src import compat
from jaxfp8._src.kernels.blockwise_matmul import api as blockwise_api
from jaxfp8._src.kernels.scaled_matmul import api as scaled_api
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


@pytest.mark.parametrize("platform,cc,backend,want", [
    ("gpu", 90, "auto", "mosaic"), ("gpu", 100, "auto", "dequantize"),
    ("gpu", 89, "auto", "dequantize"), ("cpu", None, "auto", "dequantize"),
    ("cpu", None, "mosaic", "mosaic"), ("gpu", 90, "dequantize", "dequantize"),
    ("gpu", 90, "scaled_dot", "dequantize"), ("gpu", 90, "pallas", "dequantize"),
])
def test_blockwise_backend(platform, cc, backend, want):
  assert blockwise_api.blockwise_backend(platform, E4M3, E4M3, backend=backend,
                                    compute_capability=cc) == want


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
