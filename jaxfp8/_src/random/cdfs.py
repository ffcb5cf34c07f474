"""Float64 CDFs and survival functions of the laws that have one.

The math behind the distribution table (:mod:`jaxfp8._src.random.distributions`,
which names each law's functions here and checks its parameters): for every
law with a closed-form or special-function CDF, ``<law>_cdf(x, *params)`` and
``<law>_sf(x, *params) = 1 - cdf``, for a scalar float64 ``x`` and parameters
in jax.random's order, already checked against the law's domain; symmetric
laws have only their CDF here (their SF is its mirror image). The medians
that need a special function or care against overflow are here too
(``<law>_median``).

Each function is accurate in its own tail (the CDF on the left, the SF on the
right), from accurate elementary functions (``math.erfc`` in the normal tails)
or scipy.special's incomplete gamma and beta functions (gamma, beta,
chisquare, t, generalized_normal), so every probability built from them is
accurate to 1e-14 absolute or better: far below the 2^-32 that the samplers
are held to.

>>> ndtr(-10.0)
7.6198530241605...e-24
>>> cauchy_cdf(-1e300)  # 1 / (pi |x|): no cancellation in the left tail
3.183098861837...e-301
"""
from __future__ import annotations

import math

_SQRT2 = math.sqrt(2.0)


def ndtr(z: float) -> float:
  """The standard normal CDF ``P(N < z)``, accurate in the left tail.

  >>> ndtr(0.0)
  0.5
  """
  return 0.5 * math.erfc(-z / _SQRT2)


# -- laws with a closed-form CDF ----------------------------------------------

def normal_cdf(x):
  return ndtr(x)


def normal_sf(x):
  return ndtr(-x)


def _tn_mass(lower, upper):
  if lower > 0:  # both in the right tail: use the survival function
    return ndtr(-lower) - ndtr(-upper)
  return ndtr(upper) - ndtr(lower)


def truncated_normal_cdf(x, lower, upper):
  if x <= lower:
    return 0.0
  if x >= upper:
    return 1.0
  return _tn_mass(lower, x) / _tn_mass(lower, upper)


def truncated_normal_sf(x, lower, upper):
  if x <= lower:
    return 1.0
  if x >= upper:
    return 0.0
  return _tn_mass(x, upper) / _tn_mass(lower, upper)


def _unit(*values):
  """``values`` scaled by one power of two so the largest magnitude is in
  [0.5, 1): differences and products of them can't overflow, and subnormal
  spans become normal ones (exact: a power of two scales without rounding).
  Callers pass points inside the law's span, so none overflows."""
  e = math.frexp(max(abs(v) for v in values))[1]
  return [math.ldexp(v, -e) for v in values]


def uniform_cdf(x, minval, maxval):
  if x <= minval:
    return 0.0
  if x >= maxval:
    return 1.0
  x, a, b = _unit(x, minval, maxval)
  return min((x - a) / (b - a), 1.0)


def uniform_sf(x, minval, maxval):
  if x >= maxval:
    return 0.0
  if x <= minval:
    return 1.0
  x, a, b = _unit(x, minval, maxval)
  return min((b - x) / (b - a), 1.0)


def laplace_cdf(x):
  return 0.5 * math.exp(x) if x < 0 else 1.0 - 0.5 * math.exp(-x)


def logistic_cdf(x):
  return 1.0 / (1.0 + math.exp(-x)) if x > -700 else math.exp(x)


def exponential_sf(x):
  return 1.0 if x <= 0 else math.exp(-x)


def exponential_cdf(x):
  return 0.0 if x <= 0 else -math.expm1(-x)


def gumbel_cdf(x):
  return math.exp(-math.exp(-x)) if x > -700 else 0.0


def gumbel_sf(x):
  return -math.expm1(-math.exp(-x)) if x > -700 else 1.0


def cauchy_cdf(x):
  # atan2(1, -x) / pi: no cancellation in the left tail (1/(pi |x|)), where
  # 0.5 + atan(x) / pi loses every digit below 1e-16.
  return math.atan2(1.0, -x) / math.pi


def lognormal_cdf(x, sigma):
  return 0.0 if x <= 0 else ndtr(math.log(x) / sigma)


def lognormal_sf(x, sigma):
  return 1.0 if x <= 0 else ndtr(-math.log(x) / sigma)


def _power(t, k):
  """``t ** k`` for ``t >= 0``, capped at 1e300 (``exp(-t ** k)`` is 0 long
  before): Python's ``**`` raises OverflowError instead."""
  if t == 0:
    return 0.0
  return math.exp(min(k * math.log(t), 690.0))


def rayleigh_sf(x, scale):
  return 1.0 if x <= 0 else math.exp(-0.5 * _power(x / scale, 2))


def rayleigh_cdf(x, scale):
  return 0.0 if x <= 0 else -math.expm1(-0.5 * _power(x / scale, 2))


def maxwell_cdf(x):
  if x <= 0:
    return 0.0
  if x > 3:
    return 1.0 - maxwell_sf(x)
  if x < 1:  # erf(.) - x exp(.) cancels (F ~ x^3 near 0): the series
    return _maxwell_cdf_series(x)
  return math.erf(x / _SQRT2) - math.sqrt(2 / math.pi) * x * math.exp(-x * x / 2)


def _maxwell_cdf_series(x):
  """P(3/2, x^2/2), the regularized lower incomplete gamma, by its series
  z^s e^-z / Gamma(s) * sum_k z^k / (s (s+1) ... (s+k)), for 0 < x < 1."""
  z, s = x * x / 2, 1.5
  term = total = 1 / s
  for k in range(1, 60):
    term *= z / (s + k)
    total += term
    if term < total * 1e-17:
      break
  log_front = 3 * math.log(x) - 1.5 * math.log(2) - z
  return math.exp(log_front) / (math.sqrt(math.pi) / 2) * total


def maxwell_sf(x):
  if x <= 0:
    return 1.0
  if x > 40:  # below 1e-340: and x * exp(-x^2 / 2) would be inf * 0 far out
    return 0.0
  return math.erfc(x / _SQRT2) + math.sqrt(2 / math.pi) * x * math.exp(-x * x / 2)


def double_sided_maxwell_cdf(x, loc, scale):
  z = (x - loc) / scale
  return 0.5 * maxwell_sf(-z) if z < 0 else 0.5 + 0.5 * maxwell_cdf(z)


def double_sided_maxwell_sf(x, loc, scale):
  z = (x - loc) / scale  # not 2 * loc - x: that overflows for a huge loc
  return 0.5 * maxwell_sf(z) if z > 0 else 0.5 + 0.5 * maxwell_cdf(-z)


def weibull_min_sf(x, scale, concentration):
  return 1.0 if x <= 0 else math.exp(-_power(x / scale, concentration))


def weibull_min_cdf(x, scale, concentration):
  return 0.0 if x <= 0 else -math.expm1(-_power(x / scale, concentration))


def pareto_median(b):
  e = math.log(2) / b  # 2 ** (1 / b) overflows for b below ~1e-3
  return math.exp(e) if e < 709 else math.inf


def pareto_sf(x, b):
  return 1.0 if x <= 1 else math.exp(-b * math.log(x))


def pareto_cdf(x, b):
  return 0.0 if x <= 1 else -math.expm1(-b * math.log(x))


def triangular_cdf(x, left, mode, right):
  if x <= left:
    return 0.0
  if x >= right:
    return 1.0
  if x <= mode:
    # Scale-free, and as a product of two ratios <= 1: no overflow of the
    # squares, no underflow of a product that is not itself tiny.
    x, a, m, c = _unit(x, left, mode, right)
    return (x - a) / (c - a) * ((x - a) / (m - a))
  return 1.0 - triangular_sf(x, left, mode, right)


def triangular_sf(x, left, mode, right):
  if x >= right:
    return 0.0
  if x <= left:
    return 1.0
  if x > mode:
    x, a, m, c = _unit(x, left, mode, right)
    return (c - x) / (c - a) * ((c - x) / (c - m))
  return 1.0 - triangular_cdf(x, left, mode, right)


# -- laws whose CDF is a special function: scipy.special's, in float64 --------
# jax depends on scipy, so it comes with every jax install; it is imported on
# first use, not with jaxfp8.

def _special():
  import scipy.special  # pylint: disable=g-import-not-at-top
  return scipy.special


def gamma_cdf(x, a):
  return 0.0 if x <= 0 else float(_special().gammainc(a, x))


def gamma_sf(x, a):
  return 1.0 if x <= 0 else float(_special().gammaincc(a, x))


def gamma_median(a):
  return float(_special().gammaincinv(a, 0.5))


# chi2(df) = 2 gamma(df / 2).

def chisquare_cdf(x, df):
  return gamma_cdf(x / 2, df / 2)


def chisquare_sf(x, df):
  return gamma_sf(x / 2, df / 2)


def chisquare_median(df):
  return 2 * float(_special().gammaincinv(df / 2, 0.5))


def beta_cdf(x, a, b):
  return 0.0 if x <= 0 else 1.0 if x >= 1 else float(
      _special().betainc(a, b, x))


def beta_sf(x, a, b):
  return 1.0 if x <= 0 else 0.0 if x >= 1 else float(
      _special().betaincc(a, b, x))


def beta_median(a, b):
  return float(_special().betaincinv(a, b, 0.5))


def t_cdf(x, df):
  if x * x >= df:  # the tails: stdtr, an incomplete beta of df / (df + x^2)
    return float(_special().stdtr(df, x))
  # The center, where stdtr loses absolute accuracy (df = 1 above all):
  # I(1/2, df/2) of 1 - that.
  half = 0.5 * float(_special().betainc(0.5, df / 2, x * x / (df + x * x)))
  return 0.5 + half if x > 0 else 0.5 - half


def _gn_inner(x, p):
  """``P(|X| < x) = P(1/p, x^p)`` for x > 0 (``|X|^p ~ Gamma(1/p)``); where
  ``x^p`` underflows, its limit ``x / Gamma(1 + 1/p)`` (a mass near x)."""
  log_z = p * math.log(x)
  if log_z < -700:
    return math.exp(math.log(x) - float(_special().gammaln(1 + 1 / p)))
  return float(_special().gammainc(1 / p, math.exp(min(log_z, 690.0))))


def _gn_outer(x, p):  # P(|X| > x) = Q(1/p, x^p) for x > 0
  if p * math.log(x) < -700:
    return 1.0 - _gn_inner(x, p)
  return float(_special().gammaincc(1 / p, _power(x, p)))


def generalized_normal_cdf(x, p):
  return 0.5 if x == 0 else 0.5 * _gn_outer(-x, p) if x < 0 else (
      0.5 + 0.5 * _gn_inner(x, p))
