"""The ``exact`` method: the rounded law, sampled with integer arithmetic.

At trace time the law of the real draw rounded into the format
(:func:`jaxfp8._src.laws.rounded_law`, float64) is quantized to integer masses
``q_i`` summing to ``2^32`` (each within ``2^-32`` of the true probability,
and equal to it when the law is dyadic at that resolution). On device a
sample picks value ``i`` with probability exactly ``q_i / 2^32``, by
:mod:`jaxfp8._src.random.ddg`:

- **Pure tables.** If every ``q_i`` is a multiple of ``2^(32-w)`` for some
  ``w <= 10``, the law is a ``2^w``-entry table indexed by ``w`` random bits
  (packed ``32 // w`` to a word): one gather per sample. Uniform on [0, 1) is
  such a law in most formats (10 bits for float8_e4m3fn, 2 for float4).
- **DDG trees.** Otherwise a radix-256 Knuth-Yao tree: one byte per sample,
  one pooled byte for the samples whose first byte is deep, two more for the
  rare ones that go deeper (:func:`ddg.sample_plan`). Near the entropy: 10.03
  bits for normal in float8_e4m3fn (entropy 6.45), 9.20 in e5m2, 8.37 in
  float4, pools included (18 for each with the alias table this replaced).

Also Bernoulli draws with a ``bits``-bit threshold, and Rademacher signs.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src import codes as codes_lib
from jaxfp8._src import formats
from jaxfp8._src import laws
from jaxfp8._src.random import bits as bits_lib
from jaxfp8._src.random import common
from jaxfp8._src.random import ddg

# Laws dyadic at 2^-w for w <= 10 keep one lookup of w bits (three to a word
# for w = 9, 10): 2x faster than the old tree for U[0, 1) in float8_e4m3fn,
# and on par with today's two-level tree (4.2x float32-then-cast against
# 4.1x for a two-level law, same run), with no overflow path.
PURE_WIDTH = 10


@functools.lru_cache(maxsize=256)
def plan(dist: str, fmt_name: str, params: tuple[tuple[str, float], ...]
         ) -> ddg.TreePlan:
  """How the exact method samples a law: a pure table or a DDG tree of its
  masses quantized at ``2^-32``."""
  fmt = formats.get(fmt_name)
  _, probs = laws.rounded_law(dist, fmt, **dict(params))
  return ddg.plan_for_masses(laws.quantize(probs, 32), common.codes_table(fmt),
                             pure_width=PURE_WIDTH)


def bits_per_sample(dist: str, fmt: formats.Format, params: dict,
                    n: int = ddg.REFERENCE_N) -> float:
  """Random bits spent per sample by a call of ``n`` samples (2^22 unless
  given), counting every word drawn."""
  return ddg.plan_bits(plan(dist, fmt.name, tuple(sorted(params.items()))), n)


def sample(key, dist: str, shape: tuple[int, ...], fmt: formats.Format,
           params: dict[str, float]):
  """Exact samples of ``dist`` (concrete scalar ``params``) in ``fmt``."""
  return ddg.sample_plan(key, plan(dist, fmt.name,
                                   tuple(sorted(params.items()))), shape, fmt)


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
