"""The fp8 blockwise matmul's dispatch (``blockwise_matmul/api.py``) and
its reference.
"""
from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8 import ops
from jaxfp8._src import compat
from jaxfp8._src.kernels.blockwise_matmul import api as blockwise_api
from jaxfp8._src.mx import blockwise

E4M3 = np.dtype(jnp.float8_e4m3fn)
HAS_INTERPRETER = compat.mosaic_gpu_interpret_params() is not None


@pytest.mark.parametrize("platform,cc,backend,want", [
    ("gpu", 90, "auto", "mosaic"), ("gpu", 100, "auto", "dequantize"),
    ("gpu", 89, "auto", "dequantize"), ("cpu", None, "auto", "dequantize"),
    ("cpu", None, "mosaic", "mosaic"), ("gpu", 90, "dequantize", "dequantize"),
    ("gpu", 90, "scaled_dot", "dequantize"), ("gpu", 90, "pallas", "dequantize"),
])
def test_blockwise_backend(platform, cc, backend, want):
  assert blockwise_api.blockwise_backend(
      platform, E4M3, E4M3, backend=backend, compute_capability=cc) == want


# -- blockwise_matmul_dispatch: implementation= -------------------------------

def _operands(m=5, n=3, k=200):
  rng = np.random.default_rng(k)
  x = rng.standard_normal((m, k)).astype(np.float32)
  w = rng.standard_normal((n, k)).astype(np.float32)
  ca, sa = blockwise.quantize(x, block=(1, 128), fmt="e4m3")
  cb, sb = blockwise.quantize(w, block=(128, 128), fmt="e4m3")
  return ca, sa, cb, sb


def test_reference_uses_the_quantizers_blocks():
  # A ragged K (200 = 128 + 72): the quantizer's tiles and block grid.
  ca, sa, cb, sb = _operands()
  want = np.asarray(blockwise.dequantize(ca, sa, block=(1, 128)),
                    np.float64) @ np.asarray(
                        blockwise.dequantize(cb, sb, block=(128, 128)),
                        np.float64).T
  out = ops.blockwise_matmul_reference(ca, sa, cb, sb, out_dtype=jnp.float32)
  np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-5)
  with pytest.raises(ValueError, match=r"must have shape \(5, 2\)"):
    ops.blockwise_matmul_reference(ca, sa[:, :1], cb, sb)


@pytest.mark.parametrize("implementation", ["xla", "mosaic_gpu"])
def test_dispatch_runs_each_implementation_named(implementation):
  if implementation == "mosaic_gpu" and not HAS_INTERPRETER:
    pytest.skip(f"JAX {jax.__version__} has no Mosaic GPU interpreter")
  ca, sa, cb, sb = _operands()
  interpret = None if implementation == "xla" else True
  out = ops.blockwise_matmul_dispatch(ca, sa, cb, sb, out_dtype=jnp.float32,
                                      implementation=implementation,
                                      interpret=interpret)
  want = ops.blockwise_matmul_reference(ca, sa, cb, sb, out_dtype=jnp.float32)
  np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=1e-6)


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="CPU behaviour")
def test_dispatch_none_falls_back_and_explicit_raises(caplog):
  ca, sa, cb, sb = _operands()
  with caplog.at_level(logging.DEBUG, logger=blockwise_api.__name__):
    out = ops.blockwise_matmul_dispatch(ca, sa, cb, sb)
  assert out.dtype == jnp.bfloat16
  [record] = caplog.records
  assert "not mosaic_gpu" in record.getMessage()
  fn = "`blockwise_matmul_dispatch`"
  with pytest.raises(NotImplementedError, match=f"{fn} with implementation="
                     "'mosaic_gpu'.*Hopper"):
    ops.blockwise_matmul_dispatch(ca, sa, cb, sb, implementation="mosaic_gpu")
  with pytest.raises(NotImplementedError, match=f"{fn} with implementation="
                     "'triton'.*no triton implementation"):
    ops.blockwise_matmul_dispatch(ca, sa, cb, sb, implementation="triton",
                                  interpret=True)
  with pytest.raises(ValueError, match=r"`b_block`.*got \(1, 64\)"):
    ops.blockwise_matmul_dispatch(ca, sa, cb, sb, b_block=(1, 64))
