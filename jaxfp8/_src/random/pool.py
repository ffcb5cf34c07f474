"""Pooled random bytes: how the samples of a DDG tree that read past level 1
get their extra bytes from one shared pool, not from a draw per sample.

Samples live as a ``(32, G)`` array: lane-major, so that a group of 32
samples is a column and its lanes are rows. A group's samples that need a
byte form a uint32 mask (:func:`byte_masks`), and a sample's byte is the
pool byte of its rank among them: a popcount inside its group plus a prefix
sum over the groups (:func:`exclusive_ranks`). The pass over every sample
reads its byte through a window of pool words per quarter of a group
(:func:`pooled_bytes`); the rare samples that need 16 bits more are
compacted and read theirs directly (:func:`rare_bytes`). :func:`overflows`
says when the pool can't serve a call. :mod:`tree_plan` holds the trees and
the pools' sizes, :mod:`exact_method` the sampler that uses these.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

GROUP = 32           # samples per popcount group (one uint32 mask)
QUARTER = 8          # samples per level-2 window
WINDOW = 3           # pool words per quarter: 8 bytes at any alignment

assert 4 * WINDOW >= QUARTER + 3  # a quarter's bytes always fit


def lanes(words: jax.Array, width: int) -> jax.Array:
  """The ``width``-bit fields (``width`` dividing 32) of ``words`` (shape
  ``(W, G)``) as int32 of shape ``(W * 32 // width, G)``: field ``b`` of row
  ``j`` is row ``j * 32 // width + b`` (only leading axes merge: no
  transposition, which XLA CPU makes slow when fused with a reduction)."""
  per = 32 // width
  shifts = (jnp.arange(per, dtype=jnp.uint32) * width)[None, :, None]
  u = (words[:, None, :] >> shifts) & jnp.uint32((1 << width) - 1)
  return u.reshape(-1, words.shape[-1]).astype(jnp.int32)


def byte_masks(w: jax.Array, threshold, *, shifted: bool = False
               ) -> jax.Array:
  """For words ``w`` (shape ``(8, G)``), each group's mask of the samples
  whose first byte is at least ``threshold``: bit ``l`` is sample (row) ``l``
  of :func:`lanes` ``(w, 8)``. One elementwise pass over ``G``, reading the
  bytes of the words (a reduction over the 32 rows of the lanes was the
  slowest step of an ES population draw).

  ``shifted`` tests each byte shifted down (``(w >> 8b) & 0xFF >= t``), not
  in place (``w & (0xFF << 8b) >= t << 8b``): the same masks, by an
  expression that shares nothing with the other's. Two masks of the same
  words, one of each form, are then two fused passes; two of one form
  shared their bytes, which XLA CPU kept as four arrays of 4 MB each at
  2^22 samples.

  >>> w = jnp.array([[0x000000FF, 7]] + [[0, 0]] * 7, jnp.uint32)
  >>> byte_masks(w, 8).tolist()  # lane 0 of group 0: byte 0 of word 0
  [1, 0]
  >>> byte_masks(w, 8, shifted=True).tolist()
  [1, 0]
  """
  t = jnp.asarray(threshold).astype(jnp.uint32)
  some = t < 256  # a threshold of 256 shifted in place would wrap to 0
  nibble = jnp.zeros(w.shape, jnp.uint32)
  for b in range(4):
    if shifted:
      hit = ((w >> jnp.uint32(8 * b)) & 0xFF) >= t
    else:
      hit = some & ((w & jnp.uint32(0xFF << (8 * b)))
                    >= (jnp.minimum(t, 255) << jnp.uint32(8 * b)))
    nibble = nibble | (hit.astype(jnp.uint32) << jnp.uint32(b))
  # The 8 rows' nibbles side by side (bit 4j + b: lane 4j + b, as in lanes()).
  out = nibble[0]
  for j in range(1, w.shape[0]):
    out = out | (nibble[j] << jnp.uint32(4 * j))
  return out


def exclusive_ranks(word: jax.Array) -> jax.Array:
  """For group masks ``word`` (shape ``(G,)``), the number of set bits in
  all earlier groups (int32).

  The prefix sum is two-level: within blocks of up to 128 groups, a product
  with a triangular matrix (float32, exact: the sums are at most 4,096), and
  over the blocks a ``jnp.cumsum``. ``lax.associative_scan`` ran a little
  faster but its program compiled several times slower; ``jnp.cumsum`` alone
  (a ``reduce_window`` on XLA CPU) ran slower than either.

  >>> exclusive_ranks(jnp.array([3, 0, 7], jnp.uint32)).tolist()
  [0, 2, 2]
  """
  count = lax.population_count(word).astype(jnp.int32)
  block = math.gcd(word.shape[0], 128)
  blocks = count.reshape(-1, block)
  upper = np.triu(np.ones((block, block), np.float32), 1)  # j < i
  inside = jnp.dot(blocks.astype(jnp.float32), upper,
                   precision=lax.Precision.HIGHEST).astype(jnp.int32)
  total = jnp.sum(blocks, axis=1)
  return (inside + (jnp.cumsum(total) - total)[:, None]).reshape(-1)


def below(lane: jax.Array) -> jax.Array:
  """The mask of the lanes below ``lane`` (uint32)."""
  return (jnp.uint32(1) << lane) - 1


def select(rows: list[jax.Array], index: jax.Array) -> jax.Array:
  """``rows[index]`` elementwise, for ``index < len(rows)``: a binary tree
  of selects on the bits of ``index`` (uint32)."""
  level, bit = list(rows), 0
  while len(level) > 1:
    if len(level) % 2:
      level.append(level[-1])
    take = ((index >> bit) & 1) == 1
    level = [jnp.where(take, level[i + 1], level[i])
             for i in range(0, len(level), 2)]
    bit += 1
  return level[0]


def windows(pool: jax.Array, start: jax.Array, size: int) -> jax.Array:
  """``pool[start + i]`` for ``i < size``, shape ``start.shape + (size,)``:
  one gather of ``size``-word slices (XLA CPU's gather loop then runs once
  per window, not once per word: a third of the iterations for the level-2
  windows of 3 words); starts are clamped to the pool."""
  index = start.reshape(-1, 1)
  dims = lax.GatherDimensionNumbers(offset_dims=(1,), collapsed_slice_dims=(),
                                    start_index_map=(0,))
  out = lax.gather(pool, index, dims, slice_sizes=(size,),
                   mode=lax.GatherScatterMode.CLIP)
  return out.reshape(*start.shape, size)


def pooled_bytes(pool, m1, b1):
  """Each sample's level-2 byte from the pool (int32, ``(32, G)``;
  meaningful where the sample takes one): the byte of its rank among the
  level-1 deep samples (group masks ``m1``, their :func:`exclusive_ranks`
  ``b1``), counting from word 0 of ``pool``."""
  lane = jnp.arange(GROUP, dtype=jnp.uint32)[:, None]
  quarter_start = lane & ~jnp.uint32(QUARTER - 1)
  in_quarter = below(lane) & ~below(quarter_start)  # lanes below, same quarter
  quarters = GROUP // QUARTER
  first = (jnp.arange(quarters, dtype=jnp.uint32) * QUARTER)[:, None]
  # Where each quarter's bytes begin in the level-2 region: (quarters, G).
  base = b1.astype(jnp.uint32)[None] + lax.population_count(m1[None] &
                                                            below(first))
  start = (base >> 2).astype(jnp.int32)
  window = windows(pool, start, WINDOW)  # (quarters, G, WINDOW)
  k = jnp.repeat(base & 3, QUARTER, axis=0) + lax.population_count(
      m1[None] & in_quarter)  # the sample's byte within its quarter's words
  word = select([jnp.repeat(window[..., i], QUARTER, axis=0)
                 for i in range(WINDOW)], k >> 2)
  return ((word >> ((k & 3) << 3)) & 0xFF).astype(jnp.int32)


def nth_set_bit(m: jax.Array, t: jax.Array) -> jax.Array:
  """The position of set bit number ``t`` (from 0, counting from bit 0) of
  each mask ``m`` (uint32; ``t`` below its popcount), by binary search on
  popcounts (uint32).

  >>> nth_set_bit(jnp.uint32(0b1011000), jnp.uint32(2)).tolist()
  6
  """
  pos = jnp.zeros(jnp.broadcast_shapes(m.shape, t.shape), jnp.uint32)
  t = t.astype(jnp.uint32)
  for half in (16, 8, 4, 2, 1):
    low = lax.population_count((m >> pos) & jnp.uint32((1 << half) - 1))
    skip = t >= low
    pos = jnp.where(skip, pos + half, pos)
    t = jnp.where(skip, t - low, t)
  return pos


def rare_bytes(w, pool, rare_start, m1, m3, b1, b3, *, slots: int):
  """The rare samples (level-1 byte at least
  :attr:`tree_plan.TreePlan.rare_byte`: those that may read level 3),
  compacted: for slot ``j < slots``, the flat position (``lane * G +
  group``) of the rare sample of rank ``j``, its first byte, its level-2
  pool byte and the 16 bits of rare slot ``j`` (pool word ``rare_start +
  j // 2``), all int32. Slots past the call's rare samples get position
  ``32 * G`` (out of bounds).

  Only ``slots`` samples (1/256 of them for normal in float8_e4m3fn) do the
  deep levels' work: the pass over every sample descends two levels."""
  groups = w.shape[1]
  inclusive = b3 + lax.population_count(m3).astype(jnp.int32)
  j = jnp.arange(slots, dtype=jnp.int32)
  # Slot j's group: each group with rare samples marks its first slot, and
  # a running maximum carries the mark over the group's other slots (a
  # scatter of G entries: a binary search, 17 gathers of every slot, ran
  # slower).
  first = jnp.where(inclusive > b3, b3, slots)
  g = lax.cummax(jnp.zeros(slots, jnp.int32).at[first].set(
      jnp.arange(groups, dtype=jnp.int32), mode="drop"))
  lane = nth_set_bit(m3[g], (j - b3[g]).astype(jnp.uint32))
  u = (w[lane >> 2, g] >> ((lane & 3) << 3)) & 0xFF
  rank = (b1[g] + lax.population_count(m1[g] & below(lane)).astype(
      jnp.int32))
  r2 = (pool[rank >> 2] >> ((rank & 3) << 3).astype(jnp.uint32)) & 0xFF
  r3 = (pool[rare_start + (j >> 1)] >> ((j & 1) << 4).astype(jnp.uint32)
        ) & 0xFFFF
  position = jnp.where(j < inclusive[-1],
                       lane.astype(jnp.int32) * groups + g, GROUP * groups)
  return position, u.astype(jnp.int32), r2.astype(jnp.int32), r3.astype(
      jnp.int32)


def overflows(m1, m3, b1, b3, n_bytes: int, slots: int, levels: int):
  """Whether the pool can't serve a call: its samples need more level-2
  bytes than ``n_bytes`` or more rare slots than ``slots`` (group masks
  ``m1``, ``m3`` and their :func:`exclusive_ranks` ``b1``, ``b3``).

  >>> m = jnp.array([0x1FF, 0], jnp.uint32)  # 9 deep samples, all rare
  >>> b = exclusive_ranks(m)
  >>> bool(overflows(m, m, b, b, 64, 8, 4))  # 9 rare slots needed, 8 held
  True
  >>> bool(overflows(m, m, b, b, 64, 8, 2))  # no level 3: 9 bytes fit in 64
  False
  """
  total = b1[-1] + lax.population_count(m1[-1]).astype(jnp.int32)
  out = total > n_bytes
  if levels > 2:
    out |= b3[-1] + lax.population_count(m3[-1]).astype(jnp.int32) > slots
  return out
