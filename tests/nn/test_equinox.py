"""Equinox layers in fp8 under ``jaxfp8.install()``.

Equinox draws its parameters with ``jax.random.uniform`` / ``normal`` in the
layer's dtype, already scaled (``uniform(key, shape, dtype, -lim, lim)``),
so under install() a narrow layer samples the float32 law rounded once:
bit for bit that with the ``cast`` method, and the exact rounded law with
the default method. Natively the same layer gets 2^mantissa distinct values.
"""
from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from stats import chi_square

FP8 = ["float8_e4m3fn", "float8_e5m2"]
KEY = jax.random.key(3)

LAYERS = {
    "Linear": lambda dtype: eqx.nn.Linear(64, 32, key=KEY, dtype=dtype),
    "Conv2d": lambda dtype: eqx.nn.Conv2d(4, 8, 3, key=KEY, dtype=dtype),
    "MLP": lambda dtype: eqx.nn.MLP(16, 4, 32, 2, key=KEY, dtype=dtype),
    "Embedding": lambda dtype: eqx.nn.Embedding(100, 16, key=KEY,
                                                dtype=dtype),
}
INPUTS = {
    "Linear": jnp.ones((64,)), "Conv2d": jnp.ones((4, 9, 9)),
    "MLP": jnp.ones((16,)), "Embedding": jnp.asarray(7),
}


def _params(model):
  return jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array))


@pytest.fixture(autouse=True)
def _always_uninstall():
  yield
  jaxfp8.uninstall()


@pytest.mark.parametrize("fmt", FP8)
@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_cast_method_is_float32_rounded_once_bit_for_bit(layer, fmt):
  want = [jaxfp8.cast(p, fmt) for p in _params(LAYERS[layer](jnp.float32))]
  with jaxfp8.installed(), jaxfp8.random.default_method("cast"):
    got = _params(LAYERS[layer](jnp.dtype(fmt)))
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert g.dtype == jnp.dtype(fmt)
    np.testing.assert_array_equal(np.asarray(g).view(np.uint8),
                                  np.asarray(w).view(np.uint8))


@pytest.mark.parametrize("fmt", FP8)
def test_default_method_follows_the_rounded_law(fmt):
  """A big Linear's weights, counted against the exact law of
  uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)) rounded into the format."""
  fan_in = 256
  with jaxfp8.installed():
    w = eqx.nn.Linear(fan_in, 4096, key=KEY, dtype=jnp.dtype(fmt)).weight
  lim = 1 / math.sqrt(fan_in)
  values, probs = jaxfp8.random.rounded_law("uniform", fmt, minval=-lim,
                                            maxval=lim)
  x = np.asarray(w.astype(jnp.float32)).ravel()
  idx = np.searchsorted(values, x)
  assert np.all(values[idx] == x), "samples outside the format's values"
  counts = np.bincount(idx, minlength=len(values))
  _, _, p = chi_square(counts, probs)
  assert p > 1e-4
  native = eqx.nn.Linear(fan_in, 4096, key=KEY, dtype=jnp.dtype(fmt)).weight
  assert len(np.unique(np.asarray(native.astype(jnp.float32)))) <= 8
  assert len(np.unique(x)) > 20


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_forward_runs_under_filter_jit(layer):
  with jaxfp8.installed():
    model = LAYERS[layer](jnp.float8_e4m3fn)
  x = INPUTS[layer]  # fp8 inputs: JAX promotes no 8-bit float implicitly
  x = x if x.dtype == jnp.int32 else x.astype(jnp.float8_e4m3fn)
  out = eqx.filter_jit(lambda m, x: m(x))(model, x)
  assert out.dtype == jnp.float8_e4m3fn
  assert np.all(np.isfinite(np.asarray(out.astype(jnp.float32))))


def test_float32_layers_unchanged_under_install():
  want = _params(LAYERS["MLP"](jnp.float32))
  with jaxfp8.installed():
    got = _params(LAYERS["MLP"](jnp.float32))
  for g, w in zip(got, want):
    np.testing.assert_array_equal(g, w)
