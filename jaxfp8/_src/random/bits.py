"""Random bits in the narrow widths the samplers consume.

``jax.random.bits(key, (n,), uint8)`` spends a whole 32-bit word per byte;
drawing ``n/4`` uint32 words and viewing them as bytes (``n/2`` words for
16-bit draws) gives the same independent uniform bits at a quarter (half) of
the cost. Sizes are rounded up to whole words; callers slice.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def words(key, n: int) -> jax.Array:
  """``n`` independent uniform uint32 words."""
  return jax.random.bits(key, (n,), jnp.uint32)


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
