"""The DDG tree sampler: integer masses ``q_i / 2^32`` drawn a byte at a time.

A radix-256 Knuth-Yao (DDG) tree of masses ``q`` (:func:`ddg_plan`): level
``k`` holds one entry per unit of the ``k``-th base-256 digit of every mass,
then its deep entries, each of which opens 256 entries of level ``k + 1``.
A sample reads one byte per level until it lands on a value, so value ``i``
comes with probability exactly ``q_i / 2^32`` after at most four bytes:
about ``8 (1 + p1)`` bits for a deep fraction ``p1`` at level 1, within
about 2 bits of the entropy in fp8 (9.95 bits for normal in float8_e4m3fn,
entropy 6.45; 9.14 for e5m2).

On device (:func:`sample_plan`), branch-free for every sample:

- **Level 1.** Four bytes to a word from :func:`bits.stream_words`; samples
  live as ``(32, G)`` (lane-major groups of 32, a group being a column of
  eight words).
- **Level 2.** A sample whose byte is deep (23% of them for normal
  e4m3fn) takes the next byte of one pool, in the order of the deep samples:
  its slot is the number of deep samples before it, from a per-group word of
  deep flags (a SWAR compare of four bytes at once), its popcounts and one
  prefix sum over the groups.
- **Levels 3-4.** Only samples whose first byte is at least
  :attr:`TreePlan.rare_byte` can reach them (1/256 for normal e4m3fn). They
  are found by their own group words and prefix sum (a binary search per
  slot, at most ``cap_rare`` of them), walked again with two more pooled bytes
  each, and scattered over the result.
- **Overflow.** The pools hold 7 standard deviations over the mean. If a
  call needs more, every deep sample is drawn again with a fresh word from
  another key, in a loop that runs zero times otherwise. The decision
  depends on the level-1 bytes alone, and either way each refinement byte is
  uniform and independent of everything else: the law is exact.

Laws dyadic at ``2^-w`` (``w <= pure_width``) skip the tree: one lookup of
``w`` bits, ``32 // w`` to a word.
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
from jaxfp8._src.random import bits as bits_lib

_RADIX = 8            # bits per tree level
_LEVELS = 32 // _RADIX
_LANES = 32           # samples per group (one word of flags)
_SIGMAS = 7           # pool slack, in binomial standard deviations
_BATCH = 1 << 14      # deep samples redrawn per trip of the overflow loop
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
    """P(a sample's level-1 byte is deep), P(it is at least
    :attr:`rare_byte`) (0 for trees of two levels)."""
    rare = ((1 << _RADIX) - self.rare_byte) / float(1 << _RADIX)
    return self.deep_fraction(1), rare if self.levels > 2 else 0.0


def ddg_plan(q: np.ndarray, codes: np.ndarray) -> TreePlan:
  """The radix-256 DDG tree of integer masses ``q`` (summing to ``2^32``).

  Args:
    q: int64 masses in units of ``2^-32``, one per value.
    codes: the uint8 code of each value.

  Returns:
    A ``"ddg"`` plan whose tables give value ``i`` mass ``q[i] / 2^32``
    exactly.

  Raises:
    ValueError: if ``q`` has a negative mass or does not sum to ``2^32``.

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
    # Deep entries hold a placeholder: a sample never keeps their value.
    tables.append(np.concatenate([entries, np.zeros(n_deep, np.uint8)]))
    pure.append(len(entries))
    deep.append(n_deep)
    offset.append(start)
    start += size
    size = n_deep << _RADIX
  return TreePlan("ddg", _RADIX, np.concatenate(tables).astype(np.uint8),
                  tuple(pure), tuple(offset), tuple(deep))


def plan_for_masses(q: np.ndarray, codes: np.ndarray, pure_width: int = 8
                    ) -> TreePlan:
  """A pure table if the masses ``q`` (units of ``2^-32``) are multiples of
  ``2^(32 - w)`` for some ``w <= pure_width`` (widened to the widest draw of
  as many per word), else their DDG tree (:func:`ddg_plan`).

  >>> plan_for_masses(np.array([2**30, 3 * 2**30]), np.array([1, 2])).main
  array([1, 2, 2, 2], dtype=uint8)
  """
  q = np.asarray(q, np.int64)
  width = next((w for w in range(1, pure_width + 1)
                if np.all(q % (1 << (32 - w)) == 0)), None)
  if width is None:
    return ddg_plan(q, codes)
  width = max(w for w in range(width, pure_width + 1)
              if bits_lib.per_word(w) == bits_lib.per_word(width))
  return TreePlan("pure", width, np.repeat(np.asarray(codes, np.uint8),
                                           q >> (32 - width)))


def _padded(shape) -> tuple[int, int]:
  return bits_lib.padded_size(shape, _LANES)


def _capacity(n_pad: int, p: float) -> int:
  """Pool entries for ``Binomial(n_pad, p)`` users: 7 sigmas over the mean,
  a multiple of 64, at most ``n_pad`` (then it can't overflow)."""
  if p == 0:
    return 0
  need = n_pad * p + _SIGMAS * math.sqrt(n_pad * p * (1 - p)) + 64
  return min(-(-int(math.ceil(need)) // 64) * 64, n_pad)


def pool_sizes(p: TreePlan, n_pad: int) -> tuple[int, int]:
  """``(level-2 pool bytes, rare samples handled)`` for ``n_pad`` samples."""
  p1, rare = p.fractions
  return _capacity(n_pad, p1), _capacity(n_pad, rare)


def _words_drawn(p: TreePlan, n_pad: int) -> int:
  """Random words one call of ``n_pad`` samples draws (pools included)."""
  if p.kind == "pure":
    return bits_lib.stream_count(-(-n_pad // bits_lib.per_word(p.width)))
  cap, cap_rare = pool_sizes(p, n_pad)
  return bits_lib.stream_count(n_pad // 4 + cap // 4 + cap_rare // 2)


def plan_bits(p: TreePlan, n: int = REFERENCE_N) -> float:
  """Random bits per sample that a call of ``n`` samples draws with plan
  ``p`` (pools and rounded word counts included; the overflow loop, which
  runs with probability < 1e-11, not)."""
  return 32 * _words_drawn(p, _padded((n,))[1]) / n


def lanes(words: jax.Array, width: int) -> jax.Array:
  """The ``width``-bit fields (``width`` dividing 32) of ``words`` (shape
  ``(W, G)``) as int32 of shape ``(W * 32 // width, G)``: field ``b`` of row
  ``j`` is row ``j * 32 // width + b`` (only leading axes merge: no
  transposition, which XLA CPU makes slow when fused with a reduction)."""
  per = 32 // width
  shifts = (jnp.arange(per, dtype=jnp.uint32) * width)[None, :, None]
  u = (words[:, None, :] >> shifts) & jnp.uint32((1 << width) - 1)
  return u.reshape(-1, words.shape[-1]).astype(jnp.int32)


def group_flags(words: jax.Array, t: jax.Array) -> jax.Array:
  """For words of shape ``(8, G)``, the uint32 of each group whose bit
  ``4 j + b`` says byte ``b`` of word ``j`` is ``>= t`` (``t`` in 0 .. 256).

  Four bytes compare at once (SWAR): byte ``x >= t`` iff ``x + (256 - t)``
  carries out of its byte, and the carry is computed without crossing bytes.

  >>> w = jnp.array([[0x00FF7F80]] * 8, jnp.uint32)
  >>> hex(int(group_flags(w, jnp.int32(0x80))[0]))
  '0x55555555'
  """
  add = (256 - jnp.clip(t, 1, 255)).astype(jnp.uint32) * jnp.uint32(0x01010101)
  low7 = jnp.uint32(0x7F7F7F7F)
  carry_in = (words & low7) + (add & low7)
  carry = ((words & add) | ((words | add) & carry_in)) & jnp.uint32(0x80808080)
  carry = jnp.where(t <= 0, jnp.uint32(0x80808080),
                    jnp.where(t >= 256, jnp.uint32(0), carry))
  nibble = ((carry >> 7) * jnp.uint32(0x10204080)) >> 28  # 4 flags, 4 bits
  shifts = (jnp.arange(words.shape[0], dtype=jnp.uint32) * 4)[:, None]
  return jnp.sum(nibble << shifts, axis=0, dtype=jnp.uint32)


def select(incl: jax.Array, flags: jax.Array, start, size: int
           ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """``(lane, group, valid)`` of the flagged samples ranked ``start ..
  start + size - 1`` (group-major), from the groups' flag words and the
  inclusive prefix sums ``incl`` of their popcounts; ``valid`` is False past
  the last one.

  >>> flags = jnp.array([0b1010, 0, 0b1], jnp.uint32)
  >>> incl = jnp.array([2, 2, 3], jnp.int32)
  >>> [a.tolist() for a in select(incl, flags, 0, 4)]
  [[1, 3, 0, 31], [0, 0, 2, 2], [True, True, True, False]]
  """
  s = start + jnp.arange(size, dtype=jnp.int32)
  # Unrolled: one fusion, not a while loop of 17 small ones (measured 15%
  # less CPU time for the exact normal sampler).
  g = jnp.searchsorted(incl, s, side="right", method="scan_unrolled")
  g = jnp.minimum(g, incl.shape[0] - 1).astype(jnp.int32)
  count = lax.population_count(flags).astype(jnp.int32)
  k = s - (incl[g] - count[g])  # rank inside the group
  lane = jnp.arange(_LANES, dtype=jnp.uint32)
  upto = lax.population_count(  # flags at lanes <= l, for every l
      flags[g][:, None] & ((jnp.uint32(2) << lane) - 1)[None, :])
  l = jnp.sum(upto.astype(jnp.int32) <= k[:, None], axis=1, dtype=jnp.int32)
  return jnp.minimum(l, _LANES - 1), g, s < incl[-1]


def _walk(u, r, main, pure, offset, levels: int):
  """Codes of level-1 bytes ``u`` with refinement bytes ``r[0 .. levels-2]``.

  Level 1 reads its own 256 entries and the deeper levels one gather, then a
  select: measured 10-20% less CPU time on XLA CPU than one gather of a
  selected index.
  """
  deep = u >= pure[0]
  e = ((u - pure[0]) << _RADIX) + r[0]
  index = offset[1] + e
  for k in range(2, levels):
    deeper = e >= pure[k - 1]
    e = ((e - pure[k - 1]) << _RADIX) + r[k - 1]
    index = jnp.where(deeper, offset[k] + e, index)
  index = jnp.clip(index, 0, main.shape[0] - 1)  # negative where not deep
  return jnp.where(deep, main[index], main[:1 << _RADIX][u])


def _at(words, incl, deep, l, g):
  """``(level-1 byte, level-2 slot)`` of the samples at lanes ``l``, groups
  ``g`` (computed there, not gathered from the full arrays, which XLA would
  then materialize)."""
  u = ((words[l >> 2, g] >> ((l & 3).astype(jnp.uint32) * 8)) & 255)
  flags = deep[g]
  count = lax.population_count(flags).astype(jnp.int32)
  inside = lax.population_count(
      flags & ((jnp.uint32(1) << l.astype(jnp.uint32)) - 1)).astype(jnp.int32)
  return u.astype(jnp.int32), incl[g] - count + inside


def _bytes_of(w: jax.Array, count: int) -> list[jax.Array]:
  return [((w >> (8 * j)) & 255).astype(jnp.int32) for j in range(count)]


@functools.partial(jax.jit, static_argnames=("kind", "width", "levels",
                                             "caps", "fmt_name", "shape"))
def _sample(key, main, pure, offset, *, kind, width, levels, caps, fmt_name,
            shape):
  # The tables are arguments, not constants: one compilation serves every
  # law of a format, shape and pool size.
  fmt = formats.get(fmt_name)
  n, n_pad = _padded(shape)
  # Under an outer jit the NumPy tables become constants; XLA CPU then
  # compiled the sampler measured 1.6x slower in CPU time (constant tables in
  # the gathers). The barrier keeps them runtime values.
  main, pure, offset = lax.optimization_barrier((main, pure, offset))
  if kind == "pure":
    per = bits_lib.per_word(width)
    m = -(-n_pad // per)
    w = bits_lib.stream_words(key, bits_lib.stream_count(m))[:m]
    shifts = jnp.arange(per, dtype=jnp.uint32) * width
    u = (w[:, None] >> shifts) & jnp.uint32((1 << width) - 1)
    codes = main[u.reshape(-1)[:n].astype(jnp.int32)]
    return codes_lib.from_codes(codes.reshape(shape), fmt)
  cap, cap_rare = caps
  groups, n_words = n_pad // _LANES, n_pad // 4
  k_main, k_fix = jax.random.split(key)
  stream = bits_lib.stream_words(k_main, bits_lib.stream_count(
      n_words + cap // 4 + cap_rare // 2))
  words = stream[:n_words].reshape(8, groups)
  pool = stream[n_words:n_words + cap // 4]
  u = lanes(words, 8)  # (32, G): lane-major, groups are columns
  lane = jnp.arange(_LANES, dtype=jnp.uint32)[:, None]
  deep = group_flags(words, pure[0])
  incl = lax.associative_scan(jnp.add, lax.population_count(deep).astype(
      jnp.int32))
  slot = (incl - lax.population_count(deep).astype(jnp.int32))[None, :] + (
      lax.population_count(deep[None, :] & ((jnp.uint32(1) << lane) - 1))
      .astype(jnp.int32))

  def level2_byte(slot):
    # A slot past the pool only occurs on overflow, whose samples are all
    # drawn again.
    word = jnp.take(pool, slot >> 2, mode="clip")
    return ((word >> ((slot & 3).astype(jnp.uint32) * 8)) & 255).astype(
        jnp.int32)

  codes = _walk(u, [level2_byte(slot)], main, pure, offset, 2).reshape(n_pad)
  overflow = incl[-1] > cap
  if levels > 2:
    rare = group_flags(words, pure[0] + (pure[1] >> _RADIX))
    rare_incl = lax.associative_scan(jnp.add, lax.population_count(
        rare).astype(jnp.int32))
    overflow |= rare_incl[-1] > cap_rare
    l, g, valid = select(rare_incl, rare, 0, cap_rare)
    halves = stream[n_words + cap // 4:][:cap_rare // 2]
    i = jnp.arange(cap_rare, dtype=jnp.uint32)
    r = _bytes_of(halves[i >> 1] >> ((i & 1) * 16), 2)
    u_at, slot_at = _at(words, incl, deep, l, g)
    fixed = _walk(u_at, [level2_byte(slot_at)] + r, main, pure, offset,
                  levels)
    codes = codes.at[jnp.where(valid, l * groups + g, n_pad)].set(
        fixed, mode="drop")

  def redraw(trip, codes):
    l, g, valid = select(incl, deep, trip * _BATCH, _BATCH)
    w = bits_lib.stream_words(jax.random.fold_in(k_fix, trip), _BATCH)
    fixed = _walk(_at(words, incl, deep, l, g)[0], _bytes_of(w, levels - 1),
                  main, pure, offset, levels)
    return codes.at[jnp.where(valid, l * groups + g, n_pad)].set(
        fixed, mode="drop")

  trips = jnp.where(overflow, (incl[-1] + _BATCH - 1) // _BATCH, 0)
  codes = lax.fori_loop(0, trips, redraw, codes)
  return codes_lib.from_codes(codes[:n].reshape(shape), fmt)


def sample_plan(key, p: TreePlan, shape: tuple[int, ...], fmt: formats.Format,
                caps: tuple[int, int] | None = None):
  """Samples of the law of plan ``p`` in ``fmt`` (native array or
  CodeArray); ``caps`` overrides :func:`pool_sizes` (tests of the overflow
  loop)."""
  shape = tuple(shape)
  if p.kind == "pure":
    return _sample(key, p.main, np.zeros(1, np.int32), np.zeros(1, np.int32),
                   kind="pure", width=p.width, levels=1, caps=(0, 0),
                   fmt_name=fmt.name, shape=shape)
  caps = caps or pool_sizes(p, _padded(shape)[1])
  return _sample(key, p.main, np.array(p.pure, np.int32),
                 np.array(p.offset, np.int32), kind="ddg", width=p.width,
                 levels=p.levels, caps=tuple(caps), fmt_name=fmt.name,
                 shape=shape)
