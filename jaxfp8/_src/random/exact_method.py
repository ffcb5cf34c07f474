"""The ``exact`` method: the rounded law, sampled with integer arithmetic.

At trace time the law of the real draw rounded into the format
(:func:`jaxfp8._src.random.laws.rounded_law`, float64) is quantized to integer masses
``q_i`` summing to ``2^32`` (each within ``2^-32`` of the true probability,
and equal to it when the law is dyadic at that resolution). On device a
sample picks value ``i`` with probability exactly ``q_i / 2^32``, by the plan
of the two below that draws fewer random bits (:func:`plan_for_masses`):

- **Pure tables.** If every ``q_i`` is a multiple of ``2^(32-w)`` for some
  ``w <= 16``, the law is a ``2^w``-entry table indexed by ``w`` random bits
  (packed ``32 // w`` to a word): one gather per sample. U[0, 1) in float4 is
  one (2 bits).
- **DDG trees.** Otherwise (and where the tree draws fewer bits: U[0, 1) in
  float8_e4m3fn, a 10-bit table, takes 8.3 bits by the tree) a radix-256
  Knuth--Yao tree (:func:`ddg_plan`): one random byte for every sample, one
  more for the fraction ``p1`` of samples under a deep entry of level 1
  (23% for normal in float8_e4m3fn), and 16 more for the rare samples that
  may reach levels 3 and 4 (1/256 of them). 9.97 bits per sample for normal
  in float8_e4m3fn (entropy 6.45), 9.16 in float8_e5m2 (5.49).

The tree's extra bytes come from a pool sized for the deep samples (mean
plus ten standard deviations), not from a draw per sample. A deep sample
takes the pool byte of its rank among the deep samples; the rank is a
popcount within a group of 32 samples plus a prefix sum over the groups. The
samples never gather from the pool: each quarter of a group (8 samples)
reads the 3 pool words that hold its bytes (a gather per quarter, not per
sample), and each sample picks its byte out of them with two selects. The
pass over every sample descends two levels. The rare samples are compacted
instead (:func:`pool_lib.rare_bytes`): rare sample ``j`` (by rank) finds its
group and lane, takes its level-2 byte and 16-bit slot ``j`` of a second
pool region, descends all the levels, and its table index replaces the
two-level one (a scatter of the rare slots). If more samples need bytes than the pool holds,
or more rare slots (beyond ten standard deviations, or about once in 10^7
calls of 2^22 samples), every sample takes fresh bits instead
(``lax.cond``). Either way each byte a sample uses is uniform and
independent of every other bit used, so ``P(i) = q_i / 2^32`` exactly.

The pool's size is an argument of the compiled program, not a constant: the
program holds a pool of ``n / 8`` words (enough for laws whose deep fraction
is up to 45%) and draws only the words this law's pool needs, in parts of
1/256 of it (:func:`bits_lib.words_upto`). One program thus serves most laws
of a format and shape, as the tables (padded to 2^16 entries) are arguments
too.

Why it is laid out this way (measured, 2^22 samples, 2-core CPU, JAX
0.10.2): XLA CPU inlines a gather's index computation into the gather's own
scalar loop, so a gather whose index is a rank (or a select over pool words)
took 9-22 ms where the same gather of a precomputed index takes 1 ms. Here
the per-sample work is a vectorized loop whose output (the table index,
uint16) is a buffer of its own, the ``lax.cond``'s result, and the one
per-sample gather reads it. And the program keeps its scratch small (about
24 MB at 2^22 samples): glibc serves allocations above 32 MB by ``mmap``
afresh on every call, and the page faults on a 34 MB scratch tripled the
time (17 ms against 5.5 ms). The fallback branch therefore draws its fresh
bits one lane row at a time (``lax.map``).
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.numerics import codes as codes_lib
from jaxfp8._src.numerics import formats
from jaxfp8._src.random import laws
from jaxfp8._src.random import bits as bits_lib
from jaxfp8._src.random import common
from jaxfp8._src.random import pool as pool_lib

_RADIX = 8            # bits per tree level
_LEVELS = 32 // _RADIX
_SIGMAS = 10          # pool slack, in binomial standard deviations
_PAD = 4 * pool_lib.GROUP  # samples are padded to whole groups of whole words
REFERENCE_N = 1 << 22  # the sample count plan_bits reports for


def free_width(width: int) -> int:
  """The widest draw costing the same words: 11 bits cost as much as 16 (two
  draws per word), 9 as much as 10 (three).

  >>> free_width(9), free_width(11), free_width(7)
  (10, 16, 8)
  """
  return max(w for w in range(width, 17)
             if bits_lib.per_word(w) == bits_lib.per_word(width))


class TreePlan(NamedTuple):
  """How a law is sampled (tables in NumPy, built once per law).

  ``kind`` is ``"pure"`` (``main`` has ``2^width`` codes, one per draw) or
  ``"ddg"`` (``main`` is the four tree levels concatenated; ``pure[k]`` is the
  number of pure entries of level ``k + 1``, ``offset[k]`` where the level
  starts in ``main``, ``deep[k]`` its number of deep entries).
  """
  kind: str
  width: int
  main: np.ndarray
  pure: tuple[int, ...] = ()
  offset: tuple[int, ...] = ()
  deep: tuple[int, ...] = ()

  @property
  def levels(self) -> int:
    """Tree levels a sample may read (1 for pure tables)."""
    return 1 + sum(1 for d in self.deep if d)

  def deep_fraction(self, level: int) -> float:
    """P(a sample reads past tree level ``level``, 1-based)."""
    return self.deep[level - 1] / float(1 << (_RADIX * level))

  @property
  def rare_byte(self) -> int:
    """The first level-1 byte from which a sample may read level 3: the deep
    entries of level 2 come last, so they hang under the last level-1 deep
    entries (under one byte of 256 for normal in float8_e4m3fn). 256 when no
    sample reads level 3."""
    return self.pure[0] + (self.pure[1] >> _RADIX)

  @property
  def fractions(self) -> tuple[float, float]:
    """The pool fractions: samples that take a level-2 byte (level-1 deep),
    and samples that take 16 more bits (level-1 byte at least
    :attr:`rare_byte`)."""
    return (self.deep_fraction(1),
            ((1 << _RADIX) - self.rare_byte) / float(1 << _RADIX))


def ddg_plan(q: np.ndarray, codes: np.ndarray) -> TreePlan:
  """The radix-256 DDG tree of integer masses ``q`` (summing to ``2^32``).

  Level 1 is a 256-entry table indexed by one random byte: ``d_i1`` entries
  of each value (``q_i = d_i1 2^24 + d_i2 2^16 + d_i3 2^8 + d_i4``), then the
  deep entries. A deep entry of level ``k`` owns 256 entries of level
  ``k + 1``, which hold ``d_i(k+1)`` entries of each value and then the next
  deep entries. An entry of level ``k`` has mass ``2^-8k``, so value ``i``
  gets ``q_i / 2^32`` exactly, and level 4 has no deep entries.

  Args:
    q: int64 masses in units of ``2^-32``, one per value.
    codes: the uint8 code of each value.

  Returns:
    A ``"ddg"`` plan whose tables give value ``i`` mass ``q[i] / 2^32``
    exactly.

  >>> p = ddg_plan(np.array([2**31 + 3, 2**31 - 3]), np.array([7, 9]))
  >>> p.pure, p.deep, p.levels  # 1/256 of draws reads past level 1
  ((255, 255, 255, 256), (1, 1, 1, 0), 4)
  """
  q = np.asarray(q, np.int64)
  if int(q.sum()) != 1 << 32 or np.any(q < 0):
    raise ValueError("`q` argument to `ddg_plan` must be non-negative masses "
                     f"summing to 2^32, got a sum of {int(q.sum())}")
  codes = np.asarray(codes, np.uint8)
  tables, pure, deep, offset = [], [], [], []
  size, start = 1 << _RADIX, 0
  for k in range(1, _LEVELS + 1):
    digit = (q >> (32 - _RADIX * k)) & ((1 << _RADIX) - 1)
    entries = np.repeat(codes, digit)
    n_deep = size - len(entries)
    assert n_deep >= 0 and (k < _LEVELS or n_deep == 0), "DDG lost mass"
    # Deep entries hold a placeholder: a sample never reads them.
    tables.append(np.concatenate([entries, np.zeros(n_deep, np.uint8)]))
    pure.append(len(entries))
    deep.append(n_deep)
    offset.append(start)
    start += size
    size = n_deep << _RADIX
  return TreePlan("ddg", _RADIX, np.concatenate(tables).astype(np.uint8),
                  tuple(pure), tuple(offset), tuple(deep))


def plan_for_masses(q: np.ndarray, codes: np.ndarray) -> TreePlan:
  """The plan that draws masses ``q`` (units of ``2^-32``) exactly in the
  fewest random bits (:func:`plan_bits`): a pure table if the masses are
  multiples of ``2^(32 - w)`` for some ``w <= 16`` and no tree draws fewer
  bits, else their DDG tree (:func:`ddg_plan`).

  >>> plan_for_masses(np.array([2**30, 3 * 2**30]), np.array([1, 2])).main
  array([1, 2, 2, 2], dtype=uint8)
  >>> plan_for_masses(np.array([2**31 + 3, 2**31 - 3]), np.array([7, 9])).kind
  'ddg'
  """
  q = np.asarray(q, np.int64)
  candidates = []
  width = next((w for w in range(1, 17) if np.all(q % (1 << (32 - w)) == 0)),
               None)
  if width is not None:
    width = free_width(width)
    candidates.append(TreePlan("pure", width, np.repeat(
        np.asarray(codes, np.uint8), q >> (32 - width))))
  if width is None or width > _RADIX:
    candidates.append(ddg_plan(q, codes))
  return min(candidates, key=plan_bits)  # the pure table on a tie


@functools.lru_cache(maxsize=256)
def plan(dist: str, fmt_name: str, params: tuple[tuple[str, float], ...]
         ) -> TreePlan:
  """The exact plan of a law (:func:`plan_for_masses` of its quantized
  masses), built once per law."""
  fmt = formats.get(fmt_name)
  _, probs = laws.rounded_law(dist, fmt, **dict(params))
  return plan_for_masses(laws.quantize(probs, 32), common.codes_table(fmt))


def pool_sizes(p: TreePlan, n_pad: int) -> tuple[int, int]:
  """``(bytes, slots)``: the pool's level-2 bytes and 16-bit rare slots for
  ``n_pad`` samples of the DDG plan ``p``: each the mean need plus ten
  binomial standard deviations and one group, in whole words.

  >>> p = ddg_plan(np.array([2**31 + 3, 2**31 - 3]), np.array([7, 9]))
  >>> p.fractions  # 1/256 of samples deep, and they may reach level 3
  (0.00390625, 0.00390625)
  >>> pool_sizes(p, 1 << 20)  # 4,096 + 10 * 63.9 + 32 needed
  (4768, 4768)
  """
  out = []
  for f, unit in zip(p.fractions, (4, 2)):
    need = (n_pad * f + _SIGMAS * math.sqrt(n_pad * f * (1 - f))
            + pool_lib.GROUP)
    out.append(min(-(-int(math.ceil(need)) // unit) * unit, n_pad))
  return out[0], (out[1] if p.levels > 2 else 0)


def _capacity(words: int) -> int:
  """``words`` rounded up to a pool capacity that is whole loop parts of
  :func:`bits_lib.part_words` (512 words, or 1/256 of it above 2^17), and
  at least 1024."""
  step = 1 << 17 if words > 1 << 17 else 512
  return max(1024, -(-words // step) * step)


class _Pool(NamedTuple):
  """A call's pool: its level-2 bytes and rare slots (:func:`pool_sizes`),
  the word counts they take (arguments of the program, so that laws share
  it), and the capacities they fit in (static)."""
  n_bytes: int
  slots: int

  @property
  def words(self) -> int:
    """The level-2 region's words, from word 0 of the pool, with the slack
    a window at its last byte reads."""
    return self.n_bytes // 4 + pool_lib.WINDOW

  @property
  def rare_words(self) -> int:
    """The rare region's words, right after it (0: no sample reads level
    3)."""
    return self.slots // 2

  def counts(self) -> np.ndarray:
    """The program's traced counts: bytes, slots, words, rare words."""
    return np.array([self.n_bytes, self.slots, self.words, self.rare_words],
                    np.int32)

  def capacity(self, n_pad: int) -> int:
    """The pool's size in the program: n_pad / 8 words (a level-2 byte for
    up to 45% of the samples, and their rare slots), else n_pad (every
    byte and slot a call can use), at least 1024 words; so most laws of a
    format and shape share one program."""
    small = _capacity(n_pad // 8)
    return small if self.words + self.rare_words <= small else _capacity(
        n_pad)

  @property
  def rare_capacity(self) -> int:
    """The rare slots the program compacts (static): ``slots`` rounded up
    to a power of two, at least 256 (0 without rare slots)."""
    return max(256, 1 << (self.slots - 1).bit_length()) if self.slots else 0

  def computed(self, n_pad: int) -> int:
    """Words a call draws for the pool (:func:`bits_lib.words_computed`)."""
    return bits_lib.words_computed(self.words + self.rare_words,
                                   self.capacity(n_pad))


def _pool(p: TreePlan, n_pad: int) -> _Pool:
  """The pool of a call of ``n_pad`` samples of the DDG plan ``p``."""
  return _Pool(*pool_sizes(p, n_pad))


def _words_drawn(p: TreePlan, n_pad: int) -> int:
  """Random words one call of ``n_pad`` samples draws (pools included)."""
  if p.kind == "pure":
    return -(-n_pad // bits_lib.per_word(p.width))
  return n_pad // 4 + _pool(p, n_pad).computed(n_pad)


def plan_bits(p: TreePlan, n: int = REFERENCE_N) -> float:
  """Random bits per sample that a call of ``n`` samples draws with plan
  ``p``, every word computed counted except Threefry's padding of each
  draw to whole blocks (up to 511 words: < 0.01 bit per sample at 2^22).

  >>> plan_bits(plan("normal", "float8_e4m3fn", ()))  # entropy 6.45
  9.97...
  """
  n_pad = bits_lib.padded_size((n,), _PAD)[1]
  return 32 * _words_drawn(p, n_pad) / n


def bits_per_sample(dist: str, fmt: formats.Format, params: dict) -> float:
  """Random bits a call of 2^22 samples of the exact method spends per
  sample, every word drawn counted."""
  return plan_bits(plan(dist, fmt.name, tuple(sorted(params.items()))))


def _descend(main, pure, offset, levels: int, u, r2, r3):
  """The table index of each sample, descending ``levels`` levels: level-1
  byte ``u``, its level-2 byte ``r2`` and (for samples that go deeper) the 16
  bits ``r3`` of levels 3 and 4 (int32 arrays of one shape; ``r3`` unused
  when ``levels <= 2``)."""
  deep = u >= pure[0]
  e = ((u - pure[0]) << _RADIX) + r2
  index = jnp.where(deep, offset[1] + e, u)
  for k in range(2, levels):
    deep = deep & (e >= pure[k - 1])
    e = ((e - pure[k - 1]) << _RADIX) + ((r3 >> (_RADIX * (k - 2))) & 0xFF)
    index = jnp.where(deep, offset[k] + e, index)
  return index.astype(_index_type(main))


def _index_type(main) -> jnp.dtype:
  """The dtype of indices into table ``main``: uint16 where they fit."""
  return jnp.uint16 if main.shape[0] <= 1 << 16 else jnp.int32


@functools.partial(jax.jit, static_argnames=(
    "kind", "width", "levels", "capacity", "rare_capacity", "fmt_name",
    "shape", "force_fresh"))
def _tree_sample(key, main, pure, offset, counts, *, kind, width, levels,
                 capacity, rare_capacity, fmt_name, shape, force_fresh=False):
  # The tables and the pool's counts are arguments, not constants: one
  # compilation serves every law of a format, table size class, shape, depth
  # and pool capacities.
  fmt = formats.get(fmt_name)
  n, n_pad = bits_lib.padded_size(shape, _PAD)
  if kind == "pure":
    codes = main[bits_lib.packed(key, n, width)]
    return codes_lib.from_codes(codes.reshape(shape), fmt)
  n_bytes, slots, words, rare_words = (counts[i] for i in range(4))
  groups = n_pad // pool_lib.GROUP
  k_main, k_pool, k_fresh = jax.random.split(key, 3)
  # Samples live as (32, G): lane-major, so that a group's lanes are rows.
  w = bits_lib.word_rows(k_main, pool_lib.GROUP // 4, groups)
  # A separate draw, so that a sharded call computes only its shard's first
  # bytes (the pool, n / 8 words at most, is drawn whole): only as many
  # words as this law's pool needs.
  pool = bits_lib.words_upto(k_pool, words + rare_words, capacity)

  m1 = pool_lib.byte_masks(w, pure[0])
  m3 = (pool_lib.byte_masks(w, pure[0] + (pure[1] >> _RADIX), shifted=True)
        if levels > 2 else m1)
  b1 = pool_lib.exclusive_ranks(m1)
  b3 = pool_lib.exclusive_ranks(m3) if levels > 2 else jnp.zeros_like(b1)
  overflow = pool_lib.overflows(m1, m3, b1, b3, n_bytes, slots, levels)
  # No rare samples: every slot out of bounds.
  no_rare = (jnp.full(rare_capacity, n_pad, jnp.int32),
             jnp.zeros(rare_capacity, _index_type(main)))

  # The branches take the masks as operands (computed once, small) and
  # their samples' first bytes again from ``w`` (fused into their pass).
  def pooled(w, m1, m3, b1, b3, pool, words):
    index = _descend(main, pure, offset, 2, pool_lib.lanes(w, _RADIX),
                     pool_lib.pooled_bytes(pool, m1, b1), None)
    if levels <= 2:
      return (index, *no_rare)
    # The rare samples, compacted, descend every level.
    position, u, r2, r3 = pool_lib.rare_bytes(w, pool, words, m1, m3, b1, b3,
                                              slots=rare_capacity)
    return index, position, _descend(main, pure, offset, levels, u, r2, r3)

  def fresh(w, m1, m3, b1, b3, pool, words):
    del m1, m3, b1, b3, pool, words
    # One lane row at a time, so that this branch's scratch stays small.
    def row(l):
      word_row = lax.dynamic_index_in_dim(w, l // 4, 0, keepdims=True)
      u = ((word_row >> (8 * (l % 4)).astype(jnp.uint32)) & 0xFF).astype(
          jnp.int32)
      f = bits_lib.words_at(k_fresh, l * groups, groups)[None]
      return _descend(main, pure, offset, levels, u,
                      (f & 0xFF).astype(jnp.int32),
                      (f >> 8 & 0xFFFF).astype(jnp.int32))[0]
    return (lax.map(row, jnp.arange(pool_lib.GROUP)), *no_rare)

  index, position, rare = lax.cond(overflow | force_fresh, fresh, pooled, w,
                                   m1, m3, b1, b3, pool, words)
  # The rare samples' indices replace the two-level ones (a scatter of
  # ``rare_capacity`` entries, the out-of-bounds ones dropped).
  index = index.reshape(n_pad).at[position].set(rare, mode="drop")
  codes = main.at[index[:n].astype(jnp.int32)].get(mode="promise_in_bounds")
  return codes_lib.from_codes(codes.reshape(shape), fmt)


def _table_class(size: int) -> int:
  """The padded length of a tree's table: 2^16 (uint16 indices) or 2^18
  (four levels hold at most 256 * (1 + 3 * 255) entries)."""
  return 1 << 16 if size <= 1 << 16 else 1 << 18


def sample_plan(key, p: TreePlan, shape: tuple[int, ...], fmt: formats.Format,
                *, force_fresh: bool = False, pool: _Pool | None = None):
  """Samples of the law of plan ``p`` in ``fmt`` (native array or
  CodeArray). ``force_fresh`` takes the overflow branch and ``pool``
  replaces the pool's sizes (both for tests)."""
  if p.kind == "pure":
    return _tree_sample(key, p.main, np.zeros(1, np.int32),
                        np.zeros(1, np.int32), np.zeros(4, np.int32),
                        kind="pure", width=p.width, levels=1, capacity=0,
                        rare_capacity=0, fmt_name=fmt.name, shape=tuple(shape))
  n_pad = bits_lib.padded_size(tuple(shape), _PAD)[1]
  pool = pool or _pool(p, n_pad)
  main = np.zeros(_table_class(len(p.main)), np.uint8)
  main[:len(p.main)] = p.main
  return _tree_sample(key, main, np.array(p.pure, np.int32),
                      np.array(p.offset, np.int32),
                      pool.counts(), kind="ddg", width=p.width,
                      levels=p.levels,
                      capacity=pool.capacity(n_pad),
                      rare_capacity=pool.rare_capacity,
                      fmt_name=fmt.name, shape=tuple(shape),
                      force_fresh=force_fresh)


def sample(key, dist: str, shape: tuple[int, ...], fmt: formats.Format,
           params: dict[str, float]):
  """Exact samples of ``dist`` (concrete scalar ``params``) in ``fmt``."""
  return sample_plan(key, plan(dist, fmt.name, tuple(sorted(params.items()))),
                     shape, fmt)


@functools.partial(jax.jit, static_argnames=("shape", "bits"))
def _bernoulli(key, p, *, shape, bits):
  p = jnp.broadcast_to(p, shape).astype(jnp.float32)
  n, n_pad = bits_lib.padded_size(shape, 2)
  if bits == 32:
    u = bits_lib.words(key, n)
  else:
    u = (bits_lib.uint16(key, n_pad)[:n] >> (16 - bits)).astype(jnp.uint32)
  # p * 2^bits is exact in float32; rounding it moves P(True) by < 2^-(bits+1).
  scaled = jnp.round(p.reshape(n) * np.float32(2.0**bits))
  t = jnp.where(scaled >= np.float32(2.0**32), jnp.uint32(0xFFFFFFFF),
                jnp.maximum(scaled, 0).astype(jnp.uint32))
  return ((u < t) | (p.reshape(n) >= 1)).reshape(shape)


def bernoulli(key, p, shape: tuple[int, ...], bits: int = 32):
  """True with probability ``round(p * 2^bits) / 2^bits`` (p per element).

  ``bits`` random bits per sample (32: P(True) within 2^-33 of ``p``).
  """
  return _bernoulli(key, p, shape=tuple(shape), bits=bits)


@functools.partial(jax.jit, static_argnames=("shape", "fmt_name"))
def _rademacher(key, *, shape, fmt_name):
  fmt = formats.get(fmt_name)
  n, n_pad = bits_lib.padded_size(shape, 32)
  w = bits_lib.words(key, n_pad // 32)
  bit = (w[:, None] >> jnp.arange(32, dtype=jnp.uint32)) & 1
  plus, minus = (int(c) for c in common.codes_table(fmt)[
      np.searchsorted(fmt.values, [1.0, -1.0])])
  codes = jnp.where(bit.reshape(n_pad)[:n] == 1, jnp.uint8(plus),
                    jnp.uint8(minus))
  return codes_lib.from_codes(codes.reshape(shape), fmt)


def rademacher(key, shape: tuple[int, ...], fmt: formats.Format):
  """+-1 in ``fmt`` with probability 1/2 each: one random bit per sample."""
  return _rademacher(key, shape=tuple(shape), fmt_name=fmt.name)
