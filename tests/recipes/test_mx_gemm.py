"""The MX GEMMs' backends: which one runs per platform and format, and
products with a packed weight (serving) on each."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8 import mx
from jaxfp8 import recipes
from jaxfp8._src import compat
from jaxfp8._src.kernels.mx_matmul import api as mx_api
from mx_testing import device_normal
from mx_testing import qdq64
from mx_testing import rel


def test_backend_choice_per_platform_and_format():
  choose = mx_api.mx_backend
  assert choose("gpu", "mxfp8_e4m3", block_size=32,
                compute_capability=90) == "mosaic"  # Hopper: Mosaic GPU
  assert choose("cuda", "mxfp8_e5m2", block_size=128,
                compute_capability=90) == "mosaic"
  # No wgmma before Hopper nor on Blackwell (tcgen05); Triton only by name.
  for cc in (80, 89, 100, 120):
    assert choose("gpu", "mxfp8_e4m3", block_size=32,
                  compute_capability=cc) == "dequantize"
  for block in (16, 256):
    assert choose("gpu", "mxfp8_e4m3", block_size=block,
                  compute_capability=90) == "dequantize"
  for fmt in ["mxfp4_e2m1", "mxfp6_e3m2", "nvfp4", "mxint8"]:
    assert choose("gpu", fmt, block_size=32,
                  compute_capability=90) == "dequantize"
  for platform in ["cpu", "tpu"]:
    assert choose(platform, "mxfp8_e4m3", block_size=32) == "dequantize"
  assert choose("cpu", "mxfp4_e2m1", block_size=32,
                backend="scaled_dot") == "scaled_dot"
  for name in ("triton", "pallas", "mosaic"):
    assert choose("cpu", "mxfp8_e4m3", block_size=32, backend=name) == name
  with pytest.raises(NotImplementedError, match="mxfp4_e2m1"):
    choose("gpu", "mxfp4_e2m1", block_size=32, backend="pallas")
  with pytest.raises(NotImplementedError, match="Mosaic GPU.*256"):
    choose("gpu", "mxfp8_e4m3", block_size=256, backend="mosaic")
  with pytest.raises(NotImplementedError, match="fp6"):
    choose("cpu", "mxfp6_e2m3", block_size=32, backend="scaled_dot")
  x, w = jnp.ones((4, 64)), jnp.ones((64, 8))
  dims = (((1,), (0,)), ((), ()))
  with pytest.raises(ValueError, match="`backend` argument to `dot_general`"):
    recipes.dot_general(x, w, dims, backend="cudnn")
  # raised at the forward, for a backward GEMM the backend can't take
  with pytest.raises(NotImplementedError, match="backend='pallas'"):
    recipes.dot_general(x, w, dims, recipe="d=mxfp4", backend="pallas")
  with pytest.raises(TypeError, match="`interpret`"):
    recipes.dot_general(x, w, dims, interpret="yes")


@pytest.mark.parametrize("backend,fmt", [("pallas", "mxfp8_e4m3"),
                                         ("mosaic", "mxfp8_e4m3"),
                                         ("scaled_dot", "mxfp4_e2m1"),
                                         ("auto", "mxfp6_e2m3")])
def test_packed_weight_products_per_backend(backend, fmt):
  if backend == "mosaic" and compat.mosaic_gpu_interpret_params() is None:
    pytest.skip(f"JAX {jax.__version__} has no Mosaic GPU interpreter")
  x = device_normal(0, (2, 5, 96), 3.0)
  w = device_normal(1, (96, 24), 0.1)
  packed = mx.quantize(w, fmt, axis=0, scale_mode="rceil", pad=True)
  dims = (((2,), (0,)), ((), ()))
  wd = np.asarray(packed.dequantize(), np.float64)
  interpret = True if backend in ("pallas", "mosaic") else None
  serve = jax.jit(lambda a, q, r: recipes.dot_general(
      a, q, dims, recipe=r, backend=backend, interpret=interpret),
                  static_argnums=2)
  dyn = serve(x, packed, fmt)
  ref = np.einsum("btk,kn->btn", qdq64(x, [2], fmt), wd)
  assert dyn.dtype == jnp.float32 and rel(dyn, ref) < 1e-6
  if backend == "auto":  # weight-only: the activations as they are
    only = serve(x, packed, None)
    ref = np.einsum("btk,kn->btn", np.asarray(x, np.float64), wd)
    assert rel(only, ref) < 1e-6
  else:
    with pytest.raises(NotImplementedError, match="dynamic MX activations"):
      serve(x, packed, None)
