"""Exact laws of real-valued draws rounded into a format, in float64.

A sample of ``jaxfp8.random.<dist>(..., fmt)`` is meant to be the real-valued
draw rounded to the nearest value of ``fmt`` (ties to even, saturating). For a
distribution with a CDF, the probability of each finite value ``v`` of the
format is therefore the mass between the midpoints that surround it:

    P(v_i) = F(m_i) - F(m_{i-1}),    m_i = (v_i + v_{i+1}) / 2,

with ``m_{-1} = -inf`` and ``m_{last} = +inf`` (saturation sends the outer mass
to -max and +max). Ties are single points and have probability zero, so the
tie rule never matters. Signed zeros are one value.

The CDFs and survival functions are those of the distribution table
(:mod:`jaxfp8._src.random.distributions`), accurate to 1e-14 absolute or better:
far below the 2^-32 that the samplers are held to.

>>> values, probs = rounded_law("uniform", "e2m1")
>>> [(float(v), float(p)) for v, p in zip(values, probs) if p]
[(0.0, 0.25), (0.5, 0.5), (1.0, 0.25)]
"""
from __future__ import annotations

import functools

import numpy as np

from jaxfp8._src.numerics import formats
from jaxfp8._src.random import distributions


def boundaries(fmt: formats.FormatLike) -> np.ndarray:
  """Rounding boundaries of a format: midpoints between neighbouring values.

  >>> boundaries("e2m1")[:4]
  array([-5.  , -3.5 , -2.5 , -1.75])
  """
  v = formats.get(fmt).values
  return (v[1:] + v[:-1]) / 2


@functools.lru_cache(maxsize=512)
def _rounded_law(name: str, fmt_name: str, p: tuple[float, ...]):
  d = distributions.DISTRIBUTIONS[name]
  fmt = formats.get(fmt_name)
  if not fmt.signed:
    raise ValueError(f"rounded laws need a signed format with a zero, got "
                     f"{fmt.name}")
  m = [float(x) for x in boundaries(fmt)]
  try:
    med = d.median(*p)
    if med != med:  # a special function out of its range (NaN, no error)
      raise ValueError("NaN median")
    # Below the median differences of the CDF, above it of the survival
    # function, so tail probabilities keep their relative accuracy.
    left = np.array([d.cdf(x, *p) for x in m] + [1.0])
    right = np.array([1.0] + [d.sf(x, *p) for x in m])
  except (ZeroDivisionError, OverflowError, ValueError) as e:
    raise _unrepresentable(name, p) from e
  edges_lo = np.concatenate([[-np.inf], m])
  edges_hi = np.concatenate([m, [np.inf]])
  probs = np.empty(len(fmt.values))
  for i, (a, b) in enumerate(zip(edges_lo, edges_hi)):
    if b <= med:
      probs[i] = left[i] - (left[i - 1] if i else 0.0)
    elif a >= med:
      probs[i] = right[i] - (right[i + 1] if i + 1 < len(right) else 0.0)
    else:  # the bucket holding the median
      probs[i] = 1.0 - (left[i - 1] if i else 0.0) - (
          right[i + 1] if i + 1 < len(right) else 0.0)
  probs = np.maximum(probs, 0.0)
  total = probs.sum()
  # Every closed form above is a probability in [0, 1]: anything else means
  # float64 lost the law (never hand out a wrong one).
  if not (np.all(np.isfinite(probs)) and abs(total - 1.0) < 1e-9):
    raise _unrepresentable(name, p)
  probs /= total
  values = fmt.values.copy()
  for a in (values, probs):
    a.setflags(write=False)
  return values, probs


def _unrepresentable(name: str, p: tuple[float, ...]) -> ValueError:
  d = distributions.DISTRIBUTIONS[name]
  given = ", ".join(f"{k}={v!r}" for k, v in zip(d.params, p))
  hint = (" (the normal mass between `lower` and `upper` must be above "
          "float64's smallest number: both bounds within about 37 of zero on "
          "the same side)" if name == "truncated_normal" else "")
  return ValueError(f"the law of `{name}` with {given} can't be computed in "
                    f"float64{hint}; use parameters of moderate size")


def rounded_law(dist: str, fmt: formats.FormatLike, **params: float
                ) -> tuple[np.ndarray, np.ndarray]:
  """The exact law of a draw of ``dist`` rounded to nearest in ``fmt``.

  Args:
    dist: a jax.random sampler name with a CDF (see
      :data:`jaxfp8._src.random.distributions.DISTRIBUTIONS`).
    fmt: a signed narrow format (name, alias, dtype or Format).
    **params: the distribution's parameters, by jax.random's names
      (``minval``, ``maxval``, ``lower``, ``upper``, ``sigma``, ``scale``...).

  Returns:
    ``(values, probs)``: every finite value of the format (sorted, zero once)
    and its probability, both float64; ``probs`` sums to 1.

  Raises:
    ValueError: for a distribution without a CDF here or an unsigned format,
      a parameter outside its domain, or parameters whose law float64 can't
      hold (naming them).
    TypeError: for a missing or unknown parameter.
    ImportError: for gamma, beta, chisquare, t or generalized_normal without
      scipy (their CDFs are scipy.special's).

  >>> v, p = rounded_law("normal", "e4m3")
  >>> float(p[v == 0][0])  # |x| < 2^-10: the zero bucket
  0.00077918401756...
  >>> float(p[v == 448][0])  # everything beyond 432 saturates to max
  0.0
  """
  d = distributions.with_cdf(dist)
  return _rounded_law(d.name, formats.get(fmt).name,
                      distributions.param_values(d, params))


def quantize(probs: np.ndarray, bits: int = 32) -> np.ndarray:
  """Integer masses summing to ``2^bits``, each within one unit of ``p * 2^bits``.

  Floors every mass and hands the remaining units to the largest remainders,
  so ``|q_i / 2^bits - p_i| < 2^-bits`` for every i, and a law whose
  probabilities are multiples of ``2^-bits`` is kept exactly.

  >>> quantize(np.array([0.25, 0.5, 0.25]), bits=4)
  array([4, 8, 4])
  """
  total = 1 << bits
  scaled = np.asarray(probs, np.float64) * total
  q = np.floor(scaled).astype(np.int64)
  short = total - int(q.sum())
  if short:
    order = np.argsort(-(scaled - q), kind="stable")
    q[order[:short]] += 1
  return q


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
  """Total variation distance ``sum |p - q| / 2`` between two laws.

  >>> total_variation(np.array([0.5, 0.5, 0.0]), np.array([0.25, 0.5, 0.25]))
  0.25
  """
  return float(np.abs(np.asarray(p) - np.asarray(q)).sum() / 2)
