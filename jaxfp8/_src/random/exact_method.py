"""The ``exact`` method: the rounded law, sampled with integer arithmetic.

At trace time the law of the real draw rounded into the format
(:func:`jaxfp8._src.random.laws.rounded_law`, float64) is quantized to integer
masses ``q_i`` summing to ``2^32`` (each within ``2^-32`` of the true
probability, and equal to it when the law is dyadic at that resolution) and
planned (:mod:`jaxfp8._src.random.tree_plan`: a pure table or a radix-256 DDG
tree, whichever draws fewer random bits). On device a sample picks value
``i`` with probability exactly ``q_i / 2^32`` (:func:`sample_plan`, which
draws the table method's plans too). :func:`bernoulli` and
:func:`rademacher` are the exact samplers of two discrete laws: integer
comparisons on random bits.

A tree's deep samples take their extra bytes from one pool (sized by
:mod:`tree_plan`). A deep sample takes the pool byte of its rank among the
deep samples; the rank is a popcount within a group of 32 samples plus a
prefix sum over the groups. The samples never gather from the pool: each
quarter of a group (8 samples) reads the 3 pool words that hold its bytes (a
gather per quarter, not per sample), and each sample picks its byte out of
them with two selects. The pass over every sample descends two levels. The
rare samples are compacted instead (:func:`pool_lib.rare_bytes`): rare
sample ``j`` (by rank) finds its group and lane, takes its level-2 byte and
16-bit slot ``j`` of a second pool region, descends all the levels, and its
table index replaces the two-level one (a scatter of the rare slots). If
more samples need bytes than the pool holds, or more rare slots (beyond ten
standard deviations, or about once in 10^7 calls of 2^22 samples), every
sample takes fresh bits instead (``lax.cond``). Either way each byte a
sample uses is uniform and independent of every other bit used, so
``P(i) = q_i / 2^32`` exactly.

Why it is laid out this way: XLA CPU inlines a gather's index computation
into the gather's own scalar loop, so a gather whose index is a rank (or a
select over pool words) runs many times slower than the same gather of a
precomputed index. Here the per-sample work is a vectorized loop whose
output (the table index, uint16) is a buffer of its own, the ``lax.cond``'s
result, and the one per-sample gather reads it. And the program keeps its
scratch small: glibc serves allocations above 32 MB by ``mmap`` afresh on
every call, so a scratch above that pays its page faults again on every
call. The fallback branch therefore draws its fresh bits one lane row at a
time (``lax.map``).

A call of 2^31 samples or more (padded) is drawn in equal chunks of at most
2^30, each a pass of its own key (a split of the call's): a pass's flat
positions and pool ranks are int32, as JAX without x64 computes them, and a
loop over the chunks keeps one chunk's scratch live. Smaller calls are one
pass.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.numerics import codes as codes_lib
from jaxfp8._src.numerics import formats
from jaxfp8._src.random import bits as bits_lib
from jaxfp8._src.random import common
from jaxfp8._src.random import laws
from jaxfp8._src.random import pool as pool_lib
from jaxfp8._src.random import tree_plan

_RADIX = tree_plan.RADIX  # bits per tree level


@functools.lru_cache(maxsize=256)
def plan(dist: str, fmt_name: str, params: tuple[tuple[str, float], ...]
         ) -> tree_plan.TreePlan:
  """The exact plan of a law (:func:`tree_plan.plan_for_masses` of its
  quantized masses), built once per law."""
  fmt = formats.get(fmt_name)
  _, probs = laws.rounded_law(dist, fmt, **dict(params))
  return tree_plan.plan_for_masses(laws.quantize(probs, 32),
                                   common.codes_table(fmt))


def bits_per_sample(dist: str, fmt: formats.Format, params: dict) -> float:
  """Random bits a call of 2^22 samples of the exact method spends per
  sample, every word drawn counted."""
  return tree_plan.plan_bits(plan(dist, fmt.name,
                                  tuple(sorted(params.items()))))


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


# The samples one pass of the DDG sampler draws at most: its flat positions,
# pool ranks and word offsets are int32 (JAX without x64), and the largest of
# them, an unused rare slot's out-of-bounds position, is the padded sample
# count. A call of more samples draws equal chunks of at most ``_CHUNK``
# samples, each a pass of its own key; a call of fewer is the one pass it
# always was, so its samples are unchanged. (A pure table's pass indexes
# only its table: one pass at any size.)
_ONE_PASS = 1 << 31
_CHUNK = 1 << 30


def pass_size(n_pad: int) -> int:
  """The samples one pass draws in a call of ``n_pad`` (padded) samples: all
  of them, or past ``_ONE_PASS`` the size of the fewest equal chunks (whole
  groups of :data:`tree_plan.PAD`) of at most ``_CHUNK``.

  >>> pass_size(1 << 22), pass_size(1 << 31), pass_size(3 << 30)
  (4194304, 1073741824, 1073741824)
  >>> pass_size((1 << 31) + 128)  # 3 chunks, not 2^30 samples for the last 5
  715827968
  """
  if n_pad < _ONE_PASS:
    return n_pad
  chunks = -(-n_pad // _CHUNK)
  return -(-n_pad // (chunks * tree_plan.PAD)) * tree_plan.PAD


@functools.partial(jax.jit, static_argnames=(
    "kind", "width", "levels", "capacity", "rare_capacity", "fmt_name",
    "shape", "chunk"))
def _tree_sample(key, main, pure, offset, counts, *, kind, width, levels,
                 capacity, rare_capacity, fmt_name, shape, chunk):
  # The tables and the pool's counts are arguments, not constants: one
  # compilation serves every law of a format, table size class, shape, depth
  # and pool capacities.
  fmt = formats.get(fmt_name)
  n, n_pad = bits_lib.padded_size(shape, tree_plan.PAD)
  if kind == "pure":
    codes = main[bits_lib.packed(key, n, width)]
    return codes_lib.from_codes(codes.reshape(shape), fmt)
  ddg = functools.partial(_ddg_codes, main=main, pure=pure, offset=offset,
                          counts=counts, levels=levels, capacity=capacity,
                          rare_capacity=rare_capacity)
  if chunk == n_pad:
    codes = ddg(key, n, n_pad)
  else:
    # Chunk c, flat samples c * chunk .., is a pass of key c of a split: a
    # loop, so that one chunk's scratch is live at a time.
    chunks = -(-n // chunk)
    codes = lax.map(lambda k: ddg(k, chunk, chunk),
                    jax.random.split(key, chunks)).reshape(chunks * chunk)
    codes = codes[:n] if chunks * chunk != n else codes
  return codes_lib.from_codes(codes.reshape(shape), fmt)


def _ddg_codes(key, n: int, n_pad: int, *, main, pure, offset, counts,
               levels: int, capacity: int, rare_capacity: int) -> jax.Array:
  """One pass of the DDG sampler: the flat uint8 codes of ``n`` samples
  (``n_pad`` of them padded to whole groups: below ``_ONE_PASS``)."""
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

  index, position, rare = lax.cond(overflow, fresh, pooled, w, m1, m3, b1,
                                   b3, pool, words)
  # The rare samples' indices replace the two-level ones (a scatter of
  # ``rare_capacity`` entries, the out-of-bounds ones dropped).
  index = index.reshape(n_pad).at[position].set(rare, mode="drop")
  return main.at[index[:n].astype(jnp.int32)].get(mode="promise_in_bounds")


def _table_class(size: int) -> int:
  """The padded length of a tree's table: 2^16 (uint16 indices) or 2^18
  (four levels hold at most 256 * (1 + 3 * 255) entries)."""
  return 1 << 16 if size <= 1 << 16 else 1 << 18


def sample_plan(key, p: tree_plan.TreePlan, shape: tuple[int, ...],
                fmt: formats.Format, *, pool: tree_plan.Pool | None = None,
                chunk: int | None = None):
  """Samples of the law of plan ``p`` in ``fmt`` (native array or
  CodeArray). ``pool`` replaces the pool's sizes (for tests: one too small
  for the call takes the fresh-bits branch), ``chunk`` the samples of a pass
  (for tests: a multiple of :data:`tree_plan.PAD` below ``_ONE_PASS``; a
  call of more samples is drawn in chunks of it)."""
  shape = tuple(shape)
  if p.kind == "pure":
    return _tree_sample(key, p.main, np.zeros(1, np.int32),
                        np.zeros(1, np.int32), np.zeros(4, np.int32),
                        kind="pure", width=p.width, levels=1, capacity=0,
                        rare_capacity=0, fmt_name=fmt.name, shape=shape,
                        chunk=0)
  n_pad = bits_lib.padded_size(shape, tree_plan.PAD)[1]
  chunk = min(chunk or pass_size(n_pad), n_pad)
  # The pool and its capacities are a pass's.
  pool = pool or tree_plan.pool_for(p, chunk)
  main = np.zeros(_table_class(len(p.main)), np.uint8)
  main[:len(p.main)] = p.main
  return _tree_sample(key, main, np.array(p.pure, np.int32),
                      np.array(p.offset, np.int32),
                      pool.counts(), kind="ddg", width=p.width,
                      levels=p.levels, capacity=pool.capacity(chunk),
                      rare_capacity=pool.rare_capacity, fmt_name=fmt.name,
                      shape=shape, chunk=chunk)


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
