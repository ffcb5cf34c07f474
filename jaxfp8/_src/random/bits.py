"""Random bits in the narrow widths the samplers consume.

``jax.random.bits(key, (n,), uint8)`` spends a whole 32-bit word per byte;
drawing ``n/4`` uint32 words and viewing them as bytes (``n/2`` words for
16-bit draws) gives the same independent uniform bits at a quarter (half) of
the cost. :func:`packed` generalizes this to any width: ``32 // width``
draws per word (three 10-bit draws, five 6-bit draws...), the unused high
bits of each word dropped.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.random import threefry2x32_p

from jaxfp8._src.numerics import validate


def words(key, n: int) -> jax.Array:
  """``n`` independent uniform uint32 words.

  Threefry keys (JAX's default) go through the Threefry-2x32 hash directly,
  keeping both of its output words: words ``2i`` and ``2i + 1`` are the hash
  of the 64-bit counter ``i`` (high word 0, low word ``i``), the counter
  ``jax.random.bits`` uses for its element ``i``. That scheme hashes once per
  word (and returns the XOR of the pair): a hash per word where this spends
  one per two. The counters are an iota and a word depends on its own
  counter only, so a sharded draw computes only its own shard's words.

  Other keys draw ``jax.random.bits`` of an even count (one word more for odd
  ``n``, then dropped): odd counts cost many times more per word on CPU.
  Their words pass an optimization barrier: XLA CPU expands rbg's
  ``rng_bit_generator`` into element-wise arithmetic and fused a copy of it
  into each consumer of the words, so the DDG sampler computed its first
  bytes' words three times; behind barriers here and in :func:`word_rows`,
  once.
  """
  if _is_threefry(key) and n < (1 << 32):
    m = -(-n // _THREEFRY_BLOCK) * _THREEFRY_BLOCK
    out = _hashed_words(key, jnp.uint32(0), m, threefry2x32_p.bind)
  else:
    m = n + (n & 1)
    out = lax.optimization_barrier(jax.random.bits(key, (m,), jnp.uint32))
  return out[:n] if m != n else out


def bits32(key, shape: tuple[int, ...]) -> jax.Array:
  """``jax.random.bits(key, shape, jnp.uint32)``, the same words, faster.

  For Threefry keys under ``jax_threefry_partitionable`` (JAX's default),
  JAX's word ``i`` (row-major) is the XOR of the two output words of
  Threefry-2x32 of the 64-bit counter ``i``; this computes that with the
  written-out hash (:func:`_threefry2x32`), one fused pass instead of the
  primitive's rolled loop (about half the time on CPU). Other keys, the
  other mode and counts of 2^32 or more call ``jax.random.bits`` itself.

  >>> k = jax.random.key(3)
  >>> bool(jnp.all(bits32(k, (3, 5)) == jax.random.bits(k, (3, 5), jnp.uint32)))
  True
  """
  n = math.prod(shape)
  if not (_is_threefry(key) and jax.config.jax_threefry_partitionable
          and n < (1 << 32)):
    return jax.random.bits(key, shape, jnp.uint32)
  data = jax.random.key_data(key) if validate.is_typed_key(key) else key
  counter = lax.iota(jnp.uint32, n).reshape(shape)
  hi, lo = _threefry2x32(data[0], data[1], jnp.zeros_like(counter), counter)
  return hi ^ lo


def word_rows(key, rows: int, cols: int) -> jax.Array:
  """A (rows, cols) array of independent uniform uint32 words.

  For Threefry keys these are the words of :func:`words` ``(key, rows *
  cols)`` (``rows`` even) laid out planar: the hash of counter ``i = r * cols
  + c`` (``r < rows / 2``) gives word ``(r, c)`` and its second output word
  ``(r + rows / 2, c)``. The hash is the written-out one
  (:func:`_threefry2x32`): its two outputs as two halves are one fused pass
  that computes each hash twice, and that still runs faster than the
  primitive's rolled loop and its copies. Interleaved, XLA CPU wrote the
  primitive's words out once per shape its consumers read them in (twice in
  the DDG sampler). The
  counters stay an iota, so a sharded draw computes only its own columns'
  words. Other keys (and odd ``rows``): :func:`words` reshaped.

  >>> k = jax.random.key(0)
  >>> w, flat = word_rows(k, 4, 256), words(k, 1024)
  >>> bool(jnp.all(w[0] == flat[0:512:2])), bool(jnp.all(w[2] == flat[1:512:2]))
  (True, True)
  """
  half = rows // 2 * cols
  if not (_is_threefry(key) and rows % 2 == 0 and 0 < half < (1 << 32)):
    # Behind a barrier in their rows too: XLA CPU then computes rbg's words
    # once, not once per consumer (see :func:`words`).
    flat = words(key, rows * cols)
    return lax.optimization_barrier(flat.reshape(rows, cols))
  data = jax.random.key_data(key) if validate.is_typed_key(key) else key
  shape = (rows // 2, cols)
  counter = (lax.broadcasted_iota(jnp.uint32, shape, 0) * jnp.uint32(cols)
             + lax.broadcasted_iota(jnp.uint32, shape, 1))
  pair = _threefry2x32(data[0], data[1], jnp.zeros_like(counter), counter)
  return jnp.concatenate(pair)


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _threefry2x32(k0, k1, x0, x1):
  """Threefry-2x32 (20 rounds; Salmon et al. 2011), the hash of
  ``jax.extend.random.threefry2x32_p``, written out in uint32 ops.

  XLA CPU lowers JAX's primitive as a rolled loop of 5 iterations; in
  :func:`words_upto`'s loop over parts that loop's per-iteration cost
  dominated (the parts are small). Written out, a part is one fused pass.
  ``tests/random/test_random_laws.py`` checks the words against the primitive's.
  """
  def rotl(v, r):
    return (v << jnp.uint32(r)) | (v >> jnp.uint32(32 - r))

  ks = (k0, k1, k0 ^ k1 ^ jnp.uint32(0x1BD11BDA))
  x0, x1 = x0 + ks[0], x1 + ks[1]
  for i in range(5):
    for r in _ROTATIONS[i % 2]:
      x0 = x0 + x1
      x1 = rotl(x1, r) ^ x0
    x0 = x0 + ks[(i + 1) % 3]
    x1 = x1 + ks[(i + 2) % 3] + jnp.uint32(i + 1)
  return x0, x1


def _hashed_words(key, first: jax.Array, n: int, hash2x32) -> jax.Array:
  """Words ``2 * first .. 2 * first + n - 1`` of a Threefry key's stream:
  both output words of ``hash2x32`` over the counters ``first ..``."""
  data = jax.random.key_data(key) if validate.is_typed_key(key) else key
  counter = lax.iota(jnp.uint32, n // 2) + first
  pair = hash2x32(data[0], data[1], jnp.zeros_like(counter), counter)
  return jnp.stack(pair, axis=-1).reshape(n)


def words_at(key, start: jax.Array, n: int) -> jax.Array:
  """Words ``start .. start + n - 1`` (``start`` even, traced; ``n`` even) of
  the stream :func:`words` draws for Threefry keys; for other keys, ``n``
  fresh words of ``fold_in(key, start)``."""
  if _is_threefry(key):
    return _hashed_words(key, (start // 2).astype(jnp.uint32), n,
                         _threefry2x32)
  return jax.random.bits(jax.random.fold_in(key, start), (n,), jnp.uint32)


def part_words(capacity: int) -> int:
  """The words :func:`words_upto` draws per loop step for a pool of
  ``capacity`` words: 1/256 of it, at least 512."""
  return max(capacity // 256, 512)


def words_computed(count: int, capacity: int) -> int:
  """How many words ``words_upto(key, count, capacity)`` computes: whole
  parts (:func:`part_words`) up to ``count``.

  >>> words_computed(600, 1024), words_computed(5000, 8192)
  (1024, 5120)
  """
  part = part_words(capacity)
  return -(-max(count, 0) // part) * part


def words_upto(key, count: jax.Array, capacity: int) -> jax.Array:
  """``capacity`` uint32 words whose first ``count`` (traced, at most
  ``capacity``) are independent and uniform; the rest are unspecified.

  Only :func:`words_computed` words are computed, :func:`part_words` at a
  time in a loop while ``count`` needs them (a second loop of 16-part steps
  compiled slower and ran no faster). So one compiled
  program serves every ``count`` up to ``capacity`` (a sampler's pool, sized
  per law), and the words drawn stay within a part of the count. For
  Threefry keys the words are those of ``words(key, count)``.

  >>> k = jax.random.key(0)
  >>> w = words_upto(k, 700, 2048)
  >>> bool(jnp.all(w[:700] == words(k, 700))), bool(jnp.all(w[1024:] == 0))
  (True, True)
  """
  part = part_words(capacity)
  if capacity % part:
    raise ValueError("`capacity` argument to `words_upto` must be whole "
                     f"parts of {part} words, got {capacity}")
  steps = (jnp.maximum(count, 0) + part - 1) // part

  def step(i, buf):
    return lax.dynamic_update_slice(buf, words_at(key, i * part, part),
                                    (i * part,))

  return lax.fori_loop(0, steps, step, jnp.zeros(capacity, jnp.uint32))


# Threefry draws are whole blocks of this many words (the rest dropped): the
# hash over other lengths (odd halves above all) runs slower per word on XLA
# CPU.
_THREEFRY_BLOCK = 512


def _is_threefry(key) -> bool:
  """Whether ``key`` (typed, or raw of the default implementation) is a
  Threefry-2x32 key."""
  if validate.is_typed_key(key):
    return str(jax.random.key_impl(key)) == "threefry2x32"
  return (key.dtype == jnp.uint32 and key.shape == (2,)
          and str(jax.config.jax_default_prng_impl) == "threefry2x32")


def uint16(key, n: int) -> jax.Array:
  """``n`` independent uniform uint16 values (``n`` even), from ``n/2`` words."""
  w = words(key, n // 2)
  return lax.bitcast_convert_type(w, jnp.uint16).reshape(n)


def uint8(key, n: int) -> jax.Array:
  """``n`` independent uniform bytes (``n`` divisible by 4), from ``n/4`` words."""
  w = words(key, n // 4)
  return lax.bitcast_convert_type(w, jnp.uint8).reshape(n)


def padded_size(shape: tuple[int, ...], multiple: int) -> tuple[int, int]:
  """(number of samples, that number rounded up to ``multiple``)."""
  n = 1
  for d in shape:
    n *= d
  return n, -(-n // multiple) * multiple


def per_word(width: int) -> int:
  """How many ``width``-bit draws one 32-bit word gives."""
  return 32 // width


def packed(key, n: int, width: int) -> jax.Array:
  """``n`` independent uniform ``width``-bit integers (1 <= width <= 16), as
  int32, from ``ceil(n / (32 // width))`` words.

  Widths 8 and 16 are the words' bytes or halves in memory order. Other
  widths are field-major: the first ``W`` draws are the low fields of the
  ``W`` words, the next ``W`` their second fields, and so on (faster than
  word-major when a gather consumes them, as the 10-bit table of U[0, 1) in
  float8_e4m3fn does).
  """
  per = per_word(width)
  if width == 16:
    return uint16(key, -(-n // 2) * 2)[:n].astype(jnp.int32)
  if width == 8:
    return uint8(key, -(-n // 4) * 4)[:n].astype(jnp.int32)
  count = -(-n // per)
  w = words(key, count)
  shifts = jnp.arange(per, dtype=jnp.uint32)[:, None] * width
  u = (w[None, :] >> shifts) & jnp.uint32((1 << width) - 1)
  return u.reshape(-1)[:n].astype(jnp.int32)
