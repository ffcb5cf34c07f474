"""The DDG tree sampler: integer masses ``q_i / 2^32`` drawn a byte at a time.

A radix-256 Knuth-Yao (DDG) tree of masses ``q`` (:func:`ddg_plan`): level
``k`` holds one entry per unit of the ``k``-th base-256 digit of every mass,
then its deep entries, each of which opens 256 entries of level ``k + 1``.
A sample reads one byte per level until it lands on a value, so value ``i``
comes with probability exactly ``q_i / 2^32`` after at most four bytes:
about ``8 (1 + p1)`` bits for a deep fraction ``p1`` at level 1, within
about 2 bits of the entropy in fp8 (10.03 bits for normal in float8_e4m3fn,
pools included, entropy 6.45; 9.20 for e5m2).

On device (:func:`sample_plan`), branch-free for every sample, in chunks
of at most 2^16 samples (:func:`layout`; rows of at least 2^13 samples are
chunked one by one). Every step but the table lookups is batched over the
chunks, with its own counters of the hash and its own pool, so a
partitioner that shards the output's rows keeps each device to its chunks
(no device holds the whole sample); samples depend on the key and shape
only, sharded or not.

- **Level 1.** Four bytes to a word from :func:`bits.stream_block`; a chunk's
  samples live as ``(32, G)`` (lane-major groups of 32, a group being a
  column of eight words).
- **Level 2.** A sample whose byte is deep (23% of them for normal
  e4m3fn) takes the next byte of its chunk's pool, in the order of the deep
  samples: its slot is the number of deep samples before it, from a
  per-group word of deep flags (a SWAR compare of four bytes at once), its
  popcounts and one prefix sum over the groups; the four samples of a word
  read their bytes from one pair of pool words.
- **Levels 3-4.** Only samples whose first byte is at least
  :attr:`TreePlan.rare_byte` can reach them (1/256 for normal e4m3fn). They
  are found by their own group words and prefix sum (a binary search per
  slot, at most ``cap_rare`` of them), walked again with two more bytes
  each from the end of the pool, and scattered over the chunk.
- **Overflow.** A chunk's pool holds the mean bytes plus a deviation of
  probability ``2^-30`` (:func:`pool_sizes`). A chunk that needs more draws
  every deep sample again with a fresh word, in a loop that otherwise runs
  zero times. The decision depends on the chunk's level-1 bytes alone, and
  either way each refinement byte is uniform and independent of everything
  else: the law is exact.

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
_SIGMAS = 7           # rare samples handled: sigmas over the mean
_TAIL = 30            # a chunk's pool overflows with probability < 2^-_TAIL
_CHUNK = 1 << 16      # samples per chunk, at most
_ROW = 1 << 13        # rows at least this long are chunked one by one
_BATCH = 1 << 9       # deep samples of a chunk redrawn per overflow trip
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


class Layout(NamedTuple):
  """How samples of a shape are laid out: ``rows`` rows (the leading axis,
  or 1) of ``length`` samples, each row cut into ``per_row`` chunks of
  ``chunk`` samples (the last padded). Every step of the sampler but the
  table lookups works inside one chunk, batched over the chunks, so a
  partitioner that shards the rows (or the chunks) of the output keeps each
  device to its own chunks."""
  rows: int
  length: int
  per_row: int
  chunk: int

  @property
  def chunks(self) -> int:
    """Chunks in all."""
    return self.rows * self.per_row


def layout(shape: tuple[int, ...]) -> Layout:
  """The chunks of ``shape``: rows of at least 2^13 samples are chunked one
  by one (a sharded leading axis stays sharded), other shapes as one row;
  chunks hold at most 2^16 samples, a multiple of 256 (of 32 for a single
  chunk), as equal as that allows.

  >>> layout((16, 32768))
  Layout(rows=16, length=32768, per_row=1, chunk=32768)
  >>> layout((1000, 3)).chunk, layout((100001,))
  (3008, Layout(rows=1, length=100001, per_row=2, chunk=50176))
  """
  n = math.prod(shape)
  long_rows = len(shape) > 1 and shape[0] and n // shape[0] >= _ROW
  rows = shape[0] if long_rows else 1
  length = n // rows
  per_row = max(1, -(-length // _CHUNK))
  unit = 32 if per_row == 1 else 256
  chunk = max(unit, -(-length // (per_row * unit)) * unit)
  return Layout(rows, length, per_row, chunk)


def _capacity(size: int, p: float) -> int:
  """Rare samples one chunk of ``size`` handles: ``Binomial(size, p)``, 7
  sigmas over the mean, a multiple of 64, at most ``size`` (work, not random
  bits: the pool bytes they read are counted in :func:`pool_sizes`)."""
  if p == 0:
    return 0
  need = size * p + _SIGMAS * math.sqrt(size * p * (1 - p)) + 64
  return min(-(-int(math.ceil(need)) // 64) * 64, size)


def pool_sizes(p: TreePlan, chunk: int) -> tuple[int, int]:
  """``(pool bytes, rare samples handled)`` per chunk of ``chunk`` samples.

  A sample takes 0 pool bytes, 1 if deep, 3 if rare (one pool serves both,
  deep bytes from its start, rare pairs from its end). The pool holds the
  mean plus the Bernstein deviation of probability ``2^-30`` for this sum of
  ``chunk`` independent draws in ``{0, 1, 3}`` (``{0, 1}`` for trees of two
  levels): a chunk overflows with
  probability below ``2^-30``, and then takes the redraw path.

  >>> p = ddg_plan(np.array([2**31 + 3, 2**31 - 3]), np.arange(2))
  >>> p.fractions, pool_sizes(p, 1 << 16)  # 256 rare samples, 3 bytes each
  ((0.00390625, 0.00390625), (1104, 448))
  """
  p1, rare = p.fractions
  mean = p1 + 2 * rare
  var = p1 + 8 * rare - mean * mean  # E[X^2] = p1 - rare + 9 rare
  log = _TAIL * math.log(2)
  # P(S - E S >= t) <= exp(-t^2 / (2 (n var + b t / 3))) for draws at most
  # b over their mean.
  third = ((3 if rare else 1) - mean) * log / 3
  t = third + math.sqrt(third * third + 2 * chunk * var * log)
  cap = min(int(math.ceil(chunk * mean + t)), 3 * chunk)
  return -(-cap // 8) * 8, _capacity(chunk, rare)


def _pure_words(width: int, chunk: int) -> int:
  m = -(-chunk // bits_lib.per_word(width))
  return m + (m & 1)


def plan_bits(p: TreePlan, n: int = REFERENCE_N) -> float:
  """Random bits per sample that a call of ``n`` samples (shape ``(n,)``)
  draws with plan ``p``, every word counted (chunk padding and pools
  included; the overflow path, which a chunk takes with probability
  < 2^-30, not)."""
  lay = layout((n,))
  if p.kind == "pure":
    per_chunk = _pure_words(p.width, lay.chunk)
  else:
    per_chunk = lay.chunk // 4 + pool_sizes(p, lay.chunk)[0] // 4
  return 32 * lay.chunks * per_chunk / n


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


def _chunk(words, pool, main, pure, offset, *, levels: int, cap: int,
           cap_rare: int):
  """Codes of one chunk (lane-major) from its words ``(8, G)`` and its pool
  words, whether a pool overflowed, and the groups' inclusive
  prefix sums and flags of deep samples (for the overflow path)."""
  groups = words.shape[1]
  u = lanes(words, 8)  # (32, G): lane-major, groups are columns
  deep = group_flags(words, pure[0])
  count = lax.population_count(deep).astype(jnp.int32)
  incl = lax.associative_scan(jnp.add, count)

  def level2_byte(slot):
    # A slot past the pool only occurs on overflow, whose samples are all
    # drawn again.
    word = jnp.take(pool, slot >> 2, mode="clip")
    return ((word >> ((slot & 3).astype(jnp.uint32) * 8)) & 255).astype(
        jnp.int32)

  # The four samples of a word have consecutive slots, so their pool bytes
  # lie in two pool words: one lookup of a word pair per word of samples
  # (a vmapped gather's index array holds two int32 per lookup: one per
  # sample would double the largest buffer of a sharded call).
  at = (jnp.arange(8, dtype=jnp.uint32) * 4)[:, None]
  first = (incl - count)[None, :] + lax.population_count(
      deep[None, :] & ((jnp.uint32(1) << at) - 1)).astype(jnp.int32)
  pairs = jnp.stack([pool, jnp.roll(pool, -1)], axis=-1)
  pair = pairs[jnp.clip(first >> 2, 0, pool.shape[0] - 1)]  # (8, G, 2)
  nibble = (deep[None, :] >> at)[:, None, :]
  byte = jnp.arange(4, dtype=jnp.uint32)[None, :, None]
  t = (first & 3)[:, None, :] + lax.population_count(
      nibble & ((jnp.uint32(1) << byte) - 1)).astype(jnp.int32)
  word = jnp.where(t < 4, pair[:, None, :, 0], pair[:, None, :, 1])
  r = ((word >> ((t & 3).astype(jnp.uint32) * 8)) & 255).astype(jnp.int32)
  codes = _walk(u, [r.reshape(u.shape)], main, pure, offset, 2).reshape(-1)
  overflow = incl[-1] > cap
  if levels > 2:
    rare = group_flags(words, pure[0] + (pure[1] >> _RADIX))
    rare_incl = lax.associative_scan(jnp.add, lax.population_count(
        rare).astype(jnp.int32))
    overflow |= (rare_incl[-1] > cap_rare) | (
        incl[-1] + 2 * rare_incl[-1] > cap)
    l, g, valid = select(rare_incl, rare, 0, cap_rare)
    # Rare sample i reads the pair of pool bytes cap - 2 i - 2, cap - 2 i - 1
    # (the deep ones read bytes 0 .. incl[-1] - 1 from the start).
    half = cap // 2 - 1 - jnp.arange(cap_rare, dtype=jnp.int32)
    half = jnp.maximum(half, 0)  # only past the pool when it overflowed
    r = _bytes_of(pool[half >> 1] >> ((half & 1) * 16).astype(jnp.uint32), 2)
    u_at, slot_at = _at(words, incl, deep, l, g)
    fixed = _walk(u_at, [level2_byte(slot_at)] + r, main, pure, offset,
                  levels)
    codes = codes.at[jnp.where(valid, l * groups + g, codes.shape[0])].set(
        fixed, mode="drop")
  return codes, overflow, incl, deep


def _tree(key, main, pure, offset, *, levels, caps, chunks, size):
  """Codes ``(chunks, size)`` of a DDG plan."""
  cap, cap_rare = caps
  k_main, k_fix = jax.random.split(key)
  words = bits_lib.stream_block(k_main, chunks, size // 4).reshape(
      chunks, 8, size // _LANES)
  pool = bits_lib.stream_block(k_main, chunks, cap // 4,
                               start=chunks * size // 4)
  codes, overflow, incl, deep = jax.vmap(functools.partial(
      _chunk, levels=levels, cap=cap, cap_rare=cap_rare),
      (0, 0, None, None, None))(words, pool, main, pure, offset)

  def redraw_chunk(trip, w, words, incl, deep, overflow, codes):
    l, g, valid = select(incl, deep, trip * _BATCH, _BATCH)
    fixed = _walk(_at(words, incl, deep, l, g)[0], _bytes_of(w, levels - 1),
                  main, pure, offset, levels)
    return codes.at[jnp.where(valid & overflow, l * words.shape[1] + g,
                              size)].set(fixed, mode="drop")

  def redraw(trip, codes):
    # Every deep sample of an overflowing chunk takes fresh refinement bytes
    # (a word each), ``_BATCH`` of them per chunk and trip. The loop runs
    # zero times unless a pool overflowed: not a cond, which a vmap would
    # turn into a select that always pays for it. Its body works on small
    # batches: a body of whole chunks made the sampler measured 1.6x slower
    # even where it never ran.
    w = bits_lib.stream_block(k_fix, chunks, _BATCH,
                              start=trip * chunks * _BATCH)
    return jax.vmap(redraw_chunk, (None, 0, 0, 0, 0, 0, 0))(
        trip, w, words, incl, deep, overflow, codes)

  most = jnp.max(jnp.where(overflow, incl[:, -1], 0))
  return lax.fori_loop(0, (most + _BATCH - 1) // _BATCH, redraw, codes)


@functools.partial(jax.jit, static_argnames=("kind", "width", "levels",
                                             "caps", "fmt_name", "shape"))
def _sample(key, main, pure, offset, *, kind, width, levels, caps, fmt_name,
            shape):
  # The tables are arguments, not constants: one compilation serves every
  # law of a format, shape and pool size.
  fmt = formats.get(fmt_name)
  lay = layout(shape)
  # Under an outer jit the NumPy tables become constants; XLA CPU then
  # compiled the sampler measured 1.6x slower in CPU time (constant tables in
  # the gathers). The barrier keeps them runtime values.
  main, pure, offset = lax.optimization_barrier((main, pure, offset))
  if kind == "pure":
    per = bits_lib.per_word(width)
    w = bits_lib.stream_block(key, lay.chunks, _pure_words(width,
                                                              lay.chunk))
    shifts = jnp.arange(per, dtype=jnp.uint32) * width
    u = (w[:, :, None] >> shifts) & jnp.uint32((1 << width) - 1)
    codes = main[u.reshape(lay.chunks, -1)[:, :lay.chunk].astype(jnp.int32)]
  else:
    codes = _tree(key, main, pure, offset, levels=levels, caps=caps,
                  chunks=lay.chunks, size=lay.chunk)
  codes = codes.reshape(lay.rows, -1)[:, :lay.length]
  return codes_lib.from_codes(codes.reshape(shape), fmt)


def sample_plan(key, p: TreePlan, shape: tuple[int, ...], fmt: formats.Format,
                caps: tuple[int, int] | None = None):
  """Samples of the law of plan ``p`` in ``fmt`` (native array or
  CodeArray); ``caps`` overrides :func:`pool_sizes` (tests of the overflow
  path)."""
  shape = tuple(shape)
  if p.kind == "pure":
    return _sample(key, p.main, np.zeros(1, np.int32), np.zeros(1, np.int32),
                   kind="pure", width=p.width, levels=1, caps=(0, 0),
                   fmt_name=fmt.name, shape=shape)
  caps = caps or pool_sizes(p, layout(shape).chunk)
  return _sample(key, p.main, np.array(p.pure, np.int32),
                 np.array(p.offset, np.int32), kind="ddg", width=p.width,
                 levels=p.levels, caps=tuple(caps), fmt_name=fmt.name,
                 shape=shape)
