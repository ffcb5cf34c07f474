"""The distributions of jaxfp8.random: one table of what each law is.

For every jax.random sampler the table holds its numeric parameters (names in
jax.random's order, with defaults), their domain (finite, positive,
non-negative, probabilities, ordered pairs), whether its draws are positive
(all an unsigned format like E8M0 can hold), and, for the laws with a closed
form, the CDF, the survival function ``1 - F`` and the median. Everyone asks
here: the samplers check their parameters,
:func:`jaxfp8._src.random.laws.rounded_law` builds exact rounded laws, the
initializers' range check measures what a format holds, and the report judges
samples.

The scalar float64 CDFs and survival functions themselves are the math of
:mod:`jaxfp8._src.random.cdfs`; here they are named per law, checked
parameters are handed to them, and :func:`cdf` and :func:`sf` evaluate them
over arrays, each element on the accurate side of the median.

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

from jaxfp8._src.random import cdfs


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
      here (closed forms, or scipy.special's: :mod:`cdfs`).
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


def _sym_sf(cdf_fn):
  """The survival function of a law symmetric about 0: its CDF at ``-x``."""
  return lambda x, *a: cdf_fn(-x, *a)


def _zero(*_):
  return 0.0


D = Distribution
DISTRIBUTIONS: dict[str, Distribution] = {d.name: d for d in (
    # Laws with a closed-form CDF: the exact and table methods serve them.
    D("uniform", ("minval", "maxval"), {"minval": 0.0, "maxval": 1.0},
      ordered=(("minval", "maxval", True),), positive_if="minval",
      cdf=cdfs.uniform_cdf, sf=cdfs.uniform_sf,
      median=lambda a, b: a / 2 + b / 2),
    D("normal", cdf=cdfs.normal_cdf, sf=cdfs.normal_sf, median=_zero),
    D("truncated_normal", ("lower", "upper"),
      ordered=(("lower", "upper", True),), infinite=("lower", "upper"),
      positive_if="lower", cdf=cdfs.truncated_normal_cdf,
      sf=cdfs.truncated_normal_sf,
      median=lambda lo, hi: min(max(0.0, lo), hi)),
    D("laplace", cdf=cdfs.laplace_cdf, sf=_sym_sf(cdfs.laplace_cdf),
      median=_zero),
    D("logistic", cdf=cdfs.logistic_cdf, sf=_sym_sf(cdfs.logistic_cdf),
      median=_zero),
    D("exponential", positive_draws=True, cdf=cdfs.exponential_cdf,
      sf=cdfs.exponential_sf, median=lambda: math.log(2)),
    D("gumbel", cdf=cdfs.gumbel_cdf, sf=cdfs.gumbel_sf,
      median=lambda: -math.log(math.log(2))),
    D("cauchy", cdf=cdfs.cauchy_cdf, sf=_sym_sf(cdfs.cauchy_cdf),
      median=_zero),
    D("lognormal", ("sigma",), {"sigma": 1.0}, positive=("sigma",),
      positive_draws=True, cdf=cdfs.lognormal_cdf, sf=cdfs.lognormal_sf,
      median=lambda s: 1.0),
    D("rayleigh", ("scale",), positive=("scale",), positive_draws=True,
      cdf=cdfs.rayleigh_cdf, sf=cdfs.rayleigh_sf,
      median=lambda s: s * math.sqrt(2 * math.log(2))),
    D("maxwell", positive_draws=True, cdf=cdfs.maxwell_cdf,
      sf=cdfs.maxwell_sf, median=lambda: 1.5381722),
    D("double_sided_maxwell", ("loc", "scale"), positive=("scale",),
      cdf=cdfs.double_sided_maxwell_cdf, sf=cdfs.double_sided_maxwell_sf,
      median=lambda loc, s: loc),
    D("weibull_min", ("scale", "concentration"),
      positive=("scale", "concentration"), positive_draws=True,
      cdf=cdfs.weibull_min_cdf, sf=cdfs.weibull_min_sf,
      median=lambda s, k: s * math.log(2) ** (1 / k)),
    D("pareto", ("b",), positive=("b",), positive_draws=True,
      cdf=cdfs.pareto_cdf, sf=cdfs.pareto_sf, median=cdfs.pareto_median),
    D("triangular", ("left", "mode", "right"),
      ordered=(("left", "right", True), ("left", "mode", False),
               ("mode", "right", False)),
      positive_if="left", cdf=cdfs.triangular_cdf, sf=cdfs.triangular_sf,
      median=lambda a, m, c: m),
    # The same, from scipy.special (``library``).
    D("generalized_normal", ("p",), positive=("p",),
      cdf=cdfs.generalized_normal_cdf,
      sf=_sym_sf(cdfs.generalized_normal_cdf), median=_zero,
      library="scipy"),
    D("gamma", ("a",), positive=("a",), positive_draws=True,
      cdf=cdfs.gamma_cdf, sf=cdfs.gamma_sf, median=cdfs.gamma_median,
      library="scipy"),
    D("beta", ("a", "b"), positive=("a", "b"), positive_draws=True,
      cdf=cdfs.beta_cdf, sf=cdfs.beta_sf, median=cdfs.beta_median,
      library="scipy"),
    D("chisquare", ("df",), positive=("df",), positive_draws=True,
      cdf=cdfs.chisquare_cdf, sf=cdfs.chisquare_sf,
      median=cdfs.chisquare_median, library="scipy"),
    D("t", ("df",), positive=("df",), cdf=cdfs.t_cdf,
      sf=_sym_sf(cdfs.t_cdf), median=_zero, library="scipy"),
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
