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
from jax import lax

from jaxfp8._src.mx import tuning

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


# The two steps a quantizer splits around its branch (`pack_groups`, then
# `pack_bytes`) combine groups through integer bitcasts
# (``lax.bitcast_convert_type`` between uint8 and a wider word is
# little-endian: byte 0 is the low byte); see `pack_groups` for what not to
# fuse. `pack` itself makes 6-bit bytes from the four codes' slices, the
# faster loop on jaxlib 0.10 and 0.12 alike once the codes are written out.


def merge_last(x: jax.Array) -> jax.Array:
  """Merges the last two axes (explicit sizes: zero-size arrays stay fine)."""
  return x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1])


def pack(codes: jax.Array, bits: int) -> jax.Array:
  """Packs uint8 codes (low ``bits`` bits used) along the last axis.

  6-bit codes become their three bytes directly (each byte from two codes
  of its group, in uint8 arithmetic): a loop over the bytes that XLA on CPU
  runs faster than the word of each group cut into bytes
  (:func:`pack_groups`, then :func:`pack_bytes`, which a quantizer that
  packs inside its branches still uses).

  >>> pack(jnp.array([1, 2, 3, 63], jnp.uint8), 6)  # c0 | c1 << 6 | ...
  Array([129, 48, 252], dtype=uint8)
  """
  codes = codes.astype(_U8)
  if bits != 6:
    return pack_bytes(pack_groups(codes, bits), bits)
  g = codes.reshape(*codes.shape[:-1], codes.shape[-1] // 4, 4)
  c0, c1, c2, c3 = (g[..., i] for i in range(4))
  # Shifts of uint8 drop what leaves the byte: c1 << 6 keeps c1's low 2 bits.
  out = jnp.stack([(c0 & 0x3F) | (c1 << 6), ((c1 >> 2) & 0xF) | (c2 << 4),
                   ((c2 >> 4) & 0x3) | (c3 << 2)], axis=-1)
  return merge_last(out)


def pack_groups(codes: jax.Array, bits: int) -> jax.Array:
  """The first step of :func:`pack`: 6-bit codes as one word per group.

  Each group of four 6-bit codes becomes the uint32 word
  ``c0 | c1 << 6 | c2 << 12 | c3 << 18``; other widths come back as uint8
  codes. :func:`pack_bytes` finishes. Two steps because XLA on CPU vectorizes
  each of them in a loop of its own, and neither once fused with the other
  (nor the 4-bit packing with the code arithmetic before it): callers that
  compute codes put a ``lax.cond`` or another boundary between the steps.
  """
  codes = codes.astype(_U8)
  if bits != 6:
    return codes
  g = codes.reshape(*codes.shape[:-1], codes.shape[-1] // 4, 4)
  w = lax.bitcast_convert_type(g, jnp.uint32)  # c0 | c1 << 8 | c2 << 16 | ...
  return ((w & 0x3F) | ((w >> 2) & 0xFC0) | ((w >> 4) & 0x3F000)
          | ((w >> 6) & 0xFC0000))


def pack_bytes(groups: jax.Array, bits: int) -> jax.Array:
  """The second step of :func:`pack`: bytes from :func:`pack_groups`' result."""
  if bits == 8:
    return groups
  if bits == 4:
    g = groups.reshape(*groups.shape[:-1], groups.shape[-1] // 2, 2)
    w = lax.bitcast_convert_type(g, jnp.uint16)  # c0 | c1 << 8
    return ((w & 0xF) | ((w >> 4) & 0xF0)).astype(_U8)
  if groups.shape[-1] % 4 or not tuning.PACK_6BIT_AS_RUNS:
    out = lax.bitcast_convert_type(groups, _U8)[..., :3]
    return merge_last(out)
  # Four groups (24 bits each) are 12 bytes: two words spliced from the first
  # three groups, then one from the last two. Written as 8 + 4 bytes, XLA on
  # CPU (jaxlib 0.10) copies them into place in runs; cutting the 3 low bytes
  # out of each group's word costs it index arithmetic per byte (see
  # `tuning.PACK_6BIT_AS_RUNS`).
  g = groups.reshape(*groups.shape[:-1], groups.shape[-1] // 4, 4)
  w0, w1, w2, w3 = (g[..., i] for i in range(4))
  head = jnp.stack([w0 | (w1 << 24), (w1 >> 8) | (w2 << 16)], axis=-1)
  tail = (w2 >> 16) | (w3 << 8)
  out = jnp.concatenate([merge_last(lax.bitcast_convert_type(head, _U8)),
                         lax.bitcast_convert_type(tail, _U8)], axis=-1)
  return merge_last(out)


def unpack(data: jax.Array, bits: int) -> jax.Array:
  """Inverse of :func:`pack`: uint8 codes, one per element."""
  data = data.astype(_U8)
  if bits == 8:
    return data
  if bits == 4:
    d = data.astype(jnp.uint16)
    w = (d & 0xF) | ((d & 0xF0) << 4)
    out = lax.bitcast_convert_type(w, _U8)
    return merge_last(out)
  if data.shape[-1] % 12 or not tuning.UNPACK_6BIT_FROM_WORDS:
    g = data.reshape(*data.shape[:-1], data.shape[-1] // 3, 3)
    g = jnp.concatenate([g, jnp.zeros(g.shape[:-1] + (1,), _U8)], axis=-1)
    v = lax.bitcast_convert_type(g, jnp.uint32)
  else:  # four groups from the three words of their 12 bytes
    t = lax.bitcast_convert_type(
        data.reshape(*data.shape[:-1], data.shape[-1] // 12, 3, 4),
        jnp.uint32)
    t0, t1, t2 = t[..., 0], t[..., 1], t[..., 2]
    low = jnp.uint32(0xFFFFFF)
    v = jnp.stack([t0 & low, ((t0 >> 24) | (t1 << 8)) & low,
                   ((t1 >> 16) | (t2 << 16)) & low, t2 >> 8], axis=-1)
  w = ((v & 0x3F) | ((v << 2) & 0x3F00) | ((v << 4) & 0x3F0000)
       | ((v << 6) & 0x3F000000))
  out = lax.bitcast_convert_type(w, _U8)
  return out.reshape(*data.shape[:-1], data.shape[-1] // 3 * 4)
