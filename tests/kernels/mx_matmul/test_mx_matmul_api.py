"""The MX matmul's dispatch (``mx_matmul/api.py``): ``implementation=``,
named, impossible and None's fallback; the recipes' :func:`mx_backend` is
tested with the recipe GEMM (tests/recipes/test_mx_gemm.py)."""
from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8 import ops
from jaxfp8._src import compat
from jaxfp8._src.kernels.mx_matmul import api as mx_api
import kernel_reference

HAS_INTERPRETER = compat.mosaic_gpu_interpret_params() is not None


def _mx(fmt, rows, k=96, seed=0, block_size=32):
  rng = np.random.default_rng(seed)
  x = rng.standard_normal((rows, k)).astype(np.float32)
  return jaxfp8.mx.quantize(jax.device_put(x), fmt, block_size=block_size,
                            pad=True)


def _want(a, b):
  return np.asarray(a.dequantize(), np.float64) @ np.asarray(
      b.dequantize(), np.float64).T


@pytest.mark.parametrize("implementation", ["xla", "triton", "mosaic_gpu"])
def test_dispatch_runs_each_implementation_named(implementation):
  if implementation == "mosaic_gpu" and not HAS_INTERPRETER:
    pytest.skip(f"JAX {jax.__version__} has no Mosaic GPU interpreter")
  a, b = _mx("mxfp8_e4m3", 10), _mx("mxfp8_e4m3", 7, seed=1)
  interpret = None if implementation == "xla" else True
  out = ops.mx_matmul_dispatch(a, b, out_dtype=jnp.float32,
                               implementation=implementation,
                               interpret=interpret)
  kernel_reference.check(out, _want(a, b), np.abs(_want(a, b)) + 1.0,
                         jnp.float32)


@pytest.mark.parametrize("fmt", ["mxfp4_e2m1", "mxfp6_e3m2", "mxfp8_e5m2"])
def test_dispatch_xla_takes_every_mx_format(fmt):
  a, b = _mx(fmt, 6), _mx(fmt, 5, seed=2)
  out = ops.mx_matmul_dispatch(a, b, out_dtype=jnp.float32)
  np.testing.assert_allclose(np.asarray(out), _want(a, b), rtol=1e-6,
                             atol=1e-6)


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="CPU behaviour")
def test_dispatch_none_falls_back_and_logs_why(caplog):
  a = _mx("mxfp4_e2m1", 4)
  with caplog.at_level(logging.DEBUG, logger=mx_api.__name__):
    ops.mx_matmul_dispatch(a, a, interpret=True)
  messages = [r.getMessage() for r in caplog.records]
  # mxfp4: neither kernel reads it; XLA runs, each fallback logged.
  assert len(messages) == 2
  assert "not mosaic_gpu" in messages[0] and "mxfp4_e2m1" in messages[0]
  assert "not triton" in messages[1] and "mxfp4_e2m1" in messages[1]


def test_dispatch_explicit_impossible_raises():
  fp4 = _mx("mxfp4_e2m1", 4)
  small = _mx("mxfp8_e4m3", 4, k=64, block_size=16)
  fn = "`mx_matmul_dispatch`"
  with pytest.raises(NotImplementedError, match=f"{fn} with implementation="
                     "'triton'.*not mxfp4_e2m1"):
    ops.mx_matmul_dispatch(fp4, fp4, implementation="triton", interpret=True)
  with pytest.raises(NotImplementedError, match="implementation='mosaic_gpu'"
                     ".*block size of 32, 64, 128"):
    ops.mx_matmul_dispatch(small, small, implementation="mosaic_gpu",
                           interpret=True)
  with pytest.raises(NotImplementedError, match="implementation='triton'"
                     ".*power of two >= 32"):
    ops.mx_matmul_dispatch(small, small, implementation="triton",
                           interpret=True)
  if jax.default_backend() != "gpu":
    a = _mx("mxfp8_e4m3", 4)
    with pytest.raises(NotImplementedError, match="implementation="
                       "'mosaic_gpu'.*Hopper"):
      ops.mx_matmul_dispatch(a, a, implementation="mosaic_gpu")


def test_dispatch_argument_errors():
  a = _mx("mxfp8_e4m3", 4)
  fn = "`mx_matmul_dispatch`"
  with pytest.raises(TypeError, match=f"`a` argument to {fn}"):
    ops.mx_matmul_dispatch(a.data, a)
  with pytest.raises(ValueError, match="same K"):
    ops.mx_matmul_dispatch(_mx("mxfp8_e4m3", 4, k=64), a)
  with pytest.raises(ValueError, match=f"`implementation` argument to {fn}"):
    ops.mx_matmul_dispatch(a, a, implementation="pallas")
