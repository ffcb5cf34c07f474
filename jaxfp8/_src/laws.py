"""Exact laws of real-valued draws rounded into a format, in float64.

A sample of ``jaxfp8.random.<dist>(..., fmt)`` is meant to be the real-valued
draw rounded to the nearest value of ``fmt`` (ties to even, saturating). For a
distribution with a CDF, the probability of each finite value ``v`` of the
format is therefore the mass between the midpoints that surround it:

    P(v_i) = F(m_i) - F(m_{i-1}),    m_i = (v_i + v_{i+1}) / 2,

with ``m_{-1} = -inf`` and ``m_{last} = +inf`` (saturation sends the outer mass
to -max and +max). Ties are single points and have probability zero, so the
tie rule never matters. Signed zeros are one value.

Each distribution comes with its CDF and its survival function ``1 - F``,
both in float64 from accurate elementary functions (``math.erfc`` in the
normal tails), so every probability is accurate to about 1e-16 absolute: far
below the 2^-32 that the samplers are held to.

>>> values, probs = rounded_law("uniform", "e2m1")
>>> [(float(v), float(p)) for v, p in zip(values, probs) if p]
[(0.0, 0.25), (0.5, 0.5), (1.0, 0.25)]
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable

import numpy as np

from jaxfp8._src import formats

_SQRT2 = math.sqrt(2.0)


def _vec(f: Callable[..., float]) -> Callable[..., np.ndarray]:
  """A scalar float64 function mapped over an array (args after x scalar)."""
  def g(x, *args):
    x = np.asarray(x, np.float64)
    out = np.array([f(float(v), *args) for v in x.ravel()], np.float64)
    return out.reshape(x.shape)
  return g


# -- CDFs and survival functions (x scalar; params already validated) ---------

def _ndtr(z: float) -> float:  # P(N < z), accurate in the left tail
  return 0.5 * math.erfc(-z / _SQRT2)


def _normal_cdf(x):
  return _ndtr(x)


def _normal_sf(x):
  return _ndtr(-x)


def _tn_mass(lower, upper):
  if lower > 0:  # both in the right tail: use the survival function
    return _ndtr(-lower) - _ndtr(-upper)
  return _ndtr(upper) - _ndtr(lower)


def _tn_cdf(x, lower, upper):
  if x <= lower:
    return 0.0
  if x >= upper:
    return 1.0
  return _tn_mass(lower, x) / _tn_mass(lower, upper)


def _tn_sf(x, lower, upper):
  if x <= lower:
    return 1.0
  if x >= upper:
    return 0.0
  return _tn_mass(x, upper) / _tn_mass(lower, upper)


def _uniform_cdf(x, minval, maxval):
  return min(max((x - minval) / (maxval - minval), 0.0), 1.0)


def _uniform_sf(x, minval, maxval):
  return min(max((maxval - x) / (maxval - minval), 0.0), 1.0)


def _laplace_cdf(x):
  return 0.5 * math.exp(x) if x < 0 else 1.0 - 0.5 * math.exp(-x)


def _logistic_cdf(x):
  return 1.0 / (1.0 + math.exp(-x)) if x > -700 else math.exp(x)


def _exp_sf(x):
  return 1.0 if x <= 0 else math.exp(-x)


def _exp_cdf(x):
  return 0.0 if x <= 0 else -math.expm1(-x)


def _gumbel_cdf(x):
  return math.exp(-math.exp(-x)) if x > -700 else 0.0


def _gumbel_sf(x):
  return -math.expm1(-math.exp(-x)) if x > -700 else 1.0


def _cauchy_cdf(x):
  return 0.5 + math.atan(x) / math.pi if x <= 0 else math.atan2(1.0, -x) / math.pi


def _lognormal_cdf(x, sigma):
  return 0.0 if x <= 0 else _ndtr(math.log(x) / sigma)


def _lognormal_sf(x, sigma):
  return 1.0 if x <= 0 else _ndtr(-math.log(x) / sigma)


def _rayleigh_sf(x, scale):
  return 1.0 if x <= 0 else math.exp(-0.5 * (x / scale) ** 2)


def _rayleigh_cdf(x, scale):
  return 0.0 if x <= 0 else -math.expm1(-0.5 * (x / scale) ** 2)


def _maxwell_cdf(x):
  if x <= 0:
    return 0.0
  if x > 3:
    return 1.0 - _maxwell_sf(x)
  return math.erf(x / _SQRT2) - math.sqrt(2 / math.pi) * x * math.exp(-x * x / 2)


def _maxwell_sf(x):
  if x <= 0:
    return 1.0
  return math.erfc(x / _SQRT2) + math.sqrt(2 / math.pi) * x * math.exp(-x * x / 2)


def _dsm_cdf(x, loc, scale):
  z = (x - loc) / scale
  return 0.5 * _maxwell_sf(-z) if z < 0 else 0.5 + 0.5 * _maxwell_cdf(z)


def _weibull_sf(x, scale, concentration):
  return 1.0 if x <= 0 else math.exp(-((x / scale) ** concentration))


def _weibull_cdf(x, scale, concentration):
  return 0.0 if x <= 0 else -math.expm1(-((x / scale) ** concentration))


def _pareto_sf(x, b):
  return 1.0 if x <= 1 else math.exp(-b * math.log(x))


def _pareto_cdf(x, b):
  return 0.0 if x <= 1 else -math.expm1(-b * math.log(x))


def _tri_cdf(x, left, mode, right):
  if x <= left:
    return 0.0
  if x >= right:
    return 1.0
  if x <= mode:
    return (x - left) ** 2 / ((right - left) * (mode - left))
  return 1.0 - _tri_sf(x, left, mode, right)


def _tri_sf(x, left, mode, right):
  if x >= right:
    return 0.0
  if x <= left:
    return 1.0
  if x > mode:
    return (right - x) ** 2 / ((right - left) * (right - mode))
  return 1.0 - _tri_cdf(x, left, mode, right)


def _sym_sf(cdf):
  return lambda x, *a: cdf(-x, *a)


@dataclasses.dataclass(frozen=True)
class Distribution:
  """A continuous distribution with its CDF and survival function.

  Attributes:
    name: the jax.random sampler's name.
    params: names of its numeric parameters, in jax.random's order.
    defaults: default values of those parameters (None: required).
    cdf: ``cdf(x, *params)`` for a scalar float64 ``x``.
    sf: ``sf(x, *params) = 1 - cdf(x, *params)``, accurate in the right tail.
    median: ``median(*params)``; below it the CDF is used, above it the SF.
  """
  name: str
  params: tuple[str, ...]
  defaults: tuple[float | None, ...]
  cdf: Callable[..., float]
  sf: Callable[..., float]
  median: Callable[..., float]


def _zero(*_):
  return 0.0


DISTRIBUTIONS: dict[str, Distribution] = {d.name: d for d in (
    Distribution("uniform", ("minval", "maxval"), (0.0, 1.0), _uniform_cdf,
                 _uniform_sf, lambda a, b: (a + b) / 2),
    Distribution("normal", (), (), _normal_cdf, _normal_sf, _zero),
    Distribution("truncated_normal", ("lower", "upper"), (None, None),
                 _tn_cdf, _tn_sf, lambda lo, hi: min(max(0.0, lo), hi)),
    Distribution("laplace", (), (), _laplace_cdf, _sym_sf(_laplace_cdf),
                 _zero),
    Distribution("logistic", (), (), _logistic_cdf, _sym_sf(_logistic_cdf),
                 _zero),
    Distribution("exponential", (), (), _exp_cdf, _exp_sf,
                 lambda: math.log(2)),
    Distribution("gumbel", (), (), _gumbel_cdf, _gumbel_sf,
                 lambda: -math.log(math.log(2))),
    Distribution("cauchy", (), (), _cauchy_cdf, _sym_sf(_cauchy_cdf), _zero),
    Distribution("lognormal", ("sigma",), (1.0,), _lognormal_cdf,
                 _lognormal_sf, lambda s: 1.0),
    Distribution("rayleigh", ("scale",), (None,), _rayleigh_cdf, _rayleigh_sf,
                 lambda s: s * math.sqrt(2 * math.log(2))),
    Distribution("maxwell", (), (), _maxwell_cdf, _maxwell_sf,
                 lambda: 1.5381722),
    Distribution("double_sided_maxwell", ("loc", "scale"), (None, None),
                 _dsm_cdf, lambda x, loc, s: _dsm_cdf(2 * loc - x, loc, s),
                 lambda loc, s: loc),
    Distribution("weibull_min", ("scale", "concentration"), (None, None),
                 _weibull_cdf, _weibull_sf,
                 lambda s, k: s * math.log(2) ** (1 / k)),
    Distribution("pareto", ("b",), (None,), _pareto_cdf, _pareto_sf,
                 lambda b: 2 ** (1 / b)),
    Distribution("triangular", ("left", "mode", "right"), (None, None, None),
                 _tri_cdf, _tri_sf, lambda a, m, c: m),
)}


def get(dist: str | Distribution) -> Distribution:
  """Looks up a distribution by its jax.random name.

  Raises:
    ValueError: for a name without a CDF here (the message lists them).
  """
  if isinstance(dist, Distribution):
    return dist
  if dist not in DISTRIBUTIONS:
    raise ValueError(f"no closed-form CDF for {dist!r}; distributions with "
                     f"one: {', '.join(DISTRIBUTIONS)}")
  return DISTRIBUTIONS[dist]


def _param_values(d: Distribution, params: dict[str, Any]) -> tuple[float, ...]:
  unknown = set(params) - set(d.params)
  if unknown:
    raise TypeError(f"{d.name} has parameters {d.params}, got unknown "
                    f"{sorted(unknown)}")
  out = []
  for name, default in zip(d.params, d.defaults):
    value = params.get(name, default)
    if value is None:
      raise TypeError(f"{d.name} needs the parameter {name!r}")
    out.append(float(value))
  _check_domain(d.name, dict(zip(d.params, out)))
  return tuple(out)


# Parameters that must be > 0, and ordered pairs (a, b, strict: a < b).
_POSITIVE = ("sigma", "scale", "concentration", "b")
_ORDERED = (("minval", "maxval", True), ("lower", "upper", True),
            ("left", "right", True), ("left", "mode", False),
            ("mode", "right", False))


def _check_domain(dist: str, p: dict[str, float]) -> None:
  """ValueError naming the parameter when ``p`` is outside the law's domain.

  Every parameter must be finite, except truncated_normal's bounds, which may
  be infinite (one-sided or no truncation).
  """
  for name, v in p.items():
    if math.isnan(v) or (math.isinf(v) and dist != "truncated_normal"):
      raise ValueError(f"`{name}` argument to `{dist}` must be finite, got "
                       f"{v}")
    if name in _POSITIVE and not v > 0:
      raise ValueError(f"`{name}` argument to `{dist}` must be positive, got "
                       f"{v}")
  for a, b, strict in _ORDERED:
    if a in p and b in p and not (p[a] < p[b] if strict else p[a] <= p[b]):
      rel = "less than" if strict else "at most"
      raise ValueError(f"`{a}` argument to `{dist}` must be {rel} `{b}`, got "
                       f"{a}={p[a]} and {b}={p[b]}")


def cdf(dist: str, x: Any, **params: float) -> np.ndarray:
  """The CDF of ``dist`` at ``x`` (float64), accurate in both tails.

  >>> float(cdf("normal", -10.0))
  7.6198530241605...e-24
  """
  d = get(dist)
  p = _param_values(d, params)
  x = np.asarray(x, np.float64)
  med = d.median(*p)
  lo = _vec(d.cdf)(np.minimum(x, med), *p)
  hi = 1.0 - _vec(d.sf)(np.maximum(x, med), *p)
  return np.where(x <= med, lo, hi)


def boundaries(fmt: formats.FormatLike) -> np.ndarray:
  """Rounding boundaries of a format: midpoints between neighbouring values.

  >>> boundaries("e2m1")[:4]
  array([-5.  , -3.5 , -2.5 , -1.75])
  """
  v = formats.get(fmt).values
  return (v[1:] + v[:-1]) / 2


@functools.lru_cache(maxsize=512)
def _rounded_law(name: str, fmt_name: str, p: tuple[float, ...]):
  d = DISTRIBUTIONS[name]
  fmt = formats.get(fmt_name)
  if not fmt.signed:
    raise ValueError(f"rounded laws need a signed format with a zero, got "
                     f"{fmt.name}")
  m = boundaries(fmt)
  med = d.median(*p)
  # Below the median differences of the CDF, above it of the survival
  # function, so tail probabilities keep their relative accuracy.
  left = np.array([d.cdf(x, *p) for x in m] + [1.0])
  right = np.array([1.0] + [d.sf(x, *p) for x in m])
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
  probs /= probs.sum()
  values = fmt.values.copy()
  for a in (values, probs):
    a.setflags(write=False)
  return values, probs


def rounded_law(dist: str, fmt: formats.FormatLike, **params: float
                ) -> tuple[np.ndarray, np.ndarray]:
  """The exact law of a draw of ``dist`` rounded to nearest in ``fmt``.

  Args:
    dist: a jax.random sampler name with a CDF (see :data:`DISTRIBUTIONS`).
    fmt: a signed narrow format (name, alias, dtype or Format).
    **params: the distribution's parameters, by jax.random's names
      (``minval``, ``maxval``, ``lower``, ``upper``, ``sigma``, ``scale``...).

  Returns:
    ``(values, probs)``: every finite value of the format (sorted, zero once)
    and its probability, both float64; ``probs`` sums to 1.

  Raises:
    ValueError: for a distribution without a CDF here or an unsigned format.
    TypeError: for a missing or unknown parameter.

  >>> v, p = rounded_law("normal", "e4m3")
  >>> float(p[v == 0][0])  # |x| < 2^-10: the zero bucket
  0.00077918401756...
  >>> float(p[v == 448][0])  # everything beyond 432 saturates to max
  0.0
  """
  d = get(dist)
  return _rounded_law(d.name, formats.get(fmt).name, _param_values(d, params))


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
  """Total variation distance ``sum |p - q| / 2`` between two laws."""
  return float(np.abs(np.asarray(p) - np.asarray(q)).sum() / 2)


def chi_square(counts: np.ndarray, probs: np.ndarray, *, min_expected: float = 5.0
               ) -> tuple[float, int, float]:
  """Pearson's chi-square of counts against a law, small bins pooled.

  Bins whose expected count is below ``min_expected`` are pooled with their
  neighbours (in value order) until each pooled bin reaches it, so tails are
  tested as a whole instead of being dropped. A count in a bin of probability
  zero gives an infinite statistic.

  Returns:
    ``(statistic, degrees of freedom, p-value)``.
  """
  from scipy import stats  # pylint: disable=g-import-not-at-top
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
