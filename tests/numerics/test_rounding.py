"""The bit-pattern helpers of jaxfp8._src.numerics.rounding that other
domains build on (the rounding modes themselves: test_cast.py)."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxfp8._src.numerics import rounding


@pytest.mark.parametrize("opt", [None, 2])
def test_ldexp_or_zero_scales_exactly_or_gives_zero(opt):
  """rounding.ldexp_or_zero (the MX quantizers' exact branches, per-tensor
  scales): magnitudes of every range, subnormals and 0 included, times 2^k
  for k in [-300, 300], against float64: the exact product where it is at
  least 2^-126, +0 below, Inf past float32's range; also at LLVM -O2."""
  rng = np.random.default_rng(8)
  n = 1 << 20
  mag = rng.integers(0, 0x7F800000, n, dtype=np.uint32)
  mag[: n // 5] = rng.integers(0, 0x800000, n // 5, dtype=np.uint32)
  mag[:4] = [0, 1, 0x7FFFFF, 0x7F7FFFFF]
  k = rng.integers(-300, 300, n).astype(np.int32)
  opts = {} if opt is None else {"xla_backend_optimization_level": opt}
  got = np.asarray(jax.jit(rounding.ldexp_or_zero).lower(mag, k).compile(
      opts)(mag, k))
  v = mag.view(np.float32).astype(np.float64) * np.exp2(k.astype(np.float64))
  with np.errstate(over="ignore"):
    want = np.where(v < 2.0**-126, 0.0, v).astype(np.float32).view(np.uint32)
  want = np.where(v >= 2.0**128, np.uint32(0x7F800000), want)
  # Results cut to zero from the subnormals, from normal operands too.
  assert ((want == 0) & (mag >= 0x800000)).sum() > 1000
  assert ((want != 0) & (mag < 0x800000) & (mag > 0)).sum() > 1000
  np.testing.assert_array_equal(got, want)
