"""jaxfp8.es populations: law, antithetic exactness, keys, candidates, blocks."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

import jaxfp8
from jaxfp8 import es
from jaxfp8._src.es import population as es_lib
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import rounding as rounding_lib

# Signed narrow formats: native fp8, float4 (native), float6 (CodeArray).
FORMATS = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
           "float6_e2m3fn", "float4_e2m1fn"]
POP_DTYPES = ["float32"] + FORMATS


# Both helpers read populations in NumPy (ml_dtypes for native narrow
# arrays, the format's code table for CodeArrays): an eager decode or encode
# compiles one program per format and shape, and the tests compare many.
def _values(x) -> np.ndarray:
  """float64 values of a population (native narrow, CodeArray or wide)."""
  if isinstance(x, jaxfp8.CodeArray):
    return x.format.code_table.astype(np.float64)[np.asarray(x.codes)]
  return np.asarray(x).astype(np.float64)


def _codes(x) -> np.ndarray:
  """Bit patterns of a population, as unsigned integers."""
  if isinstance(x, jaxfp8.CodeArray):
    return np.asarray(x.codes)
  a = np.asarray(x)
  # float4 (ml_dtypes) holds its code in the low bits of a byte.
  return a.view(np.uint32 if a.dtype == np.float32 else np.uint8)


def rounded_normal_law(fmt_name: str) -> tuple[np.ndarray, np.ndarray]:
  """The exact law of round-to-nearest(N(0, 1)) saturated to +-max, float64.

  Rounding boundaries are the midpoints of neighbouring finite values (ties
  have probability zero); the outer mass goes to +-max.
  """
  v = formats.get(fmt_name).values
  mid = np.concatenate([[-np.inf], (v[1:] + v[:-1]) / 2, [np.inf]])
  lo, hi = mid[:-1], mid[1:]
  # Lower tail CDF on the left, upper tail survival on the right: both are
  # accurate far into the tails (math.erfc, not 1 - erf).
  cdf = lambda x: 0.5 * math.erfc(-x / math.sqrt(2))
  sf = lambda x: 0.5 * math.erfc(x / math.sqrt(2))
  p = np.array([cdf(b) - cdf(a) if b <= 0 else sf(a) - sf(b)
                for a, b in zip(lo, hi)])
  return v, p


def _chi2_tv(samples: np.ndarray, values: np.ndarray, probs: np.ndarray):
  idx = np.searchsorted(values, samples)
  assert np.all(values[np.minimum(idx, len(values) - 1)] == samples), (
      "a sample is not a finite value of the format")
  counts = np.bincount(idx, minlength=len(values)).astype(np.float64)
  n = counts.sum()
  expected = probs * n
  tv = 0.5 * np.abs(counts / n - probs).sum()
  big = expected >= 5  # pool the rare values (tails) into one bucket
  obs = np.append(counts[big], counts[~big].sum())
  exp = np.append(expected[big], expected[~big].sum())
  if exp[-1] == 0:
    assert obs[-1] == 0
    obs, exp = obs[:-1], exp[:-1]
  return stats.chisquare(obs, exp).pvalue, tv


@pytest.mark.parametrize("method", [None, "exact"], ids=["default", "exact"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_perturbation_law(fmt, method):
  # 2^20 samples from 64 members; the first half of an antithetic population
  # are independent draws, so test that half for each layout.
  try:
    eps = es.perturbations(jax.random.key(7), 64, (1 << 14,), fmt,
                           antithetic=False, method=method)
    mirrored = es.perturbations(jax.random.key(8), 128, (1 << 14,), fmt,
                                method=method)
  except NotImplementedError as e:
    pytest.skip(f"jaxfp8.random.normal: {e}")
  values, probs = rounded_normal_law(fmt)
  for v in (_values(eps), _values(mirrored)[:64]):
    p, tv = _chi2_tv(v.ravel(), values, probs)
    assert p > 1e-4, (fmt, p, tv)
    assert tv < 0.01, (fmt, p, tv)


@pytest.mark.parametrize("fmt", POP_DTYPES)
def test_antithetic_exact_negation(fmt):
  eps = es.perturbations(jax.random.key(1), 16, (5, 300), fmt)
  assert eps.shape == (16, 5, 300)
  # Halves sliced in NumPy: one conversion, no eager slice programs.
  v, c = _values(eps), _codes(eps)
  np.testing.assert_array_equal(v[8:], -v[:8])
  # Bit-exact: the sign bit flips, except zero where there is no -0 (fnuz,
  # whose -0 code is NaN): no NaN may appear.
  f = formats.get(fmt)
  if f.narrow:
    sign = 1 << (f.bits - 1)
    c1, c2 = c[:8], c[8:]
    zero = c1 == 0 if not f.has_negative_zero else np.zeros(c1.shape, bool)
    np.testing.assert_array_equal(c2, np.where(zero, c1, c1 ^ sign))
  assert not np.isnan(v).any()


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float6_e2m3fn"])
def test_is_one_normal_draw_of_the_rows(fmt):
  key = jax.random.key(3)
  plain = es.perturbations(key, 5, 40, fmt, antithetic=False, method="cast")
  want = jaxfp8.random.normal(key, (5, 40), fmt, method="cast")
  np.testing.assert_array_equal(_codes(plain), _codes(want))
  mirrored = es.perturbations(key, 8, (2, 20), fmt)
  want = jaxfp8.random.normal(key, (4, 2, 20), fmt)
  np.testing.assert_array_equal(_codes(mirrored)[:4], _codes(want))


@pytest.mark.parametrize("fmt", ["float32", "float8_e5m2", "float6_e3m2fn"])
def test_jit_equals_eager(fmt):
  key = jax.random.key(5)
  eager = es.perturbations(key, 6, (7,), fmt)
  jitted = jax.jit(lambda k: es.perturbations(k, 6, (7,), fmt))(key)
  np.testing.assert_array_equal(_codes(eager), _codes(jitted))
  raw = es.perturbations(jax.random.PRNGKey(5), 6, (7,), fmt)
  assert raw.shape == (6, 7)


def test_perturbation_errors():
  key = jax.random.key(0)
  with pytest.raises(ValueError, match="`popsize`.*even.*got 7"):
    es.perturbations(key, 7, 3, "e4m3")
  assert es.perturbations(key, 7, 3, "e4m3", antithetic=False).shape == (7, 3)
  with pytest.raises(ValueError, match="`popsize`.*positive"):
    es.perturbations(key, 0, 3, "e4m3")
  with pytest.raises(TypeError, match="`popsize`.*int"):
    es.perturbations(key, 4.0, 3, "e4m3")
  with pytest.raises(ValueError, match="signed.*float8_e8m0fnu"):
    es.perturbations(key, 4, 3, "e8m0")
  with pytest.raises(TypeError, match="dtype"):
    es.perturbations(key, 4, 3, jnp.int8)
  with pytest.raises(ValueError, match="single PRNG key"):
    es.perturbations(jax.random.split(key, 3), 4, 3, "e4m3")
  with pytest.raises(TypeError, match="`key`"):
    es.perturbations(0, 4, 3, "e4m3")
  with pytest.raises(ValueError, match="`method`.*narrow formats only"):
    es.perturbations(key, 4, 3, jnp.float32, method="exact")
  with pytest.raises(ValueError, match="`method`"):
    es.perturbations(key, 4, 3, "e4m3", method="fast")
  with pytest.raises(ValueError, match="`shape`"):
    es.perturbations(key, 4, (3, -1), "e4m3")
  for antithetic in ("no", None, 1):  # "no" and 1 were taken as True
    with pytest.raises(TypeError, match="`antithetic` argument to "
                                        "`perturbations` must be a bool"):
      es.perturbations(key, 4, 3, "e4m3", antithetic=antithetic)


@pytest.mark.parametrize("fmt", POP_DTYPES)
def test_sample_population_nearest_is_cast_of_mean_plus_sigma_eps(fmt):
  key = jax.random.key(11)
  # Means from far beyond max (saturation) down to subnormals and zero, with
  # ties; powers of two for sigma: sigma * eps is exact, so a fused
  # multiply-add under jit and the separate product here round alike.
  f = formats.get(fmt)
  grid = f.values if f.narrow else np.geomspace(1e-40, 1e38, 60)
  mags = np.concatenate([[0.0, 1e30, min(f.max * 1.01, 3e38)], grid[-40:],
                         grid[grid > 0][:20] * 1.5])
  mean = jnp.asarray(np.concatenate([mags, -mags]), jnp.float32)
  size = mean.shape[0]
  sigma = jnp.asarray(2.0 ** (np.arange(size) % 12 - 10), jnp.float32)
  pop = es.sample_population(key, mean, sigma, 12, fmt)
  eps = es.perturbations(jax.random.split(key)[0], 12, (size,), fmt)
  # The float32 reference in NumPy (each op rounds once, as eager jnp's do).
  x = np.asarray(mean) + np.asarray(sigma) * _values(eps).astype(np.float32)
  want = jaxfp8.cast(jax.device_put(x), fmt)
  assert pop.shape == (12, size) and pop.dtype == want.dtype
  np.testing.assert_array_equal(_codes(pop), _codes(want))


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float6_e3m2fn"])
def test_sample_population_stochastic_is_unbiased(fmt):
  # sigma = 0: every candidate rounds 0.3; P(up) = its fraction of the gap.
  f = formats.get(fmt)
  lo, hi = f.values[f.values <= 0.3][-1], f.values[f.values > 0.3][0]
  pop = es.sample_population(jax.random.key(2), jnp.full((1 << 14,), 0.3),
                             0.0, 64, fmt, rounding="stochastic")
  v = _values(pop)
  assert set(np.unique(v)) == {lo, hi}
  n, up = v.size, np.count_nonzero(v == hi)
  p = (np.float64(np.float32(0.3)) - lo) / (hi - lo)
  z = (up - n * p) / math.sqrt(n * p * (1 - p))
  assert abs(z) < 5, (up / n, p, z)
  # With sigma > 0 every candidate is a neighbour of its float32 target.
  key = jax.random.key(4)
  mean = jnp.linspace(-1.0, 1.0, 300)
  pop = es.sample_population(key, mean, 0.2, 8, fmt, rounding="stochastic")
  eps = es.perturbations(jax.random.split(key)[0], 8, (300,), fmt)
  x = jax.device_put(np.asarray(mean) + np.float32(0.2)
                  * _values(eps).astype(np.float32))
  down = _values(jaxfp8.cast(x, fmt, rounding="down"))
  upv = _values(jaxfp8.cast(x, fmt, rounding="up"))
  v = _values(pop)
  assert np.all((v == down) | (v == upv))
  assert np.any(v != _values(jaxfp8.cast(x, fmt)))  # not nearest in disguise


def test_sharding_on_one_device_is_the_shard_draw_and_bad_ones_fail():
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # pylint: disable=g-import-not-at-top,g-multiple-import
  key = jax.random.key(4)
  mesh = Mesh(np.array(jax.devices()[:1]), ("pop",))
  rows = NamedSharding(mesh, P("pop"))
  for sharding in (rows, NamedSharding(mesh, P())):  # split or not: 1 shard
    got = es.perturbations(key, 8, (5,), "e4m3", sharding=sharding)
    want = es.perturbations(jax.random.fold_in(key, 0), 8, (5,), "e4m3")
    np.testing.assert_array_equal(np.asarray(got).view(np.uint8),
                                  np.asarray(want).view(np.uint8))
  with pytest.raises(TypeError, match="`sharding` argument to "
                     "`perturbations` must be None or a jax.sharding."
                     "NamedSharding, got P"):
    es.perturbations(key, 8, 5, "e4m3", sharding=P("pop"))
  with pytest.raises(ValueError, match="may split the rows \\(members\\) "
                     "only"):
    es.perturbations(key, 8, 5, "e4m3",
                     sharding=NamedSharding(mesh, P(None, "pop")))
  two = Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("a", "b"))
  with pytest.raises(ValueError, match="may split the rows"):
    es.perturbations(key, 8, (5, 2), "e4m3",
                     sharding=NamedSharding(two, P("a", None, "b")))
  got = es.sample_population(key, jnp.ones(5), 0.1, 8, "e4m3", sharding=rows)
  want = es.sample_population(jax.random.fold_in(key, 0), jnp.ones(5), 0.1, 8,
                              "e4m3")
  np.testing.assert_array_equal(np.asarray(got).view(np.uint8),
                                np.asarray(want).view(np.uint8))
  with pytest.raises(ValueError, match="`sharding` argument to "
                     "`sample_population` may split the rows"):
    es.sample_population(key, jnp.ones(5), 0.1, 8, "e4m3",
                         sharding=NamedSharding(mesh, P(None, "pop")))
  with pytest.raises(ValueError, match="`sharding` argument to `OpenAIES`"):
    es.OpenAIES(8, optax.sgd(0.1), sharding=NamedSharding(mesh, P(None, "pop")))
  with pytest.raises(TypeError, match="`sharding` argument to `OpenAIES`"):
    es.OpenAIES(8, optax.sgd(0.1), sharding="pop")


def test_sharding_needs_whole_populations_per_shard():
  # Checked before any device is touched: the count comes from the mesh.
  class FakeMesh:  # a 4-device mesh's shape, on a 1-device machine
    shape = {"pop": 4}
  with pytest.raises(ValueError, match="4 shards of the rows need a popsize "
                     "that is a multiple of 8 \\(even populations of their "
                     "own\\), got 12"):
    es_lib.check_sharding(_Sharding(FakeMesh(), ("pop",)), 12, True,
                          "perturbations")
  with pytest.raises(ValueError, match="multiple of 4 \\(populations"):
    es_lib.check_sharding(_Sharding(FakeMesh(), ("pop",)), 6, False,
                          "perturbations")
  assert es_lib.check_sharding(_Sharding(FakeMesh(), ("pop",)), 8, True,
                               "perturbations")[1] == 4


class _Sharding(jax.sharding.NamedSharding):
  """A NamedSharding's mesh and spec, without devices behind them."""

  def __init__(self, mesh, spec):  # pylint: disable=super-init-not-called
    self._fake = (mesh, jax.sharding.PartitionSpec(*spec))

  @property
  def mesh(self):
    return self._fake[0]

  @property
  def spec(self):
    return self._fake[1]


def test_sample_population_errors():
  key = jax.random.key(0)
  with pytest.raises(ValueError, match="`sigma`.*broadcast"):
    es.sample_population(key, jnp.zeros(5), jnp.ones(4), 4, "e4m3")
  with pytest.raises(ValueError, match="`rounding`.*'nearest'"):
    es.sample_population(key, jnp.zeros(5), 1.0, 4, jnp.float32,
                         rounding="stochastic")
  with pytest.raises(ValueError, match="`rounding`"):
    es.sample_population(key, jnp.zeros(5), 1.0, 4, "e4m3", rounding="odd")
  with pytest.raises(TypeError, match="`mean`"):
    es.sample_population(key, "zeros", 1.0, 4, "e4m3")
  with pytest.raises(ValueError, match="even"):
    es.sample_population(key, jnp.zeros(5), 1.0, 5, "e4m3")
  with pytest.raises(TypeError, match="`antithetic` argument to "
                                      "`sample_population` must be a bool"):
    es.sample_population(key, jnp.zeros(5), 1.0, 4, "e4m3", antithetic="no")


# -- blocks: large populations are drawn block by block ------------------------

def test_block_rows():
  assert es_lib.block_rows(2048, 100_000, 1 << 22) == 32
  assert es_lib.block_rows(8, 10, 1 << 22) == 8  # fits: one draw
  assert es_lib.block_rows(12, 10, 40) == 4  # the largest divisor that fits
  assert es_lib.block_rows(7, 10, 40) == 1  # a prime: one row a block
  assert es_lib.block_rows(4, 100, 10) == 1  # a row larger than a block


@pytest.mark.parametrize("antithetic", [True, False])
@pytest.mark.parametrize("fmt", POP_DTYPES)
def test_blocks_are_draws_with_folded_keys(monkeypatch, fmt, antithetic):
  # 2 rows of 35 entries a block: block t is normal(fold_in(key, t), (2, 5, 7))
  # and holds rows t and t + steps of the half; wide dtypes are never blocked.
  monkeypatch.setattr(es_lib, "BLOCK_ENTRIES", 70)
  key = jax.random.key(3)
  eps = es.perturbations(key, 16, (5, 7), fmt, antithetic=antithetic)
  rows = 8 if antithetic else 16
  steps = rows // 2
  # Rows sliced in NumPy: one conversion, not an eager slice per block.
  c, v = _codes(eps), _values(eps)
  if fmt == "float32":
    want = jax.random.normal(key, (rows, 5, 7))
    np.testing.assert_array_equal(c[:rows], _codes(want))
  else:
    for t in range(steps):
      want = jaxfp8.random.normal(jax.random.fold_in(key, t), (2, 5, 7), fmt)
      np.testing.assert_array_equal(c[t::steps][:2], _codes(want))
  if antithetic:
    np.testing.assert_array_equal(v[8:], -v[:8])
  assert not np.isnan(v).any()


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float4_e2m1fn"])
def test_blocked_perturbation_law(monkeypatch, fmt):
  monkeypatch.setattr(es_lib, "BLOCK_ENTRIES", 1 << 16)  # 4 rows, 16 blocks
  eps = es.perturbations(jax.random.key(9), 128, (1 << 14,), fmt)
  values, probs = rounded_normal_law(fmt)
  p, tv = _chi2_tv(_values(eps)[:64].ravel(), values, probs)
  assert p > 1e-4 and tv < 0.01, (fmt, p, tv)


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float6_e2m3fn",
                                 "float4_e2m1fn"])
def test_blocked_sample_population(monkeypatch, fmt, rounding):
  monkeypatch.setattr(es_lib, "BLOCK_ENTRIES", 70)
  key = jax.random.key(4)
  mean = jnp.linspace(-3.0, 3.0, 35).reshape(5, 7)
  pop = es.sample_population(key, mean, 0.25, 16, fmt, rounding=rounding)
  key_eps, key_round = jax.random.split(key)
  eps = es.perturbations(key_eps, 16, (5, 7), fmt)  # the same blocks
  x = np.asarray(mean) + np.float32(0.25) * _values(eps).astype(np.float32)
  if rounding == "nearest":
    np.testing.assert_array_equal(_codes(pop), _codes(jaxfp8.cast(x, fmt)))
  else:  # block t's bits: bits(fold_in(key_round, t)) over its 4 rows
    codes = _codes(pop)  # rows picked in NumPy, not by eager gathers
    for t in range(4):
      bits = jax.random.bits(jax.random.fold_in(key_round, t), (4, 5, 7),
                             jnp.uint32)
      rows = [t, t + 4, 8 + t, 8 + t + 4]
      want = rounding_lib.round_to(jnp.asarray(x[rows]), formats.get(fmt),
                                   rounding="stochastic", rand=bits)
      np.testing.assert_array_equal(codes[rows], _codes(want))


def test_block_memory_is_a_quarter_of_float32s():
  # The compiled programs at 4096 x 100,000 (compiled, not run): argument +
  # output + temporaries, fp8 against float32 (docs/es.md, `bench es --memory`).
  key, n = jax.random.key(0), 100_000
  mean = jnp.zeros(n)
  def program(f, *args):
    m = jax.jit(f).lower(*args).compile().memory_analysis()
    return (m.argument_size_in_bytes + m.output_size_in_bytes
            + m.temp_size_in_bytes)
  for f, args in (
      (lambda dt: lambda k: es.perturbations(k, 4096, n, dt), (key,)),
      (lambda dt: lambda k, m: es.sample_population(k, m, 0.1, 4096, dt),
       (key, mean)),
      (lambda dt: lambda k: es.OpenAIES(4096, optax.sgd(1.0), dtype=dt).ask(
          k, es.ESState(mean, jnp.float32(0.1), (), jnp.int32(0))), (key,))):
    ratio = program(f("e4m3"), *args) / program(f(jnp.float32), *args)
    assert ratio <= 0.25, ratio


# One member of 2^31 entries: the exact sampler's positions are int32 (no
# x64); jaxfp8.random draws such a member in chunks (it raised OverflowError
# while tracing). Shapes only: nothing is allocated.
HUGE = 1 << 31


@pytest.mark.parametrize("method", [None, "exact", "table", "cast"])
@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float6_e2m3fn",
                                 "float4_e2m1fn"])
def test_a_member_of_2_to_31_entries_under_eval_shape(fmt, method):
  key = jax.random.key(0)
  # One draw of one row; a blocked draw (a row a block); no mirror.
  for popsize, antithetic in ((2, True), (4, True), (3, False)):
    out = jax.eval_shape(lambda k, p=popsize, a=antithetic: es.perturbations(
        k, p, (HUGE,), fmt, antithetic=a, method=method), key)
    assert out.shape == (popsize, HUGE), (popsize, antithetic)
    assert out.dtype == formats.get(fmt).dtype
  if method is None:
    mean = jax.ShapeDtypeStruct((HUGE,), jnp.float32)
    for rounding in ("nearest", "stochastic"):
      out = jax.eval_shape(lambda k, m, r=rounding: es.sample_population(
          k, m, 0.1, 2, fmt, rounding=r), key, mean)
      assert out.shape == (2, HUGE)


def test_openai_es_with_a_member_of_2_to_31_entries_under_eval_shape():
  def generation(key):
    opt = es.OpenAIES(4, optax.sgd(0.1), dtype="e4m3")
    state = opt.init(jnp.zeros(HUGE))
    return opt.tell(state, opt.ask(key, state), jnp.arange(4.0)).mean
  assert jax.eval_shape(generation, jax.random.key(0)).shape == (HUGE,)


def test_sample_population_refuses_a_nan_sigma():
  key, mean = jax.random.key(0), jnp.zeros(5)
  for sigma in (float("nan"), np.inf, jnp.array([0.1, 0.1, jnp.nan, 0.1, 0.1])):
    with pytest.raises(ValueError, match="`sigma` argument to `sample_popul"):
      es.sample_population(key, mean, sigma, 4, "e4m3")
  # A Python sigma under the caller's jit is still checked, a traced one not.
  with pytest.raises(ValueError, match="`sigma`.*finite"):
    jax.jit(lambda m: es.sample_population(key, m, float("nan"), 4))(mean)
  pop = jax.jit(lambda m: es.sample_population(key, m, 0.1, 4))(mean)
  assert pop.shape == (4, 5)
  traced = jax.jit(lambda s: es.sample_population(key, mean, s, 4))(0.1)
  np.testing.assert_array_equal(_codes(traced), _codes(pop))


def test_bench_memory_case_reports_the_program_and_the_rss():
  from jaxfp8.tools.bench import es as bench_es  # pylint: disable=g-import-not-at-top
  for case in bench_es.MEMORY_CASES:
    r = bench_es.memory_case(case, 4, 8, "float8_e4m3fn")
    assert r["output"] == 4 * 8 and r["peak_rss"] > 0 and r["rss_before"] > 0, r
