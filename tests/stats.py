"""Statistics and reference laws the tests judge samples with (the library has
no use for them): chi-square and the scipy.stats law rounded to a format.

The distance between laws, :func:`jaxfp8._src.random.laws.total_variation`, is the
library's (the report uses it); tests import it from there.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats

from jaxfp8._src.random import laws


def chi_square(counts: np.ndarray, probs: np.ndarray, *,
               min_expected: float = 5.0) -> tuple[float, int, float]:
  """Pearson's chi-square of counts against a law, small bins pooled.

  Bins whose expected count is below ``min_expected`` are pooled with their
  neighbours (in value order) until each pooled bin reaches it, so tails are
  tested as a whole instead of being dropped. A count in a bin of probability
  zero gives an infinite statistic.

  Returns:
    ``(statistic, degrees of freedom, p-value)``.
  """
  counts = np.asarray(counts, np.float64)
  probs = np.asarray(probs, np.float64)
  n = counts.sum()
  if np.any((probs == 0) & (counts > 0)):
    return math.inf, 0, 0.0
  groups_o, groups_e = [], []
  acc_o = acc_e = 0.0
  for o, e in zip(counts, probs * n):
    acc_o += o
    acc_e += e
    if acc_e >= min_expected:
      groups_o.append(acc_o)
      groups_e.append(acc_e)
      acc_o = acc_e = 0.0
  if acc_e > 0 or acc_o > 0:
    if groups_e:
      groups_o[-1] += acc_o
      groups_e[-1] += acc_e
    else:
      groups_o.append(acc_o)
      groups_e.append(acc_e)
  o, e = np.array(groups_o), np.array(groups_e)
  stat = float(((o - e) ** 2 / e).sum())
  dof = max(len(o) - 1, 1)
  return stat, dof, float(stats.chi2.sf(stat, dof))


def scipy_law(dist, fmt) -> np.ndarray:
  """The law of ``dist`` (a scipy.stats distribution) rounded to ``fmt``:
  CDF differences below the median, SF differences above it."""
  m = laws.boundaries(fmt)
  with np.errstate(over="ignore"):
    lo = np.concatenate([[0.0], dist.cdf(m)])
    hi = np.concatenate([dist.sf(m), [0.0]])
  # Differences of the CDF on the left, of the SF on the right.
  left = np.diff(np.concatenate([lo, [1.0]]))
  right = -np.diff(np.concatenate([[1.0], hi]))
  return np.where(np.concatenate([m, [np.inf]]) <= dist.median(), left, right)
