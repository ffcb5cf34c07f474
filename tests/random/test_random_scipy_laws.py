"""gamma, beta, t, chisquare and generalized_normal: the laws whose CDF is
scipy.special's, sampled by ``exact`` and ``table``.

- ``laws.rounded_law`` against ``scipy.stats`` (the same special functions
  behind another interface: parameterization, tails and sides of the median);
- counts of 2^20 samples (fixed keys) against the exact rounded law
  (``exact``) and the table's own law (``table``), chi-square with small bins
  pooled and total variation, in the five formats of tests/random/test_random.py;
- extreme and bad parameters: a law, or an error naming the law and argument;
- traced and per-element parameters, E8M0, and scipy missing: ``cast``.

The samplers compile once per law and format (their tables' sizes and pools
are static), so the sampling tests are spread out: ``exact`` runs each law
in two formats, ``table`` at its default 16 bits each law in a third, and
``table`` at 8 bits (one lookup per sample: one compilation per format)
every case in every format; every method runs in all five formats.
"""
import itertools
import os
import pathlib
import subprocess
import sys
import zlib

import jax
import numpy as np
import pytest
from scipy import stats

import jaxfp8
from jaxfp8 import formats
from jaxfp8._src.random import distributions
from jaxfp8._src.random import draw as draw_lib
from jaxfp8._src.random import laws
from jaxfp8._src.random import table_method
from stats import chi_square
from stats import scipy_law

R = jaxfp8.random
FORMATS = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float4_e2m1fn",
           "float6_e2m3fn")
N = 2**20
SCIPY_LAWS = ("gamma", "beta", "t", "chisquare", "generalized_normal")

# (sampler, parameters in jax.random's order, the law in scipy.stats); skewed
# gammas and betas, Cauchy-tailed t, chi-square 1 (a pole at 0), p = 1, 4.
CASES = [
    ("gamma", {"a": 0.5}, stats.gamma(0.5)),
    ("gamma", {"a": 5.0}, stats.gamma(5.0)),
    ("beta", {"a": 0.5, "b": 0.5}, stats.beta(0.5, 0.5)),
    ("beta", {"a": 2.0, "b": 5.0}, stats.beta(2.0, 5.0)),
    ("t", {"df": 1.0}, stats.t(1.0)),
    ("t", {"df": 5.0}, stats.t(5.0)),
    ("chisquare", {"df": 1.0}, stats.chi2(1.0)),
    ("chisquare", {"df": 10.0}, stats.chi2(10.0)),
    ("generalized_normal", {"p": 1.0}, stats.gennorm(1.0)),
    ("generalized_normal", {"p": 4.0}, stats.gennorm(4.0)),
]


def case_id(case):
  return case[0] + "".join(f"-{v:g}" for v in case[1].values())


# exact, and table at its default 16 bits, compile once per law and format:
# exact samples case k in format k mod 5 (each law in two formats, each
# format two laws), table the first case of each law in the formats exact
# leaves it.
EXACT_RUNS = [(c, FORMATS[k % 5]) for k, c in enumerate(CASES)]
# (case, table_bits, formats): 8 bits is a pure lookup (one compilation per
# format), so every case runs in every format.
TABLE_RUNS = [(c, 8, FORMATS) for c in CASES] + [
    (CASES[k], 16, (FORMATS[(k + 2) % 5],)) for k in range(0, len(CASES), 2)]


def draw(case, fmt, method, table_bits=None, key=None):
  name, params, _ = case
  if key is None:
    key = jax.random.key(zlib.crc32(f"{case_id(case)}{method}{table_bits}"
                                    f"{fmt}".encode()))
  return getattr(R, name)(key, *params.values(), (N,), fmt, method=method,
                          table_bits=table_bits)


def codes(x) -> np.ndarray:
  return np.asarray(x.codes if isinstance(x, jaxfp8.CodeArray)
                    else np.asarray(x).view(np.uint8))


def counts_of(x, fmt) -> np.ndarray:
  """Counts of each of ``fmt.values`` (every code must be one of them)."""
  f = formats.get(fmt)
  by_code = np.bincount(codes(x).ravel(), minlength=256)
  index = {int(c): i for i, c in enumerate(f.codes)}
  assert set(np.flatnonzero(by_code)) <= set(index), "codes off the format"
  out = np.zeros(len(f.values), np.int64)
  for c, i in index.items():
    out[i] = by_code[c]
  return out


def assert_law(counts, probs):
  stat, dof, p = chi_square(counts, probs)
  tv = laws.total_variation(counts / counts.sum(), probs)
  assert p > 1e-4, f"chi-square {stat:.1f} on {dof} dof, p={p:.2e}, TV={tv:.4f}"
  assert tv < 0.01, f"TV {tv:.4f}"


@pytest.mark.parametrize("fmt", FORMATS + ("float8_e3m4", "float6_e3m2fn"))
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_rounded_law_matches_scipy_stats(case, fmt):
  name, params, dist = case
  values, probs = laws.rounded_law(name, fmt, **params)
  np.testing.assert_array_equal(values, formats.get(fmt).values)
  assert np.all(probs >= 0) and abs(probs.sum() - 1) < 1e-12
  # scipy.stats.t (stdtr) loses about 1e-13 near zero for df = 1, where the
  # library takes the incomplete beta function instead.
  np.testing.assert_allclose(probs, scipy_law(dist, fmt), rtol=1e-9,
                             atol=1e-12)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_cdf_and_sf_agree_in_the_tails_and_at_infinity(case):
  name, params, _ = case
  x = np.array([-np.inf, -300.0, -1.0, -1e-30, 0.0, 1e-30, 0.5, 0.999, 1.5,
                300.0, np.inf])
  cdf = distributions.cdf(name, x, **params)
  sf = distributions.sf(name, x, **params)
  np.testing.assert_array_equal(cdf[[0, -1]], [0.0, 1.0])
  np.testing.assert_array_equal(sf[[0, -1]], [1.0, 0.0])
  np.testing.assert_allclose(cdf + sf, 1.0, rtol=0, atol=1e-14)
  assert np.all(np.diff(cdf) >= 0)


def test_generalized_normal_keeps_the_mass_near_zero_for_large_p():
  """For p = 200, |x|^p underflows at the smallest boundaries; the law there
  is nearly uniform on [-1, 1], so P(|X| < x) = x / Gamma(1 + 1/p)."""
  x = 2.0**-10
  inner = float(distributions.cdf("generalized_normal", x, p=200.0)) - 0.5
  np.testing.assert_allclose(inner, x * stats.gennorm(200.0).pdf(0.0),
                             rtol=1e-12)


@pytest.mark.parametrize("case,fmt", EXACT_RUNS,
                         ids=[f"{case_id(c)}-{f}" for c, f in EXACT_RUNS])
def test_exact_samples_the_rounded_law(case, fmt):
  name, params, _ = case
  assert_law(counts_of(draw(case, fmt, "exact"), fmt),
             laws.rounded_law(name, fmt, **params)[1])


@pytest.mark.parametrize("case,bits,fmts", TABLE_RUNS,
                         ids=[f"{case_id(c)}-{b}" for c, b, _ in TABLE_RUNS])
def test_table_samples_its_law(case, bits, fmts):
  name, params, _ = case
  for fmt in fmts:
    want = table_method.table_law(name, fmt, table_bits=bits, **params)[1]
    assert_law(counts_of(draw(case, fmt, "table", bits), fmt), want)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_table_law_is_within_its_resolution(case):
  name, params, _ = case
  for fmt in FORMATS:
    exact = laws.rounded_law(name, fmt, **params)[1]
    for bits in (8, 16):
      table = table_method.table_law(name, fmt, table_bits=bits, **params)[1]
      assert np.all(np.abs(table - exact) < 2.0**-bits), (fmt, bits)


def test_default_method_is_exact():
  case = CASES[0]
  np.testing.assert_array_equal(
      codes(draw(case, "e4m3", None, key=jax.random.key(1))),
      codes(draw(case, "e4m3", "exact", key=jax.random.key(1))))


EXTREMES = (5e-324, 1e-300, 1e-8, 1e-3, 0.25, 3.0, 1e3, 1e8, 1e300, 1.7e308)


@pytest.mark.parametrize("name", SCIPY_LAWS)
def test_extreme_parameters_give_a_law_or_a_clear_error(name):
  d = distributions.get(name)
  for values in itertools.product(EXTREMES, repeat=len(d.params)):
    params = dict(zip(d.params, values))
    for fmt in ("float8_e4m3fn", "float4_e2m1fn"):
      try:
        _, probs = laws.rounded_law(name, fmt, **params)
      except ValueError as e:
        assert f"`{name}`" in str(e) and d.params[0] in str(e), str(e)
        continue
      assert np.all(np.isfinite(probs)) and np.all(probs >= 0), params
      assert abs(probs.sum() - 1) < 1e-9, params


@pytest.mark.parametrize("method", ["exact", "table", None])
@pytest.mark.parametrize("name", SCIPY_LAWS)
def test_bad_parameters_name_the_function_and_argument(name, method):
  d = distributions.get(name)
  fn = getattr(R, name)
  for bad in (0.0, -1.0, np.nan, np.inf):
    for i, arg in enumerate(d.params):
      params = [bad if j == i else 2.0 for j in range(len(d.params))]
      with pytest.raises(ValueError, match=f"`{arg}` argument to `{name}`"):
        fn(jax.random.key(0), *params, (4,), "e4m3", method=method)
      if method == "exact":
        with pytest.raises(ValueError, match=f"`{arg}` argument to `{name}`"):
          laws.rounded_law(name, "e4m3", **dict(zip(d.params, params)))


def test_which_laws_have_exact_and_table():
  """The five laws here, and still cast only: loggamma, f, wald."""
  for name in SCIPY_LAWS:
    d = distributions.get(name)
    assert d.has_cdf and d.library == "scipy", name
  for name, args in (("loggamma", (2.0,)), ("f", (3.0, 5.0)),
                     ("wald", (1.0,))):
    assert not distributions.get(name).has_cdf
    with pytest.raises(NotImplementedError, match="no closed-form CDF"):
      getattr(R, name)(jax.random.key(0), *args, (4,), "e4m3", method="exact")


def test_traced_and_per_element_parameters_use_cast():
  """The tables are built on the host from scalar parameters: the default
  is cast for traced or per-element ones, and an explicit exact/table
  names them. (jax.random.gamma compiles slowly: one sampling call.)"""
  key = jax.random.key(2)
  a = np.array([0.5, 5.0])
  np.testing.assert_array_equal(
      codes(R.gamma(key, a, None, "e4m3")),
      codes(R.gamma(key, a, None, "e4m3", method="cast")))
  fmt = formats.get("e5m2")
  assert draw_lib.choose_method(None, "nearest", {"df": None}, fmt, "t") == (
      "cast")
  assert draw_lib.choose_method(None, "nearest", {"df": 5.0}, fmt, "t") == (
      "exact")
  for method in ("exact", "table"):
    with pytest.raises(NotImplementedError, match="parameters a "):
      R.gamma(key, a, None, "e4m3", method=method)
    with pytest.raises(NotImplementedError, match="parameters df "):
      jax.jit(lambda df, m=method: R.t(key, df, (8,), "e5m2", method=m))(5.0)


def test_e8m0_is_cast_for_positive_laws_and_refused_for_signed_ones():
  """As for every law: E8M0 (powers of two, no zero, no sign) takes the
  float32 draw rounded (cast) for positive draws and refuses the others."""
  key = jax.random.key(3)
  e8m0 = formats.get("e8m0")
  for name, args in (("gamma", (0.5,)), ("beta", (2.0, 5.0)),
                     ("chisquare", (10.0,))):
    scalars = dict(zip(distributions.get(name).params, args))
    assert draw_lib.choose_method(None, "nearest", scalars, e8m0, name) == (
        "cast")
    with pytest.raises(NotImplementedError, match="unsigned"):
      getattr(R, name)(key, *args, (64,), "e8m0", method="exact")
  for name in ("t", "generalized_normal"):
    with pytest.raises(ValueError, match=f"`dtype` argument to `{name}`"):
      getattr(R, name)(key, 2.0, (4,), "e8m0")


def test_without_scipy_the_default_is_cast_and_exact_says_why(monkeypatch):
  monkeypatch.setattr(distributions, "library_available", lambda name: False)
  key = jax.random.key(4)
  np.testing.assert_array_equal(
      codes(R.gamma(key, 0.5, (16,), "e4m3")),
      codes(R.gamma(key, 0.5, (16,), "e4m3", method="cast")))
  for method in ("exact", "table"):
    with pytest.raises(ImportError,
                       match=f"method='{method}' of `beta` needs scipy"):
      R.beta(key, 2.0, 5.0, (16,), "e4m3", method=method)
  with pytest.raises(ImportError, match="CDF of `t` is scipy's"):
    laws.rounded_law("t", "e4m3", df=5.0)


def test_import_without_scipy():
  """jaxfp8 imports without scipy (and doesn't import it itself)."""
  code = (
      "import sys\n"
      "import jax\n"
      "by_jax = 'scipy.special' in sys.modules\n"
      "import jaxfp8\n"
      "assert by_jax or 'scipy.special' not in sys.modules\n"
      "sys.modules['scipy'] = None  # import scipy now fails\n"
      "try:\n"
      "  jaxfp8.random.gamma(jax.random.key(0), 2.0, (4,), 'e4m3',\n"
      "                      method='exact')\n"
      "except ImportError as e:\n"
      "  assert 'pip install scipy' in str(e), e\n"
      "else:\n"
      "  raise AssertionError('no ImportError')\n")
  subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                 env=dict(os.environ, JAX_PLATFORMS="cpu"),
                 cwd=pathlib.Path(__file__).resolve().parents[2])
