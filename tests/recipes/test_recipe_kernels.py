"""The recipes' GEMMs on the Mosaic GPU kernels (in the interpreter on CPU):
the same values and gradients as the exact dequantize-and-dot path."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8 import recipes
from jaxfp8._src import compat

pytestmark = pytest.mark.skipif(
    compat.mosaic_gpu_interpret_params() is None,
    reason=f"JAX {jax.__version__} has no Mosaic GPU interpreter (>= 0.11)")

DIMS = (((2,), (0,)), ((), ()))


def _loss(x, w, recipe, backend, interpret):
  y = recipes.dot_general(x, w, DIMS, recipe=recipe, backend=backend,
                          interpret=interpret)
  return jnp.sum(y * jnp.cos(y))


@pytest.mark.parametrize("recipe", ["fp8_blockwise", "mxfp8"])
def test_kernel_path_equals_the_exact_path(recipe):
  rng = np.random.default_rng(0)
  x = jax.device_put(rng.standard_normal((1, 37, 160)).astype(np.float32))
  w = jax.device_put((rng.standard_normal((160, 70)) * 0.1).astype(
      np.float32))
  grad = jax.value_and_grad(_loss, argnums=(0, 1))
  exact = grad(x, w, recipe, "dequantize", None)
  kernel = grad(x, w, recipe, "mosaic", True)
  for got, want in zip(jax.tree.leaves(kernel), jax.tree.leaves(exact)):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.linalg.norm(got - want) <= 1e-6 * np.linalg.norm(want)
  jaxpr = str(jax.make_jaxpr(lambda x, w: grad(x, w, recipe, "mosaic",
                                               True))(x, w))
  # forward, dgrad and wgrad: each one wgmma kernel
  assert jaxpr.count("wgmma_wait") >= 3


def test_batched_mx_gemm_runs_the_kernel_per_batch():
  # Batch dims: one kernel call per batch element (lax.map).
  rng = np.random.default_rng(1)
  x = jax.device_put(rng.standard_normal((3, 8, 64)).astype(np.float32))
  w = jax.device_put(rng.standard_normal((3, 64, 16)).astype(np.float32))
  dims = (((2,), (1,)), ((0,), (0,)))
  run = lambda backend, interpret: recipes.dot_general(
      x, w, dims, recipe="mxfp8", backend=backend, interpret=interpret)
  got = np.asarray(run("mosaic", True), np.float64)
  want = np.asarray(run("dequantize", None), np.float64)
  assert got.shape == (3, 8, 16)
  assert np.linalg.norm(got - want) <= 1e-6 * np.linalg.norm(want)
