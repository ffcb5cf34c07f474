"""The ``exact`` method: the rounded law, sampled with integer arithmetic.

At trace time the law of the real draw rounded into the format
(:func:`jaxfp8._src.laws.rounded_law`, float64) is quantized to integer masses
``q_i`` summing to ``2^32`` (each within ``2^-32`` of the true probability,
and equal to it when the law is dyadic at that resolution). On device a
sample picks value ``i`` with probability exactly ``q_i / 2^32``:

- **Pure tables.** If every ``q_i`` is a multiple of ``2^(32-w)`` for some
  ``w <= 16``, the law is a ``2^w``-entry table indexed by ``w`` random bits
  (packed ``32 // w`` to a word): one gather per sample. Uniform on [0, 1) is
  such a law in most formats (its masses are powers of two no smaller than
  half the smallest subnormal: 10 bits for float8_e4m3fn, 2 for float4).
- **Two-level tables.** If all but at most 1/32 of the mass is pure at
  16 bits and the rest is pure at ``w2 <= 8`` bits further, a draw takes 16
  coarse bits and ``w2`` more (packed ``32 // w2`` to a word, drawn for every
  sample: no pool), and reads a second table where the coarse bucket is a
  fine one. U[0, 1) in float8_e5m2 (atom 2^-17 at zero) costs 17 bits. (Until
  2026-12-01 these plans drew 10 coarse bits and pooled the fine draws' 7:
  12.7 bits, at 0.77x this plan's speed.)
- **Alias tables with a rare refinement.** Otherwise a 65,536-bucket alias
  table (Walker/Vose, in integers): bucket ``j`` holds two codes ``a, b`` and
  a 16-bit threshold ``t``, packed in one uint32 (one gather per sample); the
  sample is ``a`` if ``r < t`` else ``b`` for 16 more random bits ``r``. At
  most one bucket per value is split (``0 < t``), so a sample needs ``r``
  with probability at most ``(#values)/65536`` (0.4% for fp8).

The alias tables' refinement bits come from a small pool: every group of 32
samples owns two extra words (four 16-bit slots) and its k-th sample needing
one takes slot k (k from a popcount of the group's mask: no sort, no scan).
If any group needs more slots than it has (in 0.2% of calls of 2^22 fp8
normal samples, 2% for cauchy), the whole batch takes its refinements from a
fresh stream instead (``lax.cond``).
Either way each refinement used is uniform and independent of everything
else, so ``P(i) = q_i / 2^32`` exactly.

Bits per sample: ``32 / (32 // w)`` for pure tables (10.7 for a 10-bit law),
``16 + 32 / (32 // w2)`` for two-level tables, 18 (16 + 2 pooled) for alias
tables.

The DDG tree sampler below (:func:`ddg_plan`, :func:`sample_plan`) draws
any of these laws exactly in 9-10 bits per sample (fp8 normal), near the
entropy, but its pooled refinement (a rank and a gather for every sample)
measured about 3x the time of a 16-bit lookup on CPU, so no method uses it
for fp8 yet: the table method looks up (:mod:`table_method`), and
:func:`sample_plan` also draws its pure tables.
"""
from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src import codes as codes_lib
from jaxfp8._src import formats
from jaxfp8._src import laws
from jaxfp8._src.random import bits as bits_lib
from jaxfp8._src.random import common

_CAP = 1 << 16        # mass of one alias bucket, in units of 2^-32
_GROUP = 32           # samples sharing one pool of refinement slots
_POOL_WORDS = 2       # words per group: four 16-bit slots
_SLOTS = 4            # 16-bit slots per group (alias tables)
_FINE_BITS = 8        # at most this many more bits in a fine bucket


def _alias(q: np.ndarray, codes: np.ndarray):
  """An alias table over 2^16 buckets, in exact integer arithmetic.

  Masses are first cut into whole buckets; remainders that complement each
  other (``r + r' = 2^16``) share one bucket; what is left goes through
  Vose's algorithm. Dyadic laws thus get few or no split buckets.

  Returns:
    ``(main, b, t)``: ``main`` (uint8, 2^16) is the code of each bucket --
    the outcome below the threshold for split buckets, which come first;
    ``b`` (uint8) and ``t`` (uint32, in 1 .. 2^16 - 1) are the other outcome
    and the threshold of each split bucket: the sample is ``main[j]`` when
    the 16-bit refinement is below ``t[j]``, else ``b[j]``.
  """
  nb = 1 << 16
  mass = [int(x) for x in q]
  splits: list[tuple[int, int, int]] = []  # (code below t, code above, t)
  waiting: dict[int, int] = {}
  for i, m in enumerate(mass):
    r = m % _CAP
    if not r:
      continue
    if _CAP - r in waiting:
      k = waiting.pop(_CAP - r)
      splits.append((codes[i], codes[k], r))
      mass[i] -= r
      mass[k] -= _CAP - r
    else:
      waiting.setdefault(r, i)
  n_left = sum(mass) // _CAP
  pure: list[int] = []
  small = [i for i, m in enumerate(mass) if m < _CAP]
  large = [i for i, m in enumerate(mass) if m >= _CAP]
  n_empty = n_left - len(mass)  # empty items pair with large ones: pure
  while large and (small or n_empty > 0):
    l = large[-1]
    if small:
      s = small.pop()
      t = mass[s]
      mass[l] -= _CAP - t
      if t:
        splits.append((codes[s], codes[l], t))
      else:
        pure.append(codes[l])
    else:
      whole = min(mass[l] // _CAP, n_empty)
      pure.extend([codes[l]] * whole)
      mass[l] -= whole * _CAP
      n_empty -= whole
    if mass[l] < _CAP:
      small.append(large.pop())
  for i in large + small:
    assert mass[i] in (0, _CAP), "alias construction lost mass"
    if mass[i]:
      pure.append(codes[i])
  assert len(splits) + len(pure) == nb, (len(splits), len(pure))
  main = np.array([a for a, _, _ in splits] + pure, np.uint8)
  b = np.array([b for _, b, _ in splits], np.uint8)
  t = np.array([t for _, _, t in splits], np.uint32)
  return main, b, t


class Plan(NamedTuple):
  """How a law is sampled (tables in NumPy, built once per law).

  ``kind`` is ``"pure"`` (``main`` has ``2^width`` codes, one per draw),
  ``"two_level"`` (draws ``u < fine`` read ``main[2^width + u * 2^width2 +
  r]`` with ``width2`` refinement bits ``r``, the others ``main[u]``) or
  ``"alias"`` (``main`` holds uint32 entries ``a | b << 8 | t << 16``; the
  first ``fine`` buckets are split: ``a`` when the 16-bit refinement is below
  ``t``, else ``b``; the others have ``t = 0`` and ``a = b``).
  """
  kind: str
  width: int
  main: np.ndarray
  fine: int = 0
  width2: int = 0


def free_width(width: int) -> int:
  """The widest draw costing the same words: 11 bits cost as much as 16 (two
  draws per word), 9 as much as 10 (three)."""
  return max(w for w in range(width, 17)
             if bits_lib.per_word(w) == bits_lib.per_word(width))


def _two_level(q: np.ndarray, codes: np.ndarray) -> Plan | None:
  """A coarse 16-bit table for the bulk plus a fine one for a few buckets, if
  the law is dyadic enough (uniform laws whose atoms near zero are tiny)."""
  width = 16
  unit = 1 << (32 - width)
  edges = np.cumsum(q)[:-1]  # boundaries between values, in 2^-32 units
  inner = edges[edges % unit != 0]  # boundaries inside a coarse bucket
  fine_buckets = np.unique(inner // unit)
  if len(fine_buckets) * 32 > (1 << width):  # more than 1/32 of the mass
    return None
  width2 = next((w for w in range(1, _FINE_BITS + 1)
                 if np.all(inner % (unit >> w) == 0)), None)
  if width2 is None:
    return None
  # Fine buckets first, so that a draw is fine iff it is below their count.
  order = np.concatenate([fine_buckets, np.setdiff1d(
      np.arange(1 << width), fine_buckets)])
  coarse = codes[np.searchsorted(edges, order * unit, side="right")]
  sub = (fine_buckets[:, None] * unit
         + np.arange(1 << width2)[None, :] * (unit >> width2)).ravel()
  fine = codes[np.searchsorted(edges, sub, side="right")]
  return Plan("two_level", width, np.concatenate([coarse, fine]),
              fine=len(fine_buckets), width2=width2)


@functools.lru_cache(maxsize=256)
def plan(dist: str, fmt_name: str, params: tuple[tuple[str, float], ...]
         ) -> Plan:
  """The cheapest exact way to sample a law: a pure table if one holds it
  (at most 16 bits), else a two-level table if it takes no more bits than an
  alias table's 18, else the alias table."""
  fmt = formats.get(fmt_name)
  _, probs = laws.rounded_law(dist, fmt, **dict(params))
  q = laws.quantize(probs, 32)
  codes = common.codes_table(fmt)
  candidates = []
  width = next((w for w in range(1, 17) if np.all(q % (1 << (32 - w)) == 0)),
               None)
  if width is not None:
    width = free_width(width)
    candidates.append(Plan("pure", width, np.repeat(codes, q >> (32 - width))))
  two = _two_level(q, codes)
  if two is not None and _bits(two) <= _ALIAS_BITS:
    candidates.append(two)
  if not candidates:
    main, b, t = _alias(q, [int(c) for c in codes])
    packed = main.astype(np.uint32) | (main.astype(np.uint32) << 8)
    packed[:len(b)] = (main[:len(b)].astype(np.uint32)
                       | (b.astype(np.uint32) << 8) | (t << 16))
    return Plan("alias", 16, packed, fine=len(b))
  return min(candidates, key=_bits)


_ALIAS_BITS = 16 + _POOL_WORDS * 32 / _GROUP


def _bits(p: Plan) -> float:
  main = 32 / bits_lib.per_word(p.width)
  if p.kind == "two_level":
    return main + 32 / bits_lib.per_word(p.width2)
  return main if p.kind == "pure" else main + _POOL_WORDS * 32 / _GROUP


def bits_per_sample(dist: str, fmt: formats.Format, params: dict) -> float:
  """Random bits spent per sample (before padding to whole words)."""
  return _bits(plan(dist, fmt.name, tuple(sorted(params.items()))))


def _refinement(key, split, n_pad: int, finish=lambda r: r):
  """``finish(r)`` for 16 uniform bits ``r`` per split sample (uint16).

  Each group of ``_GROUP`` samples owns ``_POOL_WORDS`` words: 16-bit slots;
  its k-th split sample takes slot k. If a group has more split samples than
  slots, every sample takes fresh bits instead. ``finish`` runs inside both
  branches, so it fuses with the bits it uses (measured faster for alias
  tables).
  """
  groups = n_pad // _GROUP
  k_pool, k_fallback = jax.random.split(key)
  m = split.reshape(groups, _GROUP).astype(jnp.uint32)
  lane = jnp.arange(_GROUP, dtype=jnp.uint32)
  word = jnp.sum(m << lane, axis=1, dtype=jnp.uint32)
  rank = lax.population_count(word[:, None] & ((jnp.uint32(1) << lane) - 1))
  # Slot ``rank``: word rank // 2 of the group's pool, shifted.
  pool = bits_lib.words(k_pool, groups * _POOL_WORDS).reshape(
      groups, _POOL_WORDS)
  w = pool[:, _POOL_WORDS - 1:]
  for k in range(_POOL_WORDS - 2, -1, -1):
    w = jnp.where(rank < (k + 1) * 2, pool[:, k:k + 1], w)
  r = ((w >> ((rank % 2) * 16)) & jnp.uint32(0xFFFF)).astype(jnp.uint16)
  overflow = jnp.any(lax.population_count(word) > _SLOTS)
  return lax.cond(overflow, lambda: finish(bits_lib.uint16(k_fallback, n_pad)),
                  lambda: finish(r.reshape(n_pad)))


@functools.partial(jax.jit, static_argnames=("kind", "width", "width2",
                                             "fmt_name", "shape"))
def _sample(key, main, fine, *, kind, width, width2, fmt_name, shape):
  # The tables are arguments, not constants: one compilation serves every
  # law of a format, kind and shape.
  fmt = formats.get(fmt_name)
  n, n_pad = bits_lib.padded_size(shape, 2 * _GROUP)
  if kind == "pure":
    codes = main[bits_lib.packed(key, n_pad, width)]
  elif kind == "two_level":
    k_main, k_ref = jax.random.split(key)
    u = bits_lib.packed(k_main, n_pad, width)
    is_fine = u < fine
    r = bits_lib.packed(k_ref, n_pad, width2)
    index = jnp.where(is_fine, (1 << width) + (u << width2) + r, u)
    codes = main[index]
  else:  # one gather of a packed entry: a | b << 8 | t << 16
    k_main, k_ref = jax.random.split(key)
    u = bits_lib.uint16(k_main, n_pad)

    def finish(r):
      entry = main[u.astype(jnp.int32)]
      below = r.astype(jnp.uint32) < (entry >> 16)
      return jnp.where(below, entry, entry >> 8).astype(jnp.uint8)

    codes = _refinement(k_ref, u < fine, n_pad, finish)
  return codes_lib.from_codes(codes[:n].reshape(shape), fmt)


def sample(key, dist: str, shape: tuple[int, ...], fmt: formats.Format,
           params: dict[str, float]):
  """Exact samples of ``dist`` (concrete scalar ``params``) in ``fmt``."""
  p = plan(dist, fmt.name, tuple(sorted(params.items())))
  return _sample(key, p.main, np.int32(p.fine), kind=p.kind, width=p.width,
                 width2=p.width2, fmt_name=fmt.name, shape=tuple(shape))


# The DDG tree sampler: a radix-256 Knuth-Yao tree (see ``ddg_plan``).

_RADIX = 8            # bits per tree level
_LEVELS = 32 // _RADIX
_TREE_GROUP = 32      # samples per popcount group of the rank computation
_SIGMAS = 10          # pool slack, in binomial standard deviations
REFERENCE_N = 1 << 22  # the sample count plan_bits reports for


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
    entries (under one byte of 256 for normal in float8_e4m3fn)."""
    return self.pure[0] + (self.pure[1] >> _RADIX)

  @property
  def fractions(self) -> tuple[float, float]:
    """The pool fractions: level-1 deep samples, and samples whose level-1
    byte is at least :attr:`rare_byte`."""
    return (self.deep_fraction(1),
            ((1 << _RADIX) - self.rare_byte) / float(1 << _RADIX))


def ddg_plan(q: np.ndarray, codes: np.ndarray) -> TreePlan:
  """The radix-256 DDG tree of integer masses ``q`` (summing to ``2^32``).

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
  """A pure table if the masses ``q`` (units of ``2^-32``) are multiples of
  ``2^(32 - w)`` for some ``w <= 8``, else their DDG tree (:func:`ddg_plan`).

  >>> plan_for_masses(np.array([2**30, 3 * 2**30]), np.array([1, 2])).main
  array([1, 2, 2, 2], dtype=uint8)
  """
  q = np.asarray(q, np.int64)
  width = next((w for w in range(1, _RADIX + 1)
                if np.all(q % (1 << (32 - w)) == 0)), None)
  if width is None:
    return ddg_plan(q, codes)
  width = max(w for w in range(width, _RADIX + 1)
              if bits_lib.per_word(w) == bits_lib.per_word(width))
  return TreePlan("pure", width, np.repeat(np.asarray(codes, np.uint8),
                                       q >> (32 - width)))


def _words_drawn(p: TreePlan, n_pad: int) -> int:
  """Random words one call of ``n_pad`` samples draws (pools included)."""
  if p.kind == "pure":
    return -(-n_pad // bits_lib.per_word(p.width))
  return n_pad // 4 + pool_slots(p, n_pad) // 4


def plan_bits(p: TreePlan, n: int = REFERENCE_N) -> float:
  """Random bits per sample that a call of ``n`` samples draws with plan
  ``p`` (pools included)."""
  n_pad = bits_lib.padded_size((n,), _PAD)[1]
  return 32 * _words_drawn(p, n_pad) / n


_PAD = 4 * _TREE_GROUP  # whole words of bytes, whole rank groups


def ranks(mask: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(rank, total)``: distinct ranks ``0 .. total - 1`` (int32) for the
  True elements of ``mask`` (shape ``(32, G)``), ``total`` their number; the
  other elements' ranks are unspecified.

  Column ``g`` is a group of 32 lanes: they become one word (32 vectorized
  passes over rows of ``G``), a popcount gives the rank inside the group, a
  prefix sum over the groups the offset. No sort, no scatter. The prefix sum
  is ``lax.associative_scan``: ``jnp.cumsum`` (a ``reduce_window`` on XLA
  CPU) fused with its per-element consumer measured 10x slower, and behind an
  ``optimization_barrier`` (or as a triangular matmul) it compiles 0.3 s
  faster but runs 18% slower (2^22 table samples, 19.5 against 16.6 ms).

  >>> mask = jnp.zeros((32, 2), bool).at[jnp.array([1, 2, 3]),
  ...                                    jnp.array([0, 0, 1])].set(True)
  >>> rank, total = ranks(mask)
  >>> sorted(rank[mask].tolist()), int(total)
  ([0, 1, 2], 3)
  """
  m = mask.astype(jnp.uint32)
  lane = jnp.arange(_TREE_GROUP, dtype=jnp.uint32)[:, None]
  word = jnp.sum(m << lane, axis=0, dtype=jnp.uint32)
  count = lax.population_count(word).astype(jnp.int32)
  before = lax.associative_scan(jnp.add, count) - count
  inside = lax.population_count(word[None, :] & ((jnp.uint32(1) << lane) - 1))
  return before[None, :] + inside.astype(jnp.int32), jnp.sum(count)


def lanes(words: jax.Array, width: int) -> jax.Array:
  """The ``width``-bit fields (``width`` dividing 32) of ``words`` (shape
  ``(W, G)``) as int32 of shape ``(W * 32 // width, G)``: field ``b`` of row
  ``j`` is row ``j * 32 // width + b`` (only leading axes merge: no
  transposition, which XLA CPU makes slow when fused with a reduction)."""
  per = 32 // width
  shifts = (jnp.arange(per, dtype=jnp.uint32) * width)[None, :, None]
  u = (words[:, None, :] >> shifts) & jnp.uint32((1 << width) - 1)
  return u.reshape(-1, words.shape[-1]).astype(jnp.int32)


def refinement(key, slot: jax.Array, total: jax.Array, slots: int,
               size: int) -> list[jax.Array]:
  """``size`` uniform bytes (int32) per sample that owns pool slots
  ``slot .. slot + size - 1`` (``slot`` of shape ``(32, G)``, ``total`` the
  slots owned in all).

  If ``total`` exceeds the pool's ``slots``, every sample takes fresh bytes
  instead. Only the pool goes through ``lax.cond`` (both branches give
  ``slot.size * size`` bytes, the pooled one zero-padded), so that the ranks,
  the gathers and whatever consumes the bytes fuse into one pass.
  """
  n_pad = slot.size
  k_pool, k_fallback = jax.random.split(key)
  overflow = total > slots

  def draw(k, count):
    w = bits_lib.words(k, -(-count // 4))
    return lax.bitcast_convert_type(w, jnp.uint8).reshape(-1)[:count]

  pool = lax.cond(
      overflow, lambda: draw(k_fallback, n_pad * size),
      lambda: jnp.pad(draw(k_pool, slots), (0, n_pad * size - slots)))
  position = lax.broadcasted_iota(jnp.int32, slot.shape, 0) * slot.shape[1] + (
      lax.broadcasted_iota(jnp.int32, slot.shape, 1))
  first = jnp.where(overflow, position * size, slot)
  return [jnp.take(pool, first + j, mode="clip").astype(jnp.int32)
          for j in range(size)]


def _extra(levels: int) -> int:
  """Bytes a sample that may reach level 3 takes after its level-2 byte."""
  return {1: 0, 2: 0, 3: 1, 4: 2}[levels]


def pool_slots(p: TreePlan, n_pad: int) -> int:
  """Byte slots of the refinement pool for ``n_pad`` samples of plan ``p``.

  Each sample takes 1 byte with probability ``p1 - p3`` and ``1 + extra``
  with probability ``p3`` (:attr:`TreePlan.fractions`); the pool holds their
  mean plus ten standard deviations, rounded up to a multiple of
  ``n_pad / 128`` bytes (at most 1/16 bit more per sample), so that laws with
  nearby deep fractions share one compiled program.

  >>> p = ddg_plan(np.array([2**31 + 3, 2**31 - 3]), np.array([7, 9]))
  >>> p.fractions  # 1/256 of samples deep, and they may reach level 3
  (0.00390625, 0.00390625)
  >>> pool_slots(p, 1 << 20), (1 << 20) // 128  # 14,237 needed: two units
  (16384, 8192)
  """
  p1, p3 = p.fractions
  extra = _extra(p.levels)
  mean = p1 + extra * p3
  var = (p1 - p3) + (1 + extra) ** 2 * p3 - mean ** 2
  need = n_pad * mean + _SIGMAS * math.sqrt(n_pad * max(var, 0.0)) + _TREE_GROUP
  unit = 4 * max(1, n_pad // 512)
  return min(-(-int(math.ceil(need)) // unit) * unit, n_pad * (1 + extra))


@functools.partial(jax.jit, static_argnames=("kind", "width", "levels",
                                             "slots", "fmt_name", "shape"))
def _tree_sample(key, main, pure, offset, *, kind, width, levels, slots,
                 fmt_name, shape):
  # The tables are arguments, not constants: one compilation serves every
  # law of a format, shape, depth and pool size.
  fmt = formats.get(fmt_name)
  n, n_pad = bits_lib.padded_size(shape, _PAD)
  if kind == "pure":
    codes = main[bits_lib.packed(key, n, width)]
    return codes_lib.from_codes(codes.reshape(shape), fmt)
  # Samples live as (32, G): lane-major, so that ranks() reads whole rows.
  k1, k2 = jax.random.split(key)
  u = lanes(bits_lib.words(k1, n_pad // 4).reshape(-1, n_pad // _TREE_GROUP),
            8)
  deep1 = u >= pure[0]
  slot, total = ranks(deep1)
  extra = _extra(levels)
  if extra:
    # Samples whose byte may lead to level 3 (a mask of u alone) take
    # ``extra`` more bytes right after their level-2 byte: one pool, one
    # cond, one pass (a second pool measured twice the time).
    rare = u >= pure[0] + (pure[1] >> _RADIX)
    rank3, total3 = ranks(rare)
    slot, total = slot + extra * rank3, total + extra * total3
  r = refinement(k2, slot, total, slots, 1 + extra)
  e2 = ((u - pure[0]) << _RADIX) + r[0]
  index = jnp.where(deep1, offset[1] + e2, u)
  if levels >= 3:
    deep2 = deep1 & (e2 >= pure[1])
    e3 = ((e2 - pure[1]) << _RADIX) + r[1]
    index = jnp.where(deep2, offset[2] + e3, index)
  if levels == 4:
    deep3 = deep2 & (e3 >= pure[2])
    e4 = ((e3 - pure[2]) << _RADIX) + r[2]
    index = jnp.where(deep3, offset[3] + e4, index)
  codes = main[index.reshape(n_pad)[:n]]
  return codes_lib.from_codes(codes.reshape(shape), fmt)


def sample_plan(key, p: TreePlan, shape: tuple[int, ...], fmt: formats.Format):
  """Samples of the law of plan ``p`` in ``fmt`` (native array or
  CodeArray)."""
  n_pad = bits_lib.padded_size(tuple(shape), _PAD)[1]
  slots = pool_slots(p, n_pad) if p.kind == "ddg" else 0
  return _tree_sample(key, p.main, np.array(p.pure or (0,), np.int32),
                      np.array(p.offset or (0,), np.int32), kind=p.kind,
                      width=p.width, levels=p.levels, slots=slots,
                      fmt_name=fmt.name, shape=tuple(shape))


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
