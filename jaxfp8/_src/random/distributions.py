"""The distributions of jaxfp8.random: one table of what each law is.

For every jax.random sampler the table holds its numeric parameters (names in
jax.random's order, with defaults), their domain (finite, positive,
non-negative, probabilities, ordered pairs), whether its draws are positive
(all an unsigned format like E8M0 can hold), and, for the laws with a closed
form, the CDF, the survival function ``1 - F`` and the median. Everyone asks
here: the samplers check their parameters, :func:`jaxfp8._src.random.laws.rounded_law`
builds exact rounded laws, the initializers' range check measures what a
format holds, and the report judges samples.

CDFs and survival functions are float64, from accurate elementary functions
(``math.erfc`` in the normal tails) or scipy.special's incomplete gamma and
beta functions (gamma, beta, chisquare, t, generalized_normal), so every
probability built from them is accurate to 1e-14 absolute or better: far
below the 2^-32 that the samplers are held to.

>>> float(cdf("normal", -10.0))
7.6198530241605...e-24
>>> DISTRIBUTIONS["weibull_min"].positive
('scale', 'concentration')
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
from typing import Any, Callable

import numpy as np

_SQRT2 = math.sqrt(2.0)


def ndtr(z: float) -> float:
  """The standard normal CDF ``P(N < z)``, accurate in the left tail.

  >>> ndtr(0.0)
  0.5
  """
  return 0.5 * math.erfc(-z / _SQRT2)


# -- CDFs and survival functions (x scalar; params already checked) ----------

def _normal_cdf(x):
  return ndtr(x)


def _normal_sf(x):
  return ndtr(-x)


def _tn_mass(lower, upper):
  if lower > 0:  # both in the right tail: use the survival function
    return ndtr(-lower) - ndtr(-upper)
  return ndtr(upper) - ndtr(lower)


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


def _unit(*values):
  """``values`` scaled by one power of two so the largest magnitude is in
  [0.5, 1): differences and products of them can't overflow, and subnormal
  spans become normal ones (exact: a power of two scales without rounding).
  Callers pass points inside the law's span, so none overflows."""
  e = math.frexp(max(abs(v) for v in values))[1]
  return [math.ldexp(v, -e) for v in values]


def _uniform_cdf(x, minval, maxval):
  if x <= minval:
    return 0.0
  if x >= maxval:
    return 1.0
  x, a, b = _unit(x, minval, maxval)
  return min((x - a) / (b - a), 1.0)


def _uniform_sf(x, minval, maxval):
  if x >= maxval:
    return 0.0
  if x <= minval:
    return 1.0
  x, a, b = _unit(x, minval, maxval)
  return min((b - x) / (b - a), 1.0)


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
  # atan2(1, -x) / pi: no cancellation in the left tail (1/(pi |x|)), where
  # 0.5 + atan(x) / pi loses every digit below 1e-16.
  return math.atan2(1.0, -x) / math.pi


def _lognormal_cdf(x, sigma):
  return 0.0 if x <= 0 else ndtr(math.log(x) / sigma)


def _lognormal_sf(x, sigma):
  return 1.0 if x <= 0 else ndtr(-math.log(x) / sigma)


def _power(t, k):
  """``t ** k`` for ``t >= 0``, capped at 1e300 (``exp(-t ** k)`` is 0 long
  before): Python's ``**`` raises OverflowError instead."""
  if t == 0:
    return 0.0
  return math.exp(min(k * math.log(t), 690.0))


def _rayleigh_sf(x, scale):
  return 1.0 if x <= 0 else math.exp(-0.5 * _power(x / scale, 2))


def _rayleigh_cdf(x, scale):
  return 0.0 if x <= 0 else -math.expm1(-0.5 * _power(x / scale, 2))


def _maxwell_cdf(x):
  if x <= 0:
    return 0.0
  if x > 3:
    return 1.0 - _maxwell_sf(x)
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


def _maxwell_sf(x):
  if x <= 0:
    return 1.0
  if x > 40:  # below 1e-340: and x * exp(-x^2 / 2) would be inf * 0 far out
    return 0.0
  return math.erfc(x / _SQRT2) + math.sqrt(2 / math.pi) * x * math.exp(-x * x / 2)


def _dsm_cdf(x, loc, scale):
  z = (x - loc) / scale
  return 0.5 * _maxwell_sf(-z) if z < 0 else 0.5 + 0.5 * _maxwell_cdf(z)


def _dsm_sf(x, loc, scale):
  z = (x - loc) / scale  # not 2 * loc - x: that overflows for a huge loc
  return 0.5 * _maxwell_sf(z) if z > 0 else 0.5 + 0.5 * _maxwell_cdf(-z)


def _weibull_sf(x, scale, concentration):
  return 1.0 if x <= 0 else math.exp(-_power(x / scale, concentration))


def _weibull_cdf(x, scale, concentration):
  return 0.0 if x <= 0 else -math.expm1(-_power(x / scale, concentration))


def _pareto_median(b):
  e = math.log(2) / b  # 2 ** (1 / b) overflows for b below ~1e-3
  return math.exp(e) if e < 709 else math.inf


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
    # Scale-free, and as a product of two ratios <= 1: no overflow of the
    # squares, no underflow of a product that is not itself tiny.
    x, a, m, c = _unit(x, left, mode, right)
    return (x - a) / (c - a) * ((x - a) / (m - a))
  return 1.0 - _tri_sf(x, left, mode, right)


def _tri_sf(x, left, mode, right):
  if x >= right:
    return 0.0
  if x <= left:
    return 1.0
  if x > mode:
    x, a, m, c = _unit(x, left, mode, right)
    return (c - x) / (c - a) * ((c - x) / (c - m))
  return 1.0 - _tri_cdf(x, left, mode, right)


# Laws whose CDF is a special function: scipy.special's, in float64. jax
# depends on scipy, so it comes with every jax install; it is imported on
# first use (0.2 s), not with jaxfp8.

def _special():
  import scipy.special  # pylint: disable=g-import-not-at-top
  return scipy.special


def _gamma_cdf(x, a):
  return 0.0 if x <= 0 else float(_special().gammainc(a, x))


def _gamma_sf(x, a):
  return 1.0 if x <= 0 else float(_special().gammaincc(a, x))


def _beta_cdf(x, a, b):
  return 0.0 if x <= 0 else 1.0 if x >= 1 else float(
      _special().betainc(a, b, x))


def _beta_sf(x, a, b):
  return 1.0 if x <= 0 else 0.0 if x >= 1 else float(
      _special().betaincc(a, b, x))


def _t_cdf(x, df):
  if x * x >= df:  # the tails: stdtr, an incomplete beta of df / (df + x^2)
    return float(_special().stdtr(df, x))
  # The center, where stdtr loses 1e-13 (df = 1): I(1/2, df/2) of 1 - that.
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


def _gn_cdf(x, p):
  return 0.5 if x == 0 else 0.5 * _gn_outer(-x, p) if x < 0 else (
      0.5 + 0.5 * _gn_inner(x, p))


def _sym_sf(cdf_fn):
  return lambda x, *a: cdf_fn(-x, *a)


def _zero(*_):
  return 0.0


# -- the table -----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Distribution:
  """What one jax.random sampler draws, and what its parameters may be.

  Attributes:
    name: the jax.random sampler's name.
    params: names of its numeric parameters, in jax.random's order.
    defaults: default values of those parameters (only those with one).
    positive: parameters that must be > 0.
    nonnegative: parameters that must be >= 0.
    probabilities: parameters that must lie in [0, 1].
    ordered: pairs ``(a, b, strict)``: ``a < b`` (strict) or ``a <= b``.
    infinite: parameters that may be infinite (the others must be finite).
    positive_draws: whether every draw is > 0 (almost surely).
    positive_if: a parameter whose being >= 0 makes every draw > 0.
    cdf: ``cdf(x, *params)`` for a scalar float64 ``x``; None without one
      here (closed forms, or scipy.special's).
    sf: ``sf(x, *params) = 1 - cdf(x, *params)``, accurate in the right tail.
    median: ``median(*params)``; below it the CDF is used, above it the SF.
    library: the package the CDF needs beyond NumPy (``"scipy"``), or None.
  """
  name: str
  params: tuple[str, ...] = ()
  defaults: dict[str, float] = dataclasses.field(default_factory=dict,
                                                 hash=False)
  positive: tuple[str, ...] = ()
  nonnegative: tuple[str, ...] = ()
  probabilities: tuple[str, ...] = ()
  ordered: tuple[tuple[str, str, bool], ...] = ()
  infinite: tuple[str, ...] = ()
  positive_draws: bool = False
  positive_if: str | None = None
  cdf: Callable[..., float] | None = None
  sf: Callable[..., float] | None = None
  median: Callable[..., float] | None = None
  library: str | None = None

  @property
  def has_cdf(self) -> bool:
    """Whether the law has a CDF here and its library is installed."""
    return self.cdf is not None and (self.library is None
                                     or library_available(self.library))


@functools.lru_cache(maxsize=None)
def library_available(name: str) -> bool:
  """Whether the package ``name`` can be imported (found, not imported)."""
  return importlib.util.find_spec(name) is not None


D = Distribution
DISTRIBUTIONS: dict[str, Distribution] = {d.name: d for d in (
    # Laws with a closed-form CDF: the exact and table methods serve them.
    D("uniform", ("minval", "maxval"), {"minval": 0.0, "maxval": 1.0},
      ordered=(("minval", "maxval", True),), positive_if="minval",
      cdf=_uniform_cdf, sf=_uniform_sf, median=lambda a, b: a / 2 + b / 2),
    D("normal", cdf=_normal_cdf, sf=_normal_sf, median=_zero),
    D("truncated_normal", ("lower", "upper"),
      ordered=(("lower", "upper", True),), infinite=("lower", "upper"),
      positive_if="lower", cdf=_tn_cdf, sf=_tn_sf,
      median=lambda lo, hi: min(max(0.0, lo), hi)),
    D("laplace", cdf=_laplace_cdf, sf=_sym_sf(_laplace_cdf), median=_zero),
    D("logistic", cdf=_logistic_cdf, sf=_sym_sf(_logistic_cdf),
      median=_zero),
    D("exponential", positive_draws=True, cdf=_exp_cdf, sf=_exp_sf,
      median=lambda: math.log(2)),
    D("gumbel", cdf=_gumbel_cdf, sf=_gumbel_sf,
      median=lambda: -math.log(math.log(2))),
    D("cauchy", cdf=_cauchy_cdf, sf=_sym_sf(_cauchy_cdf), median=_zero),
    D("lognormal", ("sigma",), {"sigma": 1.0}, positive=("sigma",),
      positive_draws=True, cdf=_lognormal_cdf, sf=_lognormal_sf,
      median=lambda s: 1.0),
    D("rayleigh", ("scale",), positive=("scale",), positive_draws=True,
      cdf=_rayleigh_cdf, sf=_rayleigh_sf,
      median=lambda s: s * math.sqrt(2 * math.log(2))),
    D("maxwell", positive_draws=True, cdf=_maxwell_cdf, sf=_maxwell_sf,
      median=lambda: 1.5381722),
    D("double_sided_maxwell", ("loc", "scale"), positive=("scale",),
      cdf=_dsm_cdf, sf=_dsm_sf,
      median=lambda loc, s: loc),
    D("weibull_min", ("scale", "concentration"),
      positive=("scale", "concentration"), positive_draws=True,
      cdf=_weibull_cdf, sf=_weibull_sf,
      median=lambda s, k: s * math.log(2) ** (1 / k)),
    D("pareto", ("b",), positive=("b",), positive_draws=True,
      cdf=_pareto_cdf, sf=_pareto_sf, median=_pareto_median),
    D("triangular", ("left", "mode", "right"),
      ordered=(("left", "right", True), ("left", "mode", False),
               ("mode", "right", False)),
      positive_if="left", cdf=_tri_cdf, sf=_tri_sf,
      median=lambda a, m, c: m),
    # The same, from scipy.special (``library``).
    D("generalized_normal", ("p",), positive=("p",), cdf=_gn_cdf,
      sf=_sym_sf(_gn_cdf), median=_zero, library="scipy"),
    D("gamma", ("a",), positive=("a",), positive_draws=True, cdf=_gamma_cdf,
      sf=_gamma_sf, median=lambda a: float(_special().gammaincinv(a, 0.5)),
      library="scipy"),
    D("beta", ("a", "b"), positive=("a", "b"), positive_draws=True,
      cdf=_beta_cdf, sf=_beta_sf,
      median=lambda a, b: float(_special().betaincinv(a, b, 0.5)),
      library="scipy"),
    D("chisquare", ("df",), positive=("df",), positive_draws=True,
      cdf=lambda x, df: _gamma_cdf(x / 2, df / 2),  # chi2(df) = 2 gamma(df/2)
      sf=lambda x, df: _gamma_sf(x / 2, df / 2),
      median=lambda df: 2 * float(_special().gammaincinv(df / 2, 0.5)),
      library="scipy"),
    D("t", ("df",), positive=("df",), cdf=_t_cdf, sf=_sym_sf(_t_cdf),
      median=_zero, library="scipy"),
    # Laws without one: jax.random's float32 draw, rounded (cast).
    D("loggamma", ("a",), positive=("a",)),
    D("f", ("dfnum", "dfden"), positive=("dfnum", "dfden"),
      positive_draws=True),
    D("wald", ("mean",), positive=("mean",), positive_draws=True),
    D("dirichlet", ("alpha",), positive=("alpha",), positive_draws=True),
    D("multivariate_normal", ("mean", "cov")),
    D("ball", ("p",), positive=("p",)),
    D("orthogonal"),
    # Discrete laws.
    D("bernoulli", ("p",), probabilities=("p",)),
    D("binomial", ("n", "p"), nonnegative=("n",), probabilities=("p",)),
    D("multinomial", ("n", "p"), nonnegative=("n", "p")),
    D("rademacher"),
)}
del D


def get(dist: str | Distribution) -> Distribution:
  """Looks up a distribution by its jax.random name.

  Raises:
    ValueError: for a name that is not in the table.
  """
  if isinstance(dist, Distribution):
    return dist
  if dist not in DISTRIBUTIONS:
    raise ValueError(f"unknown distribution {dist!r}; known: "
                     f"{', '.join(DISTRIBUTIONS)}")
  return DISTRIBUTIONS[dist]


def with_cdf(dist: str | Distribution) -> Distribution:
  """A distribution that has a CDF here, by its jax.random name.

  Raises:
    ValueError: for a name without a CDF here (the message lists them).
    ImportError: for a law whose CDF needs a library that is not installed.
  """
  d = DISTRIBUTIONS.get(dist) if isinstance(dist, str) else dist
  if d is not None and d.cdf is not None and not d.has_cdf:
    raise ImportError(f"the CDF of `{d.name}` is {d.library}'s, and "
                      f"{d.library} is not installed (`pip install "
                      f"{d.library}`; jax depends on it)")
  if d is None or not d.has_cdf:
    known = ", ".join(n for n, e in DISTRIBUTIONS.items() if e.has_cdf)
    raise ValueError(f"no closed-form CDF for {dist!r}; distributions with "
                     f"one: {known}")
  return d


# -- parameter domains ---------------------------------------------------------

def _shown(a: np.ndarray, bad: np.ndarray) -> Any:
  return a if a.ndim == 0 else a[bad][:4]


def check_domain(dist: str | Distribution, values: dict[str, Any], *,
                 fn: str | None = None) -> None:
  """Raises when a parameter value is outside its distribution's domain.

  Every concrete value is checked element by element; ``None`` (a traced
  parameter) is not. Each parameter must be finite (NaN never passes; the
  bounds of truncated_normal may be infinite) and satisfy its sign or range
  condition, then each ordered pair its order.

  Args:
    dist: the distribution (a name or a :class:`Distribution`).
    values: parameter name -> value (a number or array; None to skip).
    fn: the function named in errors (default: the distribution's name).

  Raises:
    ValueError: naming ``fn``, the parameter, the rule and the bad values.

  >>> check_domain("lognormal", {"sigma": 0.0})
  Traceback (most recent call last):
  ...
  ValueError: `sigma` argument to `lognormal` must be positive, got 0.0
  """
  d = get(dist)
  fn = fn or d.name
  arrays = {k: None if v is None else np.asarray(v, np.float64)
            for k, v in values.items()}
  for arg, a in arrays.items():
    if a is None:
      continue
    bad = np.isnan(a) if arg in d.infinite else ~np.isfinite(a)
    if bad.any():
      raise ValueError(f"`{arg}` argument to `{fn}` must be "
                       f"{'not NaN' if arg in d.infinite else 'finite'}, got "
                       f"{_shown(a, bad)}")
    for names, ok, want in ((d.positive, a > 0, "positive"),
                            (d.nonnegative, a >= 0, "non-negative"),
                            (d.probabilities, (a >= 0) & (a <= 1),
                             "in [0, 1]")):
      if arg in names and not np.all(ok):
        raise ValueError(f"`{arg}` argument to `{fn}` must be {want}, got "
                         f"{_shown(a, ~ok)}")
  for lo, hi, strict in d.ordered:
    a, b = arrays.get(lo), arrays.get(hi)
    if a is None or b is None:
      continue
    if not np.all(a < b if strict else a <= b):
      rel = "less than" if strict else "at most"
      every = " (every element)" if a.ndim or b.ndim else ""
      raise ValueError(f"`{lo}` argument to `{fn}` must be {rel} `{hi}`"
                       f"{every}, got {lo}={a} and {hi}={b}")


def param_values(dist: str | Distribution, params: dict[str, Any]
                 ) -> tuple[float, ...]:
  """A law's parameters as floats in jax.random's order, defaults filled in
  and the domain checked.

  Raises:
    TypeError: for an unknown or a missing parameter.
    ValueError: for a value outside the domain (see :func:`check_domain`).

  >>> param_values("uniform", {"maxval": 4})
  (0.0, 4.0)
  """
  d = get(dist)
  unknown = set(params) - set(d.params)
  if unknown:
    raise TypeError(f"{d.name} has parameters {d.params}, got unknown "
                    f"{sorted(unknown)}")
  out = []
  for name in d.params:
    value = params.get(name, d.defaults.get(name))
    if value is None:
      raise TypeError(f"{d.name} needs the parameter {name!r}")
    out.append(float(value))
  check_domain(d, dict(zip(d.params, out)))
  return tuple(out)


# -- vectorized CDF and survival function --------------------------------------

def _evaluate(dist: str | Distribution, x: Any, params: dict[str, Any],
              upper: bool) -> np.ndarray:
  """``cdf`` (or with ``upper``, ``sf``) at every element of ``x``: the side
  of the median each element is on picks the accurate one of the two."""
  d = with_cdf(dist)
  p = param_values(d, params)
  x = np.asarray(x, np.float64)
  med = d.median(*p)
  # Infinities by definition (some closed forms give inf * 0 there).
  finite = np.where(np.isfinite(x), x, med)
  below = finite <= med
  out = np.empty(x.shape, np.float64)
  same, other = (d.sf, d.cdf) if upper else (d.cdf, d.sf)
  for i in np.ndindex(x.shape):
    v = float(finite[i])
    out[i] = same(v, *p) if below[i] != upper else 1.0 - other(v, *p)
  out = np.where(np.isposinf(x), 0.0 if upper else 1.0, out)
  return np.where(np.isneginf(x), 1.0 if upper else 0.0, out)


def cdf(dist: str | Distribution, x: Any, **params: float) -> np.ndarray:
  """The CDF of ``dist`` at ``x`` (float64), accurate in both tails.

  >>> float(cdf("normal", -10.0))
  7.6198530241605...e-24
  >>> cdf("uniform", [-1.0, 0.25, np.inf])
  array([0.  , 0.25, 1.  ])
  """
  return _evaluate(dist, x, params, upper=False)


def sf(dist: str | Distribution, x: Any, **params: float) -> np.ndarray:
  """The survival function ``1 - cdf`` of ``dist`` at ``x``, accurate in
  both tails.

  >>> float(sf("normal", 10.0))
  7.6198530241605...e-24
  """
  return _evaluate(dist, x, params, upper=True)
