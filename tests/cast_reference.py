"""A float64 NumPy reference for rounding into a format, written from the rules.

It works on the format's table of exact values (``Format.values``), not on bits,
so it is an independent check of ``jaxfp8.cast``'s integer arithmetic.
"""
from __future__ import annotations

import numpy as np

from jaxfp8 import formats


def _neighbours(fmt, a):
  """Lower/upper grid neighbours of magnitudes ``a`` (float64), beyond max too."""
  vals = fmt.values[fmt.values >= 0]
  codes = fmt.codes[fmt.values >= 0]
  top = vals[-1]
  step = top - vals[-2] if fmt.mantissa_bits else top  # the grid past max
  grid = np.concatenate([vals, top + step * np.arange(1, 2)])
  gcodes = np.concatenate([codes, codes[-1:] + 1])
  i = np.clip(np.searchsorted(grid, a, side="right") - 1, 0, len(grid) - 2)
  beyond = a >= grid[-1]
  lo = np.where(beyond, grid[-1], grid[i])
  hi = np.where(beyond, np.inf, grid[i + 1])
  lo_code = np.where(beyond, gcodes[-1], gcodes[i])
  return lo, hi, lo_code


def round_reference(x, fmt, rounding="nearest", saturate=True, u=None):
  """Rounds float32 values ``x`` into ``fmt``; returns float64 values.

  ``u`` (uniform [0, 1) floats) decides stochastic rounding: up iff
  u < (|x| - lo) / (hi - lo).
  """
  fmt = formats.get(fmt)
  x = np.asarray(x, np.float32).astype(np.float64)
  if fmt.name == "float8_e8m0fnu":
    return _e8m0_reference(x, rounding, saturate, u)
  neg = np.signbit(x)
  a = np.abs(x)
  finite = np.isfinite(a)
  a_f = np.where(finite, a, 0.0)
  lo, hi, lo_code = _neighbours(fmt, a_f)
  if rounding == "nearest":
    d_lo, d_hi = a_f - lo, hi - a_f
    up = (d_hi < d_lo) | ((d_hi == d_lo) & (lo_code % 2 == 1))
  elif rounding == "stochastic":
    up = u < (a_f - lo) / (hi - lo)
  elif rounding == "up":
    up = (a_f > lo) & ~neg
  elif rounding == "down":
    up = (a_f > lo) & neg
  else:
    up = np.zeros_like(neg)
  mag = np.where(up, hi, lo)
  over = mag > fmt.max
  to_zero = {"toward_zero": np.ones_like(neg), "down": ~neg, "up": neg}.get(
      rounding, np.zeros_like(neg))
  can_overflow = not saturate and (fmt.has_inf or fmt.has_nan)
  special = np.inf if fmt.has_inf else np.nan
  mag = np.where(over, np.where(can_overflow & ~to_zero, special, fmt.max), mag)
  # Non-finite inputs.
  inf_to = fmt.max if (saturate or not (fmt.has_inf or fmt.has_nan)) else special
  mag = np.where(np.isinf(a), inf_to, mag)
  out = np.where(neg, -mag, mag)
  if not fmt.has_negative_zero:
    out = np.where(out == 0, 0.0, out)
  nan_value = np.nan if fmt.has_nan else -0.0
  return np.where(np.isnan(x), nan_value, out)


def _e8m0_reference(x, rounding, saturate, u):
  fmt = formats.get("e8m0")
  vals = fmt.values
  ok = np.isfinite(x) & (x > 0)
  a = np.where(ok, x, 1.0)
  i = np.clip(np.searchsorted(vals, a, side="right") - 1, 0, len(vals) - 1)
  lo = vals[i]
  hi = np.where(i + 1 < len(vals), vals[np.minimum(i + 1, len(vals) - 1)],
                2 * vals[-1])
  below = a < vals[0]
  if rounding == "nearest":
    up = (a - lo) >= (hi - a)
  elif rounding == "stochastic":
    up = u < (a - lo) / (hi - lo)
  elif rounding == "up":
    up = a > lo
  else:
    up = np.zeros_like(ok)
  out = np.where(up & ~below, hi, lo)
  out = np.where(below, vals[0], out)
  out = np.where(out > fmt.max, fmt.max if saturate else np.nan, out)
  out = np.where(np.isposinf(x), fmt.max if saturate else np.nan, out)
  return np.where(ok | np.isposinf(x), out, np.nan)
