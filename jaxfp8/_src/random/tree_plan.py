"""How a law of integer masses is drawn exactly: its plan, pool and bit cost.

A law quantized to integer masses ``q_i`` summing to ``2^32`` (the exact
method's rounded law, or the table method's own) is drawn with probability
exactly ``q_i / 2^32`` by the plan of the two below that draws fewer random
bits (:func:`plan_for_masses`):

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
plus ten standard deviations: :func:`pool_sizes`), not from a draw per
sample. The pool's size is an argument of the compiled program, not a
constant: the program holds a pool of ``n / 8`` words (enough for laws whose
deep fraction is up to 45%) and draws only the words this law's pool needs,
in parts of 1/256 of it (:func:`bits_lib.words_upto`); :class:`Pool` holds
these sizes. One program thus serves most laws of a format and shape, as the
tables (padded to 2^16 entries) are arguments too.

Plans are NumPy tables, built on the host once per law; :func:`plan_bits`
counts the random bits a call spends with one. The sampler that runs them on
device is :func:`jaxfp8._src.random.exact_method.sample_plan`.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from jaxfp8._src.random import bits as bits_lib
from jaxfp8._src.random import pool as pool_lib

RADIX = 8             # bits per tree level
_LEVELS = 32 // RADIX
_SIGMAS = 10          # pool slack, in binomial standard deviations
PAD = 4 * pool_lib.GROUP  # samples are padded to whole groups of whole words
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
    return self.deep[level - 1] / float(1 << (RADIX * level))

  @property
  def rare_byte(self) -> int:
    """The first level-1 byte from which a sample may read level 3: the deep
    entries of level 2 come last, so they hang under the last level-1 deep
    entries (under one byte of 256 for normal in float8_e4m3fn). 256 when no
    sample reads level 3."""
    return self.pure[0] + (self.pure[1] >> RADIX)

  @property
  def fractions(self) -> tuple[float, float]:
    """The pool fractions: samples that take a level-2 byte (level-1 deep),
    and samples that take 16 more bits (level-1 byte at least
    :attr:`rare_byte`)."""
    return (self.deep_fraction(1),
            ((1 << RADIX) - self.rare_byte) / float(1 << RADIX))


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
  size, start = 1 << RADIX, 0
  for k in range(1, _LEVELS + 1):
    digit = (q >> (32 - RADIX * k)) & ((1 << RADIX) - 1)
    entries = np.repeat(codes, digit)
    n_deep = size - len(entries)
    assert n_deep >= 0 and (k < _LEVELS or n_deep == 0), "DDG lost mass"
    # Deep entries hold a placeholder: a sample never reads them.
    tables.append(np.concatenate([entries, np.zeros(n_deep, np.uint8)]))
    pure.append(len(entries))
    deep.append(n_deep)
    offset.append(start)
    start += size
    size = n_deep << RADIX
  return TreePlan("ddg", RADIX, np.concatenate(tables).astype(np.uint8),
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
  if width is None or width > RADIX:
    candidates.append(ddg_plan(q, codes))
  return min(candidates, key=plan_bits)  # the pure table on a tie


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


class Pool(NamedTuple):
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


def pool_for(p: TreePlan, n_pad: int) -> Pool:
  """The pool of a call of ``n_pad`` samples of the DDG plan ``p``."""
  return Pool(*pool_sizes(p, n_pad))


def _words_drawn(p: TreePlan, n_pad: int) -> int:
  """Random words one call of ``n_pad`` samples draws (pools included)."""
  if p.kind == "pure":
    return -(-n_pad // bits_lib.per_word(p.width))
  return n_pad // 4 + pool_for(p, n_pad).computed(n_pad)


def plan_bits(p: TreePlan, n: int = REFERENCE_N) -> float:
  """Random bits per sample that a call of ``n`` samples draws with plan
  ``p``, every word computed counted except Threefry's padding of each
  draw to whole blocks (up to 511 words: < 0.01 bit per sample at 2^22).

  >>> from jaxfp8._src.random import exact_method
  >>> p = exact_method.plan("normal", "float8_e4m3fn", ())
  >>> plan_bits(p)  # entropy 6.45
  9.97...
  """
  n_pad = bits_lib.padded_size((n,), PAD)[1]
  return 32 * _words_drawn(p, n_pad) / n
