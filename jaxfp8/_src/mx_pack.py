"""Bit packing of narrow element codes along the last axis.

Layouts (documented with diagrams in ``docs/mx.md``):

* 4-bit codes, two per byte: element ``2i`` in the low nibble of byte ``i``,
  element ``2i + 1`` in the high nibble.
* 6-bit codes, four in three bytes: elements ``c0..c3`` form the 24-bit
  little-endian word ``c0 | c1 << 6 | c2 << 12 | c3 << 18``, stored as bytes
  ``w & 0xFF``, ``(w >> 8) & 0xFF``, ``w >> 16``.
* 8-bit codes are stored as they are.

Every function works on uint8 arrays of any rank and is jit/vmap friendly.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

_U8 = jnp.uint8

# element bits -> (elements per group, bytes per group)
GROUPS: dict[int, tuple[int, int]] = {4: (2, 1), 6: (4, 3), 8: (1, 1)}


def packed_length(n: int, bits: int) -> int:
  """Bytes that ``n`` codes of ``bits`` bits take along the packed axis."""
  per, nbytes = GROUPS[bits]
  if n % per:
    raise ValueError(f"{n} codes of {bits} bits do not fill whole groups of "
                     f"{per}")
  return n // per * nbytes


def pack(codes: jax.Array, bits: int) -> jax.Array:
  """Packs uint8 codes (low ``bits`` bits used) along the last axis."""
  codes = codes.astype(_U8)
  if bits == 8:
    return codes
  per, _ = GROUPS[bits]
  g = codes.reshape(*codes.shape[:-1], codes.shape[-1] // per, per)
  if bits == 4:
    out = (g[..., 0] & 0xF) | (g[..., 1] << 4)
    return out.astype(_U8)
  c0, c1, c2, c3 = (g[..., i] & 0x3F for i in range(4))
  b0 = c0 | (c1 << 6)
  b1 = (c1 >> 2) | (c2 << 4)
  b2 = (c2 >> 4) | (c3 << 2)
  out = jnp.stack([b0, b1, b2], axis=-1).astype(_U8)
  return out.reshape(*codes.shape[:-1], -1)


def unpack(data: jax.Array, bits: int) -> jax.Array:
  """Inverse of :func:`pack`: uint8 codes, one per element."""
  data = data.astype(_U8)
  if bits == 8:
    return data
  if bits == 4:
    out = jnp.stack([data & 0xF, data >> 4], axis=-1)
    return out.reshape(*data.shape[:-1], -1)
  g = data.reshape(*data.shape[:-1], data.shape[-1] // 3, 3)
  b0, b1, b2 = g[..., 0], g[..., 1], g[..., 2]
  c0 = b0 & 0x3F
  c1 = (b0 >> 6) | ((b1 & 0xF) << 2)
  c2 = (b1 >> 4) | ((b2 & 0x3) << 4)
  c3 = b2 >> 2
  out = jnp.stack([c0, c1, c2, c3], axis=-1).astype(_U8)
  return out.reshape(*data.shape[:-1], -1)
