"""Exact float64 references and checks shared by the GEMM kernel tests.

Every kernel result is compared with the float64 product of the dequantized
operands: elementwise within ``rtol * (|a| @ |b|.T)`` (the float32
accumulation bound) plus the output's own rounding (bf16: 2^-8 relative),
and, for float32 outputs, norm-wise within ``rtol``.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

TINY = 2.0**-126  # float32 results below this may be flushed on CPU


def f64(x) -> np.ndarray:
  """Exact float64 values of an array (fp8 widened in NumPy)."""
  return np.asarray(x, np.float64)


def fp8(rng, shape, dtype, spread=0):
  """Normal samples times random powers of two (per row), cast to fp8."""
  x = rng.standard_normal(shape) * np.exp2(rng.integers(
      -spread, spread + 1, (shape[0],) + (1,) * (len(shape) - 1)))
  return jnp.asarray(np.clip(x, -400, 400), dtype)


def mx_f64(x) -> np.ndarray:
  """Exact float64 values of an mxfp8 MXArray (NaN where the scale is NaN)."""
  d = f64(np.asarray(x.data))
  c = np.asarray(x.scales).astype(np.int64)
  s = np.where(c == 255, np.nan, np.exp2(c - 127.0))
  v = d.reshape(d.shape[0], -1, x.block_size) * s[..., None]
  return v.reshape(d.shape)[:, :x.shape[1]]


def check(out, ref, bound, out_dtype, *, rtol: float = 1e-5) -> None:
  """``out`` against the float64 ``ref`` (see the module docstring)."""
  out = np.asarray(out).astype(np.float64)  # in NumPy: no eager astype
  assert out.shape == ref.shape, (out.shape, ref.shape)
  rounding = 2.0**-8 if np.dtype(out_dtype) == np.dtype(jnp.bfloat16) else 0.0
  err = np.abs(out - ref)
  allowed = rtol * bound + rounding * np.abs(ref) + TINY
  assert np.all(err <= allowed), f"max excess {np.max(err - allowed)}"
  if np.dtype(out_dtype) == np.float32 and np.linalg.norm(ref) > 0:
    rel = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    assert rel < rtol, rel
