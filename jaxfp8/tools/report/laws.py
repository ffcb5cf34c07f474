"""Exact rounded laws for the report, and the statistics that use them.

The right answer for a sampler in a narrow format is the law of the
real-valued draw rounded to nearest (ties to even, saturating): the
probability of each representable value ``v`` is the real law's mass between
the midpoints around ``v``; the mass beyond the outermost midpoints goes to
+-max. ``jaxfp8._src.random.laws.rounded_law`` is the source of truth for the
distributions of ``jaxfp8.random``; this module asks it first and computes
the remaining cases (scaled initializer laws, mixtures, unsigned formats,
multivariate marginals) from the CDF itself: the distribution table's
(:mod:`jaxfp8._src.random.distributions`) where it has the law, SciPy's otherwise.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from jaxfp8._src.numerics import formats
from jaxfp8._src.random import distributions
from jaxfp8._src.random import laws
from jaxfp8.tools.report import worker as report_worker

Law = tuple[np.ndarray, np.ndarray, float]  # values, probabilities, P(NaN)

# The catalogue names real laws as scipy.stats does (``worker._law``); these
# are in the distribution table: its name and parameters for the spec's
# shape arguments (``loc`` and ``scale`` apply on top).
_IN_TABLE: dict[str, Callable[..., tuple[str, dict[str, float]]]] = {
    "uniform": lambda: ("uniform", {}),
    "norm": lambda: ("normal", {}),
    "truncnorm": lambda a, b: ("truncated_normal", {"lower": a, "upper": b}),
    "laplace": lambda: ("laplace", {}),
    "logistic": lambda: ("logistic", {}),
    "expon": lambda: ("exponential", {}),
    "gumbel_r": lambda: ("gumbel", {}),
    "cauchy": lambda: ("cauchy", {}),
    "lognorm": lambda s: ("lognormal", {"sigma": s}),
    "rayleigh": lambda: ("rayleigh", {"scale": 1.0}),
    "maxwell": lambda: ("maxwell", {}),
    "double_sided_maxwell": lambda: ("double_sided_maxwell",
                                     {"loc": 0.0, "scale": 1.0}),
    "weibull_min": lambda c: ("weibull_min",
                              {"scale": 1.0, "concentration": c}),
    "pareto": lambda b: ("pareto", {"b": b}),
    "triang": lambda c: ("triangular", {"left": 0.0, "mode": c, "right": 1.0}),
}


def _cdf_sf(spec: dict[str, Any]) -> tuple[Callable, Callable, float] | None:
  """(cdf, sf, median) of the real law, float64, or None without SciPy."""
  dist, args = spec["dist"], spec["args"]
  if dist in _IN_TABLE:
    name, params = _IN_TABLE[dist](*args)
    d = distributions.get(name)
    median = d.median(*distributions.param_values(d, params))
    return (lambda x: distributions.cdf(name, x, **params),
            lambda x: distributions.sf(name, x, **params), median)
  if dist == "ball3":  # one coordinate of the uniform 3-ball: 3/4 (1 - x^2)
    def cdf(x):
      x = np.clip(x, -1.0, 1.0)
      return 0.5 + 0.75 * (x - x**3 / 3)
    return cdf, lambda x: cdf(-np.asarray(x)), 0.0
  try:
    from scipy import stats  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  if dist == "orthogonal_entry":  # (1 + x) / 2 ~ Beta((n-1)/2, (n-1)/2)
    a = (args[0] - 1) / 2
    frozen = stats.beta(a, a, loc=-1.0, scale=2.0)
  else:
    frozen = getattr(stats, dist)(*args)
  return frozen.cdf, frozen.sf, float(frozen.median())


def _discrete(points: list[float], weights: list[float], fmt: formats.Format
              ) -> Law:
  rounded = report_worker.reference_cast(np.array(points), fmt.name)
  probs = np.zeros(len(fmt.values))
  nan = 0.0
  for r, w in zip(rounded, weights):
    if np.isnan(r):
      nan += w
    else:
      probs[np.searchsorted(fmt.values, r if r != 0 else 0.0)] += w
  return fmt.values, probs, nan


def _from_cdf(spec: dict[str, Any], fmt: formats.Format) -> Law | None:
  funcs = _cdf_sf(spec)
  if funcs is None:
    return None
  cdf, sf, median = funcs
  loc, scale = spec["loc"], spec["scale"]
  values = fmt.values
  mids = (values[1:] + values[:-1]) / 2
  lo = (np.concatenate([[-np.inf], mids]) - loc) / scale
  hi = (np.concatenate([mids, [np.inf]]) - loc) / scale
  nan = 0.0
  with np.errstate(all="ignore"):
    if not fmt.signed:  # E8M0: zero and negatives are NaN
      nan = float(cdf(np.array(-loc / scale)))
      lo[0] = -loc / scale
    # Differences of the CDF left of the median, of the survival function
    # right of it: each side keeps its tail probabilities accurate.
    left = np.asarray(cdf(hi), np.float64) - np.asarray(cdf(lo), np.float64)
    right = np.asarray(sf(lo), np.float64) - np.asarray(sf(hi), np.float64)
  probs = np.where(hi <= median, left, right)
  return values, np.clip(np.nan_to_num(probs), 0.0, 1.0), nan


def rounded_law(spec: dict[str, Any] | None, fmt: formats.Format,
                op: report_worker.Op | None = None) -> tuple[Law | None, str]:
  """The exact law of the rounded draw, and where it came from.

  Returns ``(None, reason)`` where the report can't compute it.
  """
  if spec is None:
    return None, "no closed-form law"
  dist = spec["dist"]
  if dist == "point":
    return _discrete([spec["args"][0]], [1.0], fmt), "exact"
  if dist == "rademacher":
    return _discrete([-1.0, 1.0], [0.5, 0.5], fmt), "exact"
  plain = spec["loc"] == 0 and spec["scale"] == 1 and not spec["atom0"]
  if (op is not None and op.kind == "sample" and plain
      and op.name == op.family):
    try:
      values, probs = laws.rounded_law(op.name, fmt, **dict(op.kwargs))
      return (np.asarray(values, np.float64), np.asarray(probs, np.float64),
              0.0), "jaxfp8._src.random.laws"
    except (TypeError, ValueError):
      pass  # a law laws.py doesn't cover (or E8M0): compute it below
  law = _from_cdf(spec, fmt)
  if law is None:
    return None, "needs SciPy"
  if spec["atom0"]:
    w = spec["atom0"]
    zero_values, zero_probs, zero_nan = _discrete([0.0], [1.0], fmt)
    values, probs, nan = law
    law = (values, (1 - w) * probs + w * zero_probs, (1 - w) * nan
           + w * zero_nan)
  return law, ("jaxfp8._src.random.distributions" if spec["dist"] in _IN_TABLE
               else "scipy")


# -- statistics ---------------------------------------------------------------------
def sample_distance(law: Law, counts: list[list[float]], n: int, nan: int
                    ) -> float:
  """TV distance between the sample's frequencies and the exact law.

  Values outside the format's finite values (Inf, or numbers a wrong dtype
  produced) count fully against the sample; NaN is one more outcome.

  >>> law = (np.array([0.0, 1.0]), np.array([0.25, 0.75]), 0.0)
  >>> sample_distance(law, [[0.0, 50], [1.0, 50]], 100, 0)
  0.25
  >>> sample_distance(law, [[1.0, 50]], 100, 50)  # half NaN
  0.5
  """
  values, probs, p_nan = law
  index = {float(v): i for i, v in enumerate(values)}
  freq = np.zeros(len(values))
  outside = 0.0
  for v, c in counts:
    i = index.get(float(v))
    if i is None:
      outside += c / n
    else:
      freq[i] += c / n
  # Outcomes: the format's values, "outside" (never right), NaN.
  return laws.total_variation(np.append(freq, [outside, nan / n]),
                              np.append(probs, [0.0, p_nan]))


def tv_floor(law: Law, n: int) -> float:
  """Expected TV of an exact sampler at ``n`` samples (its noise level).

  Per value, E|X/n - p| for X ~ Binomial(n, p): sqrt(2 p (1-p) / (pi n)) in
  the normal regime, about 2 p (1-p)^n where n p is small.
  """
  _, probs, p_nan = law
  p = np.append(probs, p_nan)
  p = p[p > 0]
  normal = np.sqrt(2 * p * (1 - p) / (math.pi * n))
  small = 2 * p * np.exp(n * np.log1p(-np.minimum(p, 0.5)))
  return 0.5 * float(np.where(n * p < 1, small, normal).sum())


def expected_distinct(law: Law, n: int) -> tuple[float, int]:
  """(expected distinct values of an exact sampler at n, values with p > 0)."""
  _, probs, _ = law
  p = probs[probs > 0]
  return float((-np.expm1(n * np.log1p(-np.minimum(p, 1 - 1e-16)))).sum()), int(p.size)
