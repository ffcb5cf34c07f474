"""MX block scales: block maxima, E8M0 scales and NVFP4's two-level scales.

A block's scale is chosen from its largest magnitude, ``amax``
(:func:`block_max`), by one of :data:`SCALE_MODES` (documented at
:func:`jaxfp8._src.mx.array.quantize`):

* MX formats (:func:`e8m0_scales`): a power of two 2^k, k an E8M0 exponent
  in [-127, 127]; code 0xFF marks a block holding NaN or Inf.
* nvfp4 (:func:`nv_scales`): a per-tensor power of two 2^j, the smallest
  with amax <= (e2m1 max) * (e4m3 max) * 2^j, times per-block E4M3 scales,
  ``amax / (e2m1 max * 2^j)`` rounded into E4M3; the E4M3 NaN code marks a
  block holding NaN or Inf.

All of it is integer arithmetic on float32 bit patterns
(:mod:`jaxfp8._src.mx.bits`): the smallest E8M0 scale, 2^-127, is itself a
float32 subnormal, which XLA on CPU flushes to zero in float arithmetic.
"""
from __future__ import annotations

import math
from typing import Literal

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.mx import bits as bits_lib
from jaxfp8._src.mx import elements as elements_lib
from jaxfp8._src.mx import f32
from jaxfp8._src.mx import tuning
from jaxfp8._src.mx.formats import MXFormat
from jaxfp8._src.numerics import rounding as rounding_lib

ScaleMode = Literal["floor", "rceil", "ceil", "even"]
SCALE_MODES: tuple[str, ...] = ("floor", "rceil", "ceil", "even")

U32, I32 = bits_lib.U32, bits_lib.I32
_ONE = 0x3F800000  # float32 1.0: a stand-in amax for blocks without one


def halve_max(m: jax.Array, axis: int) -> jax.Array:
  """``m`` with ``axis`` cut to at most 2 by elementwise maxima of its halves,
  where it is longer than 4 (else ``m`` itself): the same maxima over it.

  XLA on CPU splits a reduce over a long axis into reduce-windows that do
  not fuse with what makes their input, which is then written out whole;
  the maxima of halves are one loop fusion with that input, leaving a short
  reduce.

  >>> halve_max(jnp.arange(10, dtype=jnp.uint32).reshape(1, 10), 1)
  Array([[8, 9]], dtype=uint32)
  """
  axis = axis % m.ndim
  if m.shape[axis] <= 4:
    return m
  while (n := m.shape[axis]) > 2:
    h = n // 2
    top = jnp.maximum(lax.slice_in_dim(m, 0, h, axis=axis),
                      lax.slice_in_dim(m, h, 2 * h, axis=axis))
    if n % 2:  # the odd one out goes on as it is
      top = jnp.concatenate([top, lax.slice_in_dim(m, n - 1, n, axis=axis)],
                            axis=axis)
    m = top
  return m


def block_max(flat_bits: jax.Array, block_size: int) -> jax.Array:
  """Block maxima of magnitudes: float32 bits (..., padded) -> (..., n_blocks).

  NaN sorts above Inf, so a block holding either has a maximum >= Inf bits.
  Each block is viewed as rows of 8 and reduced over both axes, which XLA on
  CPU vectorizes along the rows; a reduce over the 32 minor elements of
  (..., n_blocks, 32) runs element by element. The view is taken of the
  unblocked array: from the blocked one XLA folds it back into that slow
  reduce. Blocks of 16 reduce as :data:`tuning.MAX_OF_ROW_PAIRS` says; more
  than 4 rows are first halved (:func:`halve_max`).
  """
  n = flat_bits.shape[-1] // block_size
  if block_size % 8 or block_size == 8:
    rows = flat_bits.reshape(*flat_bits.shape[:-1], n, 1, block_size)
  else:
    rows = flat_bits.reshape(*flat_bits.shape[:-1], n, block_size // 8, 8)
  rows = halve_max(rows & 0x7FFFFFFF, -2)
  if block_size == 16 and tuning.MAX_OF_ROW_PAIRS:
    return jnp.max(jnp.maximum(rows[..., 0, :], rows[..., 1, :]), axis=-1)
  return jnp.max(rows, axis=(-2, -1))


# -- E8M0 (MX formats) ---------------------------------------------------------

def _scale_exponents(amax, mx: MXFormat, mode: str):
  """Unbiased E8M0 exponents of blocks with finite, nonzero ``amax`` bits."""
  e, s = bits_lib.split(amax)
  frac = s & 0x7FFFFF
  if mode == "floor":
    bump = jnp.zeros(frac.shape, I32)
  elif mode == "ceil":  # 2^(ceil(log2 amax) - emax)
    bump = (frac != 0).astype(I32)
  elif mode == "rceil":  # smallest 2^k with amax <= max * 2^k
    bump = (frac > bits_lib.frac_bits(mx.max)).astype(I32)
  else:  # even: amax rounded (half up) to the element's mantissa width
    carry = frac + (1 << (22 - mx.mantissa_bits))
    bump = (carry >= (1 << 23)).astype(I32)
  return jnp.clip(e - 127 + bump - mx.emax, -127, 127)


def e8m0_scales(amax: jax.Array, mx: MXFormat, mode: str
                ) -> tuple[jax.Array, jax.Array]:
  """E8M0 scale codes of blocks with maxima ``amax``, and their exponents.

  Args:
    amax: uint32 block maxima from :func:`block_max`.
    mx: the MX format (power-of-two scales).
    mode: one of :data:`SCALE_MODES`.

  Returns:
    ``(codes, k)``: uint8 codes (0xFF for blocks with NaN or Inf) and int32
    exponents k, scale = 2^k (-127 for all-zero blocks, the smallest scale).
  """
  bad, zero = amax >= bits_lib.INF, amax == 0
  k = _scale_exponents(jnp.where(bad | zero, U32(_ONE), amax), mx, mode)
  k = jnp.where(zero, -127, k)
  return jnp.where(bad, 255, k + 127).astype(jnp.uint8), k


def e8m0_parts(scales: jax.Array) -> tuple[jax.Array, jax.Array]:
  """E8M0 scale codes -> (their exponents, int32; whether each is NaN)."""
  return scales.astype(I32) - 127, scales == 255


# -- NVFP4: a power-of-two tensor scale and E4M3 block scales ------------------

_NV_SCALE_ROUNDING = {"floor": "down", "ceil": "up", "rceil": "up",
                      "even": "nearest"}


def _nv_range(mx: MXFormat) -> float:
  """The largest magnitude a tensor scale of 1 holds: e2m1 max * e4m3 max."""
  return mx.max * mx.scale.max


def _tensor_exponent(tamax, mx: MXFormat):
  """j of the tensor scale 2^j: the smallest with tamax <= range * 2^j.

  ``tamax``: uint32 bits of the tensor's finite amax; 0 gives j = 0.
  """
  nv_range = _nv_range(mx)
  e, s = bits_lib.split(jnp.where(tamax == 0, U32(_ONE), tamax))
  j = e - 127 - math.floor(math.log2(nv_range))
  j = j + ((s & 0x7FFFFF) > bits_lib.frac_bits(nv_range)).astype(I32)
  return jnp.where(tamax == 0, 0, jnp.clip(j, -126, 127))


def nv_scales(bmax: jax.Array, mx: MXFormat, mode: str
              ) -> tuple[jax.Array, jax.Array]:
  """nvfp4's scales of blocks with maxima ``bmax``: (block codes, j).

  Args:
    bmax: uint32 block maxima from :func:`block_max`.
    mx: the nvfp4 format.
    mode: one of :data:`SCALE_MODES`: block scales round into E4M3 down for
      ``"floor"``, up for ``"ceil"`` and ``"rceil"``, to nearest for
      ``"even"``.

  Returns:
    ``(codes, j)``: uint8 E4M3 codes of the block scales (the NaN code for
    blocks with NaN or Inf) and the int32 exponent j of the tensor scale 2^j.
  """
  bad = bmax >= bits_lib.INF
  # The tensor's amax is over the blocks without NaN or Inf (those decode to
  # NaN whatever their scale); from block maxima, so x is read once for it.
  bmax = jnp.where(bad, U32(0), bmax)
  j = _tensor_exponent(jnp.max(bmax, initial=0), mx)
  # Monotone: the block max of x / 2^j (0 below 2^-126, where q rounds to
  # 0 in E4M3 either way).
  bamax = rounding_lib.ldexp_or_zero(bmax, -j)
  # Division is correctly rounded, and a quotient by the element max (or by
  # a 4-bit scale, later) never rounds onto a rounding boundary of a coarser
  # grid unless it is exactly there, so rounding the float32 quotient again
  # is exact.
  q = f32.divide(lax.bitcast_convert_type(bamax, jnp.float32),
                 np.float32(mx.max))
  scale_rounding = _NV_SCALE_ROUNDING[mode]
  sc = _scale_codes(q, mx.scale, scale_rounding)
  if scale_rounding == "up":  # x / 2^j or q may be below float32's range
    sc = jnp.where((bmax > 0) & (sc == 0), jnp.uint8(1), sc)
  return jnp.where(bad, jnp.uint8(mx.scale.nan_code), sc), j


def _scale_codes(q, fmt, rounding: str):
  """``round_to_codes(q, fmt, rounding=...)`` (saturating) for q >= 0 finite.

  The fast path's arithmetic (see :mod:`jaxfp8._src.mx.elements`) with
  directed roundings, for nvfp4's block scales: the generic rounding, which
  serves every format and rounding, is far slower here. Float32 subnormal q
  (flushed to 0 by XLA) give 0 also where rounding up gives the smallest
  subnormal: the caller sets that one.
  """
  m, emin = fmt.mantissa_bits, fmt.min_exponent
  b = lax.bitcast_convert_type(q, U32)
  sh = 23 - m
  z = q * np.float32(2.0**(m - emin))  # below the normal range: in units
  if rounding == "down":                # of the smallest subnormal
    r, low = b >> sh, z.astype(U32)
  elif rounding == "up":
    r = (b + ((1 << sh) - 1)) >> sh
    t = z.astype(U32)
    low = t + (t.astype(jnp.float32) < z).astype(U32)
  else:
    r = (b + ((1 << (sh - 1)) - 1) + ((b >> sh) & 1)) >> sh
    low = bits_lib.nearest_integer(z)
  high = jnp.minimum(r - U32((127 - fmt.bias) << m),
                     U32(elements_lib.max_code(fmt)))
  normal = b >= U32((emin + 127) << 23)
  return jnp.where(normal, high, low).astype(jnp.uint8)


def scale_values(scales: jax.Array, mx: MXFormat) -> jax.Array:
  """float32 values of nvfp4's E4M3 block-scale codes (NaN for the NaN code),
  by :func:`jaxfp8._src.mx.elements.fp8_values` rather than XLA CPU's slower
  convert."""
  if scales.dtype != jnp.uint8:
    scales = lax.bitcast_convert_type(scales, jnp.uint8)
  return elements_lib.fp8_values(scales, mx.scale)


def nv_fast_min_exponent(mx: MXFormat) -> int:
  """The smallest tensor exponent j at which nvfp4's fast path is exact.

  The fast path flushes float32 subnormal inputs x to zero. Below this j
  they may quantize to nonzero elements: x / 2^j / scale is below
  2^-126 / 2^j / (smallest E4M3 scale), at most half the smallest e2m1
  subnormal only from this j on.
  """
  return int(-126 - math.log2(mx.scale.min_subnormal)
             - math.log2(mx.element.min_subnormal / 2))
