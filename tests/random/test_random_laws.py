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
from jaxfp8._src.random import bits as bits_lib
from jaxfp8._src.random import distributions
from jaxfp8._src.random import exact_method as exact
from jaxfp8._src.random import laws
from jaxfp8._src.random import pool as pool_lib
from jaxfp8._src.random import table_method
from jaxfp8._src.random import tree_plan
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


def tree_law(plan, fmt) -> np.ndarray:
  """The law a plan samples, read back from its tables (2^32 units)."""
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
@pytest.mark.parametrize("case", LAWS, ids=law_id)
def test_exact_tables_sample_the_law_within_2_to_minus_32(case, fmt):
  name, params, _ = case
  plan = exact.plan(name, fmt, tuple(sorted(params.items())))
  q = tree_law(plan, fmt)
  assert q.sum() == 2**32
  _, probs = laws.rounded_law(name, fmt, **params)
  np.testing.assert_array_equal(q, laws.quantize(probs, 32))
  assert np.all(np.abs(q / 2**32 - probs) < 2**-32)
  if plan.kind == "ddg":  # four levels at most, the last without deep entries
    assert len(plan.deep) == 4 and plan.deep[-1] == 0
    sizes = [256] + [d * 256 for d in plan.deep[:-1]]
    assert list(np.diff(list(plan.offset) + [len(plan.main)])) == sizes
  else:
    assert len(plan.main) == 1 << plan.width


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("bounds", [(0.0, 1.0), (-1.0, 1.0), (-0.25, 0.75),  # widths 2^k
                                    (0.0, 2.0**-6)])
def test_dyadic_uniform_is_exact(fmt, bounds):
  lo, hi = bounds
  params = {"minval": lo, "maxval": hi}
  _, probs = laws.rounded_law("uniform", fmt, **params)
  q = tree_law(exact.plan("uniform", fmt, tuple(sorted(params.items()))), fmt)
  np.testing.assert_array_equal(q / 2**32, probs)  # equal, not close


def test_the_plan_with_the_fewest_bits():
  e4m3, e5m2 = formats.get("e4m3"), formats.get("e5m2")
  # U[0,1) in float4: masses are multiples of 2^-2 -> 2-bit draws, sixteen
  # to a word. In e4m3fn, of 2^-10: a 10-bit table costs 10.7 bits (three
  # draws to a word), its DDG tree 8.3 (3.5% of samples take a second byte).
  assert exact.plan("uniform", "float4_e2m1fn", ()).kind == "pure"
  assert exact.bits_per_sample("uniform", formats.get("e2m1"), {}) == 2
  p = exact.plan("uniform", "float8_e4m3fn", ())
  assert (p.kind, p.levels) == ("ddg", 2)
  assert exact.bits_per_sample("uniform", e4m3, {}) == pytest.approx(8.29,
                                                                   abs=0.01)
  # e5m2's U[0,1) has an atom of 2^-17 at zero: three levels.
  assert exact.plan("uniform", "float8_e5m2", ()).levels == 3
  assert exact.bits_per_sample("uniform", e5m2, {}) < 8.3
  # Normal: near the entropy (6.45 and 5.49 bits), at most 10.
  assert 9.9 < exact.bits_per_sample("normal", e4m3, {}) <= 10
  assert 9.1 < exact.bits_per_sample("normal", e5m2, {}) <= 9.2
  # A tie goes to the lookup: a law dyadic at 8 bits is one byte either way.
  q = np.full(256, 1 << 24, np.int64)
  assert tree_plan.plan_for_masses(q, np.arange(256)).kind == "pure"


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


@pytest.mark.parametrize("rows,cols", [(8, 64), (8, 4096), (2, 300), (3, 8)])
def test_word_rows_are_the_words_planar(rows, cols):
  """Row r < rows / 2 holds the first hash words of counters r * cols ..,
  row r + rows / 2 their second words (odd ``rows``: :func:`words`
  reshaped); other keys draw :func:`words` reshaped."""
  key = jax.random.key(rows * cols)
  got = np.asarray(jax.jit(bits_lib.word_rows, static_argnums=(1, 2))(
      key, rows, cols))
  flat = np.asarray(bits_lib.words(key, rows * cols + 1))
  if rows % 2:
    want = flat[:rows * cols].reshape(rows, cols)
  else:
    half = rows // 2 * cols
    want = np.concatenate([flat[0:2 * half:2], flat[1:2 * half:2]])
    want = want.reshape(rows, cols)
  np.testing.assert_array_equal(got, want)
  rbg = jax.random.key(3, impl="rbg")
  np.testing.assert_array_equal(
      bits_lib.word_rows(rbg, rows, cols),
      np.asarray(bits_lib.words(rbg, rows * cols)).reshape(rows, cols))


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


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", LAWS[:10], ids=law_id)
def test_ddg_tree_samples_the_masses_exactly(case, fmt):
  name, params, _ = case
  _, probs = laws.rounded_law(name, fmt, **params)
  q = laws.quantize(probs, 32)
  plan = tree_plan.plan_for_masses(q, formats.get(fmt).codes)
  np.testing.assert_array_equal(tree_law(plan, fmt), q)
  if plan.kind == "ddg":  # four levels at most, the last without deep entries
    assert len(plan.deep) == 4 and plan.deep[-1] == 0
    sizes = [256] + [d * 256 for d in plan.deep[:-1]]
    assert list(np.diff(list(plan.offset) + [len(plan.main)])) == sizes


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2",
                                 "float4_e2m1fn"])
@pytest.mark.parametrize("table_bits", [8, 9, 16])
def test_table_plan_samples_its_own_law_in_the_fewest_bits(fmt, table_bits):
  p = table_method.sampling_plan("normal", fmt, (), table_bits)
  _, probs = table_method.table_law("normal", fmt, table_bits=table_bits)
  np.testing.assert_array_equal(tree_law(p, fmt) / 2**32, probs)
  bits = table_method.bits_per_sample("normal", formats.get(fmt), {},
                                      table_bits)
  if table_bits <= 8:  # one lookup of at most a byte
    assert p.kind == "pure" and p.width <= 8
    assert bits == pytest.approx(32 / (32 // p.width), rel=1e-5)
  else:  # the tree of a law dyadic at 2^-16: two levels, fewer bits
    assert p.kind == "ddg" and p.levels == 2
    assert bits < 32 / (32 // table_bits)
  # Never more bits than the exact method's tree of the exact law.
  assert bits <= exact.bits_per_sample("normal", formats.get(fmt), {})


def np_group_masks(mask):
  """Each column of a (32, G) bool mask as a uint32 word (bit l: row l)."""
  return (mask.astype(np.uint64) << np.arange(32, dtype=np.uint64)[:, None]
          ).sum(0).astype(np.uint32)


_jit_ranks = jax.jit(pool_lib.exclusive_ranks)


def _masks(mask):
  word = np_group_masks(mask)
  return word, np.asarray(_jit_ranks(jax.device_put(word)))


@pytest.mark.parametrize("shifted", [False, True])
@pytest.mark.parametrize("p", [0.0, 0.01, 0.3, 1.0])
def test_byte_masks_and_ranks(p, shifted):
  rng = np.random.default_rng(1)
  g = 96
  w = rng.integers(0, 2**32, (8, g), dtype=np.uint64).astype(np.uint32)
  threshold = int(round(256 * (1 - p)))
  got = np.asarray(jax.jit(pool_lib.byte_masks, static_argnames="shifted")(
      w, threshold, shifted=shifted))
  lanes = np.asarray(pool_lib.lanes(jax.device_put(w), 8))
  np.testing.assert_array_equal(got, np_group_masks(lanes >= threshold))
  mask = rng.random((32, g)) < p
  word, before = _masks(mask)
  counts = mask.sum(0)
  np.testing.assert_array_equal(before, np.cumsum(counts) - counts)


def test_nth_set_bit():
  rng = np.random.default_rng(4)
  m = np.concatenate([rng.integers(1, 2**32, 500, dtype=np.uint64),
                      [1, 2**31, 2**32 - 1]]).astype(np.uint32)
  bits = [np.flatnonzero((int(x) >> np.arange(32)) & 1) for x in m]
  t = np.array([rng.integers(0, len(b)) for b in bits], np.uint32)
  got = np.asarray(jax.jit(pool_lib.nth_set_bit)(m, t))
  np.testing.assert_array_equal(got, [b[i] for b, i in zip(bits, t)])
  full = np.full(32, 2**32 - 1, np.uint32)  # every position of a full mask
  np.testing.assert_array_equal(
      np.asarray(pool_lib.nth_set_bit(full, np.arange(32, dtype=np.uint32))),
      np.arange(32))


_jit_pooled = jax.jit(pool_lib.pooled_bytes)


@pytest.mark.parametrize("p_deep", [0.05, 0.25, 0.9, 1.0])
def test_each_sample_reads_its_own_pool_bytes(p_deep):
  """Deep sample r (rank among the deep samples) gets byte r of the level-2
  pool: distinct bytes, whatever the groups' alignments in the windows."""
  rng = np.random.default_rng(int(p_deep * 100))
  g = 64
  deep = rng.random((32, g)) < p_deep
  deep[:, 0] = True  # a group of 32 deep samples (the most)
  m1, b1 = _masks(deep)
  words = int(deep.sum()) // 4 + pool_lib.WINDOW
  pool = rng.integers(0, 2**32, words, dtype=np.uint64).astype(np.uint32)
  r2 = _jit_pooled(jax.device_put(pool), m1, b1)
  rank2 = (np.cumsum(deep.T.ravel()) - 1).reshape(g, 32).T  # lane-major ranks
  np.testing.assert_array_equal(np.asarray(r2)[deep],
                                pool.view(np.uint8)[rank2[deep]])


_jit_rare = jax.jit(pool_lib.rare_bytes, static_argnames="slots")


@pytest.mark.parametrize("fmt, dist", [("float8_e4m3fn", "normal"),
                                       ("float8_e5m2", "uniform")])
@pytest.mark.parametrize("p_rare", [0.004, 0.1])
def test_rare_samples_are_compacted_in_rank_order(fmt, dist, p_rare):
  """Rare sample j (rank among the rare samples, group-major) lands in slot
  j with its own position, its own first byte, its level-2 pool byte (of
  its rank among the deep samples) and 16-bit rare slot j; slots past the
  rare samples point out of bounds."""
  p = exact.plan(dist, fmt, ())
  assert p.levels > 2
  rng = np.random.default_rng(int(p_rare * 1000))
  g = 64
  # First bytes: rare (>= rare_byte), deep but not rare, or pure.
  kind = rng.random((32, g))
  u = np.where(kind < p_rare, rng.integers(p.rare_byte, 256, (32, g)),
               np.where(kind < 0.3, rng.integers(p.pure[0], p.rare_byte,
                                                 (32, g)),
                        rng.integers(0, p.pure[0], (32, g))))
  u[:, 5] = 255  # a group of 32 rare samples
  u[:, 6] = 0    # and one of none
  w = np.zeros((8, g), np.uint32)  # lane 4 * row + b is byte b of a word
  for lane in range(32):
    w[lane // 4] |= (u[lane].astype(np.uint32) << (8 * (lane % 4)))
  deep, rare = u >= p.pure[0], u >= p.rare_byte
  m1, b1 = _masks(deep)
  m3, b3 = _masks(rare)
  n_deep, n_rare = int(deep.sum()), int(rare.sum())
  words = n_deep // 4 + pool_lib.WINDOW
  pool = rng.integers(0, 2**32, words + n_rare // 2 + 1,
                      dtype=np.uint64).astype(np.uint32)
  slots = 1 << n_rare.bit_length()
  position, *got = (np.asarray(a) for a in _jit_rare(
      jax.device_put(w), jax.device_put(pool), words, m1, m3, b1, b3,
      slots=slots))
  lane, group = np.nonzero(rare.T)[::-1]  # group-major order
  np.testing.assert_array_equal(position[:n_rare], lane * g + group)
  assert np.all(position[n_rare:] == 32 * g)
  rank2 = (np.cumsum(deep.T.ravel()) - 1).reshape(g, 32).T
  r2 = pool.view(np.uint8)[rank2[lane, group]]
  r3 = pool[words:].view(np.uint16)[:n_rare]
  for a, want in zip(got, (u[lane, group], r2, r3)):
    np.testing.assert_array_equal(a[:n_rare], want)


def test_overflow_conditions():
  """Too many level-2 bytes or too many rare slots (in any one group:
  the rare samples are compacted, with no window to fill)."""
  def check(deep, rare, n_bytes, slots, levels=4):
    m1, b1 = _masks(deep)
    m3, b3 = _masks(rare)
    return bool(pool_lib.overflows(m1, m3, b1, b3, n_bytes, slots, levels))
  deep = np.zeros((32, 4), bool)
  rare = np.zeros((32, 4), bool)
  deep[:10] = True  # 40 level-2 bytes
  assert not check(deep, rare, 40, 0) and check(deep, rare, 39, 0)
  rare[:10, 1] = True  # group 1: 10 rare slots
  assert not check(deep, rare, 40, 10) and check(deep, rare, 40, 9)
  assert not check(deep, rare, 40, 0, levels=2)  # no rare samples there


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("n_pad", [128, 4096, 1 << 20, 3 << 20])
def test_pool_sizes_hold_ten_sigmas(fmt, n_pad):
  """Each region covers the mean plus ten standard deviations and a group,
  in whole words, never more than a byte or slot per sample; its capacity
  (the compiled size) is the next power of two, and what is drawn of it
  stays within a part (capacity / 64) of the need."""
  for dist in ("normal", "laplace", "cauchy"):
    p = exact.plan(dist, fmt, ())
    assert p.kind == "ddg" and p.levels == 4
    pool = tree_plan.pool_for(p, n_pad)
    for f, size, unit in zip(p.fractions, pool[:2], (4, 2)):
      need = n_pad * f + 10 * np.sqrt(n_pad * f * (1 - f)) + 32
      assert size % unit == 0
      assert min(need, n_pad) <= size <= min(need + unit, n_pad)
    assert pool.rare_words == pool.slots // 2
    rare_cap = pool.rare_capacity  # static: a power of two, >= 256
    assert rare_cap >= max(pool.slots, 256) and rare_cap & (rare_cap - 1) == 0
    assert rare_cap < 2 * max(pool.slots, 256)
    cap = pool.capacity(n_pad)
    assert pool.words + pool.rare_words <= cap
    assert cap == max(1024, n_pad // 8)  # these laws share a program
    drawn = pool.computed(n_pad)
    part = bits_lib.part_words(cap)
    assert cap % part == 0 and part <= max(512, cap // 256)
    assert pool.words + pool.rare_words <= drawn < (
        pool.words + pool.rare_words + part)


_jit_upto = jax.jit(bits_lib.words_upto, static_argnums=2)


@pytest.mark.parametrize("count", [1, 511, 512, 513, 1024, 3000, 4096])
def test_words_upto_draws_the_stream_up_to_count(count):
  key = jax.random.key(9)
  got = np.asarray(_jit_upto(key, count, 4096))  # parts of 512 words
  np.testing.assert_array_equal(got[:count],
                                np.asarray(bits_lib.words(key, count)))
  drawn = bits_lib.words_computed(count, 4096)
  assert drawn == -(-count // 512) * 512
  assert got.shape == (4096,) and np.all(got[drawn:] == 0)  # not computed
  rbg = np.asarray(_jit_upto(jax.random.key(9, impl="rbg"), count, 4096))
  assert len(np.unique(rbg[:count])) >= count - 1  # distinct words: drawn


@pytest.mark.parametrize("x", [-1e300, -1e30, -1e8, -3.0, 0.0, 2.0, 1e8])
def test_cauchy_cdf_keeps_its_left_tail(x):
  """0.5 + atan(x)/pi loses every digit below 1e-16; the table's doesn't."""
  from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top
  from jaxfp8._src.random import distributions  # pylint: disable=g-import-not-at-top
  got = distributions.get("cauchy").cdf(x)
  assert got == pytest.approx(scipy_stats.cauchy.cdf(x), rel=1e-13)


@pytest.mark.parametrize("x", [1e-100, 1e-20, 1e-5, 0.3, 0.99, 1.5, 2.9])
def test_maxwell_cdf_keeps_its_left_tail(x):
  """erf(x/sqrt2) - x exp(-x^2/2) cancels near 0, where F ~ x^3."""
  from scipy import stats as scipy_stats  # pylint: disable=g-import-not-at-top
  from jaxfp8._src.random import distributions  # pylint: disable=g-import-not-at-top
  got = distributions.get("maxwell").cdf(x)
  assert got == pytest.approx(scipy_stats.maxwell.cdf(x), rel=1e-12)


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5, 11), (64, 48)])
def test_bits32_are_jax_random_bits(shape):
  # The recipes' stochastic rounding reads these words: they must be
  # jax.random.bits' own (the references draw with it), for raw and typed
  # keys, split keys and odd counts.
  for key in (jax.random.key(0), jax.random.PRNGKey(5),
              jax.random.split(jax.random.key(9))[1]):
    got = jax.jit(bits_lib.bits32, static_argnums=1)(key, shape)
    np.testing.assert_array_equal(
        np.asarray(got), np.asarray(jax.random.bits(key, shape, jnp.uint32)))
