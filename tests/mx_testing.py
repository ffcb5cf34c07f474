"""Helpers the MX tests share: bit-exact comparison, inputs made without
compiling, and the float64 product of MX-quantized operands."""
from __future__ import annotations

import math

import jax
import numpy as np

from jaxfp8 import mx


def assert_same_bits(got, want):
  """float32 ``got`` and ``want`` bit for bit (any NaN matches any NaN)."""
  got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
  assert got.shape == want.shape
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  ok = ~np.isnan(want)
  bad = np.flatnonzero((got.view(np.uint32) != want.view(np.uint32)) & ok)
  assert bad.size == 0, (
      f"{bad.size} values differ, first at {bad[0]}: got {got.flat[bad[0]]!r} "
      f"want {want.flat[bad[0]]!r}")


def to_device(x, dtype=np.float32):
  """x as a jax.Array, made without compiling anything: jnp.full, jnp.ones,
  jnp.asarray of host data and the like compile a program per shape, while
  jax.device_put only copies."""
  return jax.device_put(np.asarray(x, dtype))


def host_normal(seed, shape):
  # NumPy draws: an eager jax.random draw compiles a program per shape, and
  # where these inputs come from doesn't matter to the tests.
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def device_normal(seed, shape, scale=1.0):
  """float32 N(0, scale^2) test inputs from NumPy: their source doesn't
  matter to these tests, and jax.random would compile per shape."""
  x = np.random.default_rng(seed).standard_normal(shape) * scale
  return jax.device_put(x.astype(np.float32))


def qdq64(x, axes, fmt):
  """float64 values of x quantized along `axes` (flattened), by mx.quantize."""
  x = np.asarray(x, np.float32)
  rest = [a for a in range(x.ndim) if a not in axes]
  perm = rest + list(axes)
  xt = x.transpose(perm)
  lead = xt.shape[:len(rest)]
  q = mx.quantize(xt.reshape(lead + (math.prod(xt.shape[len(rest):]),)), fmt,
                  scale_mode="rceil", pad=True)
  return np.asarray(q.dequantize(), np.float64).reshape(xt.shape).transpose(
      np.argsort(perm))


def rel(a, b):
  a = np.asarray(a, np.float64)
  return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)
