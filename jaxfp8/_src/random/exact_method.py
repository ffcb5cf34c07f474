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
  ``w = 8`` or ``10`` bits and the rest is pure at most 8 bits further, a
  draw lands in a fine bucket with probability <= 1/32 and then reads a
  second table with 8 pooled refinement bits (see below). This is how
  U[0, 1) in float8_e5m2 (atom 2^-17 at zero) costs 12.7 bits, not 18.
- **Alias tables with a rare refinement.** Otherwise a 65,536-bucket alias
  table (Walker/Vose, in integers): bucket ``j`` holds two codes ``a, b`` and
  a 16-bit threshold ``t``, packed in one uint32 (one gather per sample); the
  sample is ``a`` if ``r < t`` else ``b`` for 16 more random bits ``r``. At
  most one bucket per value is split (``0 < t``), so a sample needs ``r``
  with probability at most ``(#values)/65536`` (0.4% for fp8).

Refinement bits come from a small pool: every group of 32 samples owns two
extra words (four 16-bit or eight 8-bit slots) and its k-th sample needing
one takes slot k (k from a popcount of the group's mask: no sort, no scan).
If any group needs more slots than it has (in 0.2% of calls of 2^22 fp8
normal samples, 2% for cauchy, at most 5% for two-level plans), the whole
batch takes its refinements from a fresh stream instead (``lax.cond``).
Either way each refinement used is uniform and independent of everything
else, so ``P(i) = q_i / 2^32`` exactly.

Bits per sample: ``32 / (32 // w)`` for pure tables (10.7 for a 10-bit law),
that plus 2 pooled for two-level tables, 18 (16 + 2 pooled) for alias tables.
"""
from __future__ import annotations

import functools
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
_POOL_WORDS = 2       # words per group: four 16-bit or eight 8-bit slots
_SLOTS = 4            # 16-bit slots per group (alias tables)
_SLOT_BITS = 8        # refinement bits of two-level tables


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


def _free_width(width: int) -> int:
  """The widest draw costing the same words: 11 bits cost as much as 16 (two
  draws per word), 9 as much as 10 (three)."""
  return max(w for w in range(width, 17)
             if bits_lib.per_word(w) == bits_lib.per_word(width))


def _two_level(q: np.ndarray, codes: np.ndarray) -> Plan | None:
  """A coarse table for the bulk plus a fine one for a few buckets, if the
  law is dyadic enough (uniform laws whose atoms near zero are tiny)."""
  edges = np.cumsum(q)[:-1]  # boundaries between values, in 2^-32 units
  for width in (8, 10):
    unit = 1 << (32 - width)
    inner = edges[edges % unit != 0]  # boundaries inside a coarse bucket
    fine_buckets = np.unique(inner // unit)
    if len(fine_buckets) * 32 > (1 << width):  # more than 1/32 of the mass
      continue
    width2 = next((w for w in range(1, _SLOT_BITS + 1)
                   if np.all(inner % (unit >> w) == 0)), None)
    if width2 is None:
      continue
    # Fine buckets first, so that a draw is fine iff it is below their count.
    order = np.concatenate([fine_buckets, np.setdiff1d(
        np.arange(1 << width), fine_buckets)])
    coarse = codes[np.searchsorted(edges, order * unit, side="right")]
    sub = (fine_buckets[:, None] * unit
           + np.arange(1 << width2)[None, :] * (unit >> width2)).ravel()
    fine = codes[np.searchsorted(edges, sub, side="right")]
    return Plan("two_level", width, np.concatenate([coarse, fine]),
                fine=len(fine_buckets), width2=width2)
  return None


@functools.lru_cache(maxsize=256)
def plan(dist: str, fmt_name: str, params: tuple[tuple[str, float], ...]
         ) -> Plan:
  """The cheapest exact way to sample a law: pure, two-level or alias."""
  fmt = formats.get(fmt_name)
  _, probs = laws.rounded_law(dist, fmt, **dict(params))
  q = laws.quantize(probs, 32)
  codes = common.codes_table(fmt)
  candidates = []
  width = next((w for w in range(1, 17) if np.all(q % (1 << (32 - w)) == 0)),
               None)
  if width is not None:
    width = _free_width(width)
    candidates.append(Plan("pure", width, np.repeat(codes, q >> (32 - width))))
  two = _two_level(q, codes)
  if two is not None:
    candidates.append(two)
  if not candidates:
    main, b, t = _alias(q, [int(c) for c in codes])
    packed = main.astype(np.uint32) | (main.astype(np.uint32) << 8)
    packed[:len(b)] = (main[:len(b)].astype(np.uint32)
                       | (b.astype(np.uint32) << 8) | (t << 16))
    return Plan("alias", 16, packed, fine=len(b))
  return min(candidates, key=_bits)


def _bits(p: Plan) -> float:
  main = 32 / bits_lib.per_word(p.width)
  return main if p.kind == "pure" else main + _POOL_WORDS * 32 / _GROUP


def bits_per_sample(dist: str, fmt: formats.Format, params: dict) -> float:
  """Random bits spent per sample (before padding to whole words)."""
  return _bits(plan(dist, fmt.name, tuple(sorted(params.items()))))


def _refinement(key, split, n_pad: int, slot_bits: int = 16,
                finish=lambda r: r):
  """``finish(r)`` for ``slot_bits`` uniform bits ``r`` per split sample.

  Each group of ``_GROUP`` samples owns ``_POOL_WORDS`` words: slots of
  ``slot_bits`` bits; its k-th split sample takes slot k. If a group has more
  split samples than slots, every sample takes fresh bits instead.
  ``finish`` runs inside both branches, so it fuses with the bits it uses
  (measured: faster for alias tables, slower for two-level ones).
  """
  groups = n_pad // _GROUP
  per_word = 32 // slot_bits
  slots = _POOL_WORDS * per_word
  k_pool, k_fallback = jax.random.split(key)
  draw = bits_lib.uint16 if slot_bits == 16 else bits_lib.uint8
  m = split.reshape(groups, _GROUP).astype(jnp.uint32)
  lane = jnp.arange(_GROUP, dtype=jnp.uint32)
  word = jnp.sum(m << lane, axis=1, dtype=jnp.uint32)
  rank = lax.population_count(word[:, None] & ((jnp.uint32(1) << lane) - 1))
  # Slot ``rank``: word rank // per_word of the group's pool, shifted.
  pool = bits_lib.words(k_pool, groups * _POOL_WORDS).reshape(
      groups, _POOL_WORDS)
  w = pool[:, _POOL_WORDS - 1:]
  for k in range(_POOL_WORDS - 2, -1, -1):
    w = jnp.where(rank < (k + 1) * per_word, pool[:, k:k + 1], w)
  shift = (rank % per_word) * slot_bits
  r = ((w >> shift) & jnp.uint32((1 << slot_bits) - 1)).astype(
      jnp.uint16 if slot_bits == 16 else jnp.uint8)
  overflow = jnp.any(lax.population_count(word) > slots)
  return lax.cond(overflow, lambda: finish(draw(k_fallback, n_pad)),
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
    r = _refinement(k_ref, is_fine, n_pad, _SLOT_BITS).astype(jnp.int32)
    index = jnp.where(is_fine, (1 << width) + (u << width2)
                      + (r >> (_SLOT_BITS - width2)), u)
    codes = main[index]
  else:  # one gather of a packed entry: a | b << 8 | t << 16
    k_main, k_ref = jax.random.split(key)
    u = bits_lib.uint16(k_main, n_pad)

    def finish(r):
      entry = main[u.astype(jnp.int32)]
      below = r.astype(jnp.uint32) < (entry >> 16)
      return jnp.where(below, entry, entry >> 8).astype(jnp.uint8)

    codes = _refinement(k_ref, u < fine, n_pad, 16, finish)
  return codes_lib.from_codes(codes[:n].reshape(shape), fmt)


def sample(key, dist: str, shape: tuple[int, ...], fmt: formats.Format,
           params: dict[str, float]):
  """Exact samples of ``dist`` (concrete scalar ``params``) in ``fmt``."""
  p = plan(dist, fmt.name, tuple(sorted(params.items())))
  return _sample(key, p.main, np.int32(p.fine), kind=p.kind, width=p.width,
                 width2=p.width2, fmt_name=fmt.name, shape=tuple(shape))


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
