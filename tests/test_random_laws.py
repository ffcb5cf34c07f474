"""The laws behind jaxfp8.random, checked without sampling.

- ``laws.rounded_law`` against scipy.stats CDFs (an independent reference);
- the exact method's tables: the law they sample, read back from the tables,
  equals the 2^-32-quantized rounded law value by value (so every probability
  is within 2^-32, and dyadic laws are exact);
- the table method's law: within 2^-16 of the rounded law;
- the pooled refinement: distinct slots per sample, fresh bits on overflow;
- the DDG tree sampler (the table method's): its levels give the masses
  exactly, ranks are dense, pools fall back to fresh bits.
"""
import jax
import jax.numpy as jnp
from jax.extend import random as jax_extend_random
import numpy as np
import pytest
from scipy import stats

from jaxfp8 import formats
from jaxfp8._src import distributions
from jaxfp8._src import laws
from jaxfp8._src.random import bits as bits_lib
from jaxfp8._src.random import exact_method as exact
from jaxfp8._src.random import table_method
from stats import chi_square
from stats import scipy_law

FORMATS = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float4_e2m1fn",
           "float6_e2m3fn", "float6_e3m2fn", "float8_e3m4")

# (name, params, the same law in scipy.stats)
LAWS = [
    ("uniform", {"minval": -3.0, "maxval": 5.0}, stats.uniform(-3.0, 8.0)),
    ("normal", {}, stats.norm()),
    ("truncated_normal", {"lower": -2.0, "upper": 3.0},
     stats.truncnorm(-2.0, 3.0)),
    ("truncated_normal", {"lower": 4.0, "upper": 9.0},
     stats.truncnorm(4.0, 9.0)),
    ("laplace", {}, stats.laplace()),
    ("logistic", {}, stats.logistic()),
    ("exponential", {}, stats.expon()),
    ("gumbel", {}, stats.gumbel_r()),
    ("cauchy", {}, stats.cauchy()),
    ("lognormal", {"sigma": 0.5}, stats.lognorm(0.5)),
    ("rayleigh", {"scale": 2.0}, stats.rayleigh(scale=2.0)),
    ("maxwell", {}, stats.maxwell()),
    ("double_sided_maxwell", {"loc": 1.0, "scale": 0.5}, None),
    ("weibull_min", {"scale": 1.5, "concentration": 2.0},
     stats.weibull_min(2.0, scale=1.5)),
    ("pareto", {"b": 3.0}, stats.pareto(3.0)),
    ("triangular", {"left": -1.0, "mode": 0.5, "right": 2.0},
     stats.triang(0.5, loc=-1.0, scale=3.0)),
]


def law_id(case):
  return case[0] + "".join(f"-{v:g}" for v in case[1].values())


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", LAWS, ids=law_id)
def test_rounded_law_matches_scipy(case, fmt):
  name, params, dist = case
  values, probs = laws.rounded_law(name, fmt, **params)
  np.testing.assert_array_equal(values, formats.get(fmt).values)
  assert np.all(probs >= 0) and abs(probs.sum() - 1) < 1e-12
  if dist is None:  # double-sided Maxwell: +-Maxwell, shifted and scaled
    m = (laws.boundaries(fmt) - params["loc"]) / params["scale"]
    mx = stats.maxwell()
    cdf = np.where(m < 0, 0.5 * mx.sf(-m), 0.5 + 0.5 * mx.cdf(m))
    want = np.diff(np.concatenate([[0.0], cdf, [1.0]]))
    np.testing.assert_allclose(probs, want, rtol=1e-9, atol=1e-15)
    return
  np.testing.assert_allclose(probs, scipy_law(dist, fmt), rtol=1e-9,
                             atol=1e-15)


@pytest.mark.parametrize("case", LAWS, ids=law_id)
def test_cdf_and_sf_in_the_tails_and_at_infinity(case):
  name, params, _ = case
  x = np.array([-np.inf, -30.0, -1.0, 0.0, 0.5, 1.5, 30.0, np.inf])
  cdf = distributions.cdf(name, x, **params)
  sf = distributions.sf(name, x, **params)
  np.testing.assert_array_equal(cdf[[0, -1]], [0.0, 1.0])
  np.testing.assert_array_equal(sf[[0, -1]], [1.0, 0.0])
  np.testing.assert_allclose(cdf + sf, 1.0, rtol=0, atol=1e-15)
  assert np.all(np.diff(cdf) >= 0)


def sampled_law(plan, fmt) -> np.ndarray:
  """The law the exact method samples, read back from its tables (2^32 units)."""
  index = {int(c): i for i, c in enumerate(formats.get(fmt).codes)}
  q = np.zeros(len(formats.get(fmt).values), np.int64)
  unit = 1 << (32 - plan.width)
  coarse = plan.main[:1 << plan.width]
  for j, c in enumerate(coarse):
    if plan.kind == "alias":  # t to a, the rest to b
      a, b, t = int(c) & 255, (int(c) >> 8) & 255, int(c) >> 16
      assert (t != 0) == (j < plan.fine) and (t != 0 or a == b)
      q[index[a]] += t
      q[index[b]] += (1 << 16) - t
    elif plan.kind == "two_level" and j < plan.fine:
      sub = plan.main[(1 << plan.width) + (j << plan.width2):][
          :1 << plan.width2]
      for c2 in sub:
        q[index[int(c2)]] += unit >> plan.width2
    else:
      q[index[int(c)]] += unit
  return q


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", LAWS, ids=law_id)
def test_exact_tables_sample_the_law_within_2_to_minus_32(case, fmt):
  name, params, _ = case
  plan = exact.plan(name, fmt, tuple(sorted(params.items())))
  q = sampled_law(plan, fmt)
  assert q.sum() == 2**32
  _, probs = laws.rounded_law(name, fmt, **params)
  np.testing.assert_array_equal(q, laws.quantize(probs, 32))
  assert np.all(np.abs(q / 2**32 - probs) < 2**-32)
  assert plan.fine < len(probs)  # at most one split bucket per value


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("bounds", [(0.0, 1.0), (-1.0, 1.0), (-0.25, 0.75),  # widths 2^k
                                    (0.0, 2.0**-6)])
def test_dyadic_uniform_is_exact(fmt, bounds):
  lo, hi = bounds
  params = {"minval": lo, "maxval": hi}
  _, probs = laws.rounded_law("uniform", fmt, **params)
  q = sampled_law(exact.plan("uniform", fmt, tuple(sorted(params.items()))),
                  fmt)
  np.testing.assert_array_equal(q / 2**32, probs)  # equal, not close


def test_few_bits_where_the_law_allows():
  e4m3 = formats.get("e4m3")
  # U[0,1) in e4m3fn: masses are multiples of 2^-10 -> 10-bit draws, three
  # to a word; in float4, of 2^-2 -> 2-bit draws, sixteen to a word.
  assert exact.plan("uniform", "float8_e4m3fn", ()).width == 10
  assert exact.bits_per_sample("uniform", e4m3, {}) == 32 / 3
  assert exact.bits_per_sample("uniform", formats.get("e2m1"), {}) == 2
  assert exact.bits_per_sample("normal", e4m3, {}) == 18
  # e5m2's U[0,1) has an atom of 2^-17 at zero: 16 coarse bits, and one more
  # (drawn for every sample, 32 to a word) for the 8 buckets below 2^-13.
  p = exact.plan("uniform", "float8_e5m2", ())
  assert (p.kind, p.width, p.fine, p.width2) == ("two_level", 16, 8, 1)
  assert exact.bits_per_sample("uniform", formats.get("e5m2"), {}) == 17


@pytest.mark.parametrize("fmt", FORMATS[:5])
@pytest.mark.parametrize("table_bits", [8, 16])
@pytest.mark.parametrize("case", LAWS[:4], ids=law_id)
def test_table_law_within_resolution(case, table_bits, fmt):
  name, params, _ = case
  _, exact_p = laws.rounded_law(name, fmt, **params)
  _, table_p = table_method.table_law(name, fmt, table_bits=table_bits,
                                      **params)
  assert abs(table_p.sum() - 1) < 1e-12
  assert np.all(np.abs(table_p - exact_p) <= 2.0**-table_bits)
  assert np.all(table_p * 2**table_bits == np.round(table_p * 2**table_bits))


def test_quantize_is_within_one_unit_and_keeps_dyadic_laws():
  rng = np.random.default_rng(0)
  p = rng.dirichlet(np.ones(200))
  q = laws.quantize(p, 32)
  assert q.sum() == 2**32 and np.all(np.abs(q / 2**32 - p) < 2**-32)
  d = np.array([2.0**-17, 0.5 - 2.0**-17, 0.5])
  np.testing.assert_array_equal(laws.quantize(d, 32), d * 2**32)


def test_chi_square_pools_small_bins_and_flags_impossible_values():
  probs = np.array([1e-7, 0.5, 0.5 - 2e-7, 1e-7])
  counts = np.array([0, 500, 500, 0])
  stat, dof, p = chi_square(counts, probs)
  assert dof == 1 and p > 0.5
  assert chi_square(np.array([1, 499, 500, 0]),
                         np.array([0.0, 0.5, 0.5, 0.0]))[2] == 0.0
  assert chi_square(np.array([700, 300]), np.array([0.5, 0.5]))[2] < 1e-20


# The samplers run these helpers under their own jit; jitted here too, so a
# test compiles one program instead of one per eager op (80 for ranks).
_jit_ranks = jax.jit(exact.ranks)
_jit_refinement = jax.jit(exact._refinement, static_argnums=(2,))


def test_refinement_gives_each_split_sample_its_own_slot():
  n = 64 * 32
  rng = np.random.default_rng(1)
  split = rng.random(n) < 0.05
  split = split.reshape(-1, 32)
  split[:, :] &= np.cumsum(split, axis=1) <= exact._SLOTS  # no overflow
  split = split.ravel()
  key = jax.random.key(3)
  r = np.asarray(_jit_refinement(key, jax.device_put(split), n))
  k_pool, _ = jax.random.split(key)
  pool = np.asarray(bits_lib.uint16(k_pool, n // 32 * exact._SLOTS)).reshape(
      -1, exact._SLOTS)
  for g in range(n // 32):
    lanes = np.flatnonzero(split[g * 32:(g + 1) * 32])
    np.testing.assert_array_equal(r[g * 32 + lanes], pool[g, :len(lanes)])


@pytest.mark.parametrize("width", [1, 2, 3, 5, 8, 10, 16])
def test_packed_bits_are_uniform_and_independent(width):
  n = 3 * 2**14 + 1
  u = np.asarray(jax.jit(bits_lib.packed, static_argnums=(1, 2))(
      jax.random.key(width), n, width))
  assert u.shape == (n,) and u.min() >= 0 and u.max() < 2**width
  for b in range(width):  # every bit fair, neighbours uncorrelated
    bit = (u >> b) & 1
    assert abs(bit.mean() - 0.5) < 5 * 0.5 / np.sqrt(n)
    c = np.corrcoef(bit[:-1], bit[1:])[0, 1]
    assert abs(c) < 5 / np.sqrt(n)


@pytest.mark.parametrize("n", [1, 7, 512, 1000, 3 * 2**14 + 1])
def test_threefry_words_are_both_hash_words_of_each_counter(n):
  # Words 2i and 2i + 1: Threefry-2x32 of the counter (0, i), the counter
  # jax.random.bits hashes for its element i (it keeps their XOR).
  key = jax.random.key(n)
  got = np.asarray(jax.jit(bits_lib.words, static_argnums=1)(key, n))
  raw = np.asarray(bits_lib.words(jax.random.PRNGKey(n), n))
  half = -(-n // 2)
  counters = np.concatenate([np.zeros(half, np.uint32),
                             np.arange(half, dtype=np.uint32)])
  y = np.asarray(jax_extend_random.threefry_2x32(
      jax.random.key_data(key), jax.device_put(counters))).reshape(2, half)
  want = y.T.reshape(-1)[:n]
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(raw, want)
  np.testing.assert_array_equal(
      y[0] ^ y[1], np.asarray(jax.random.bits(key, (half,), jnp.uint32)))
  batch = jax.vmap(lambda k: bits_lib.words(k, n))(jax.random.split(key, 3))
  np.testing.assert_array_equal(
      batch[1], bits_lib.words(jax.random.split(key, 3)[1], n))


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_other_key_implementations_draw_jax_random_bits(impl):
  key = jax.random.key(5, impl=impl)
  for n in (6, 7):
    np.testing.assert_array_equal(
        np.asarray(bits_lib.words(key, n)),
        np.asarray(jax.random.bits(key, (n + (n & 1),), jnp.uint32))[:n])


def test_threefry_words_are_uniform_and_independent():
  w = np.asarray(bits_lib.words(jax.random.key(11), 1 << 16))
  bit = (w[:, None] >> np.arange(32, dtype=np.uint32)) & 1
  n = len(w)
  assert np.all(np.abs(bit.mean(0) - 0.5) < 5 * 0.5 / np.sqrt(n))
  for a, b in [(bit[:-1], bit[1:]), (bit[0::2], bit[1::2])]:
    c = ((a - 0.5) * (b - 0.5)).mean(0) / 0.25  # neighbours, a hash's pair
    assert np.all(np.abs(c) < 5 / np.sqrt(n // 2)), c


def test_refinement_overflow_takes_a_fresh_stream():
  n = 128
  split = np.zeros(n, bool)
  split[:exact._SLOTS + 1] = True  # one group needs five slots
  key = jax.random.key(4)
  r = np.asarray(_jit_refinement(key, jax.device_put(split), n))
  _, k_fallback = jax.random.split(key)
  np.testing.assert_array_equal(r, np.asarray(bits_lib.uint16(k_fallback, n)))


def tree_law(plan, fmt) -> np.ndarray:
  """The law a DDG tree plan samples, read back from its levels (2^32 units)."""
  index = {int(c): i for i, c in enumerate(formats.get(fmt).codes)}
  q = np.zeros(len(formats.get(fmt).values), np.int64)
  if plan.kind == "pure":
    for c in plan.main:
      q[index[int(c)]] += 1 << (32 - plan.width)
    return q
  for k, (start, pure) in enumerate(zip(plan.offset, plan.pure), 1):
    for c in plan.main[start:start + pure]:  # pure entries of level k
      q[index[int(c)]] += 1 << (32 - 8 * k)
  return q


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", LAWS[:10], ids=law_id)
def test_ddg_tree_samples_the_masses_exactly(case, fmt):
  name, params, _ = case
  _, probs = laws.rounded_law(name, fmt, **params)
  q = laws.quantize(probs, 32)
  plan = exact.plan_for_masses(q, formats.get(fmt).codes)
  np.testing.assert_array_equal(tree_law(plan, fmt), q)
  if plan.kind == "ddg":  # four levels at most, the last without deep entries
    assert len(plan.deep) == 4 and plan.deep[-1] == 0
    sizes = [256] + [d * 256 for d in plan.deep[:-1]]
    assert list(np.diff(list(plan.offset) + [len(plan.main)])) == sizes


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2",
                                 "float4_e2m1fn"])
@pytest.mark.parametrize("table_bits", [8, 9, 16])
def test_table_is_one_lookup_with_its_own_law(fmt, table_bits):
  p = table_method.sampling_plan("normal", fmt, (), table_bits)
  _, probs = table_method.table_law("normal", fmt, table_bits=table_bits)
  np.testing.assert_array_equal(tree_law(p, fmt) / 2**32, probs)
  assert p.kind == "pure" and len(p.main) == 1 << p.width
  # At most table_bits bits, widened only where that costs no more words.
  assert p.width >= table_bits or np.all(probs * 2**p.width % 1 == 0)
  assert table_method.bits_per_sample("normal", formats.get(fmt), {},
                                      table_bits) == pytest.approx(
      32 / (32 // p.width), rel=1e-5)
  # Fewer bits than the exact method's 18 (alias tables, one 16-bit draw
  # and the pooled refinement).
  assert table_method.bits_per_sample("normal", formats.get(fmt), {}) <= 16


@pytest.mark.parametrize("p", [0.0, 0.01, 0.3, 1.0])
def test_ranks_are_distinct_and_dense(p):
  rng = np.random.default_rng(1)
  mask = rng.random((32, 96)) < p
  rank, total = _jit_ranks(jax.device_put(mask))
  assert int(total) == mask.sum()
  np.testing.assert_array_equal(np.sort(np.asarray(rank)[mask]),
                                np.arange(mask.sum()))


def test_tree_refinement_gives_each_deep_sample_its_own_slot():
  rng = np.random.default_rng(2)
  deep = rng.random((32, 64)) < 0.2
  key = jax.random.key(3)
  rank, total = _jit_ranks(jax.device_put(deep))
  slots = 4 * 128
  r = jax.jit(exact.refinement, static_argnums=(3, 4))(
      key, rank, total, slots, 1)[0]
  k_pool, _ = jax.random.split(key)
  pool = np.asarray(bits_lib.words(k_pool, slots // 4)).view(np.uint8)
  np.testing.assert_array_equal(np.asarray(r)[deep],
                                pool[np.asarray(rank)[deep]])



@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("n_pad", [128, 4096, 1 << 20, 3 << 20])
def test_pool_slots_hold_ten_sigmas_on_a_coarse_grid(fmt, n_pad):
  """The pool covers the mean plus ten standard deviations, whole words on a
  grid of n_pad / 128 bytes (so nearby laws share a program), never more than
  every sample's bytes."""
  for dist in ("normal", "laplace", "cauchy"):
    # The DDG tree of a table's law (dyadic at 2^-16: two levels).
    _, probs = table_method.table_law(dist, fmt)
    p = exact.plan_for_masses(laws.quantize(probs, 32),
                              formats.get(fmt).codes)
    assert p.kind == "ddg" and p.levels == 2
    p1, _ = p.fractions
    slots = exact.pool_slots(p, n_pad)
    need = n_pad * p1 + 10 * np.sqrt(n_pad * p1 * (1 - p1))
    unit = 4 * max(1, n_pad // 512)
    assert slots % unit == 0
    assert min(need, n_pad) <= slots <= min(need + 32 + unit, n_pad)


@pytest.mark.parametrize("x", [-1e300, -1e30, -1e8, -3.0, 0.0, 2.0, 1e8])
def test_cauchy_cdf_keeps_its_left_tail(x):
  """0.5 + atan(x)/pi loses every digit below 1e-16; the table's doesn't."""
  from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top
  from jaxfp8._src import distributions  # pylint: disable=g-import-not-at-top
  got = distributions.get("cauchy").cdf(x)
  assert got == pytest.approx(scipy_stats.cauchy.cdf(x), rel=1e-13)


@pytest.mark.parametrize("x", [1e-100, 1e-20, 1e-5, 0.3, 0.99, 1.5, 2.9])
def test_maxwell_cdf_keeps_its_left_tail(x):
  """erf(x/sqrt2) - x exp(-x^2/2) cancels near 0, where F ~ x^3."""
  from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top
  from jaxfp8._src import distributions  # pylint: disable=g-import-not-at-top
  got = distributions.get("maxwell").cdf(x)
  assert got == pytest.approx(scipy_stats.maxwell.cdf(x), rel=1e-12)
