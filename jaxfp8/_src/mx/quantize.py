"""MX quantization of whole arrays, spec-exact: blocks, branches, storage.

:func:`quantize_blocks` turns a float32 array into packed element codes and
scale codes, :func:`dequantize_blocks` turns them back into float32 values;
:mod:`jaxfp8._src.mx.array` checks the arguments and wraps the results in an
:class:`~jaxfp8._src.mx.array.MXArray`. The pieces are the block scales
(:mod:`jaxfp8._src.mx.scales`), the element codes
(:mod:`jaxfp8._src.mx.elements`) and the packing (:mod:`jaxfp8._src.mx.pack`);
this module cuts the array into blocks and puts them together. nvfp4 goes
through jaxfp8's one NVFP4 quantizer,
:func:`jaxfp8._src.mx.nvfp4.quantize_tiles`, which the training recipes use
too.

Every step that touches a scale is integer arithmetic on float32 bit
patterns (:mod:`jaxfp8._src.mx.bits`): XLA on CPU flushes float32 subnormals
to zero in float arithmetic. Nearest-even quantization takes a fast path (a
few vector operations per element, see :mod:`jaxfp8._src.mx.elements`) for
tensors whose blocks all have scales where it is exact, which is all but
tensors of blocks near 2^-100; the general path stays for those. Each
quantization is a ``lax.cond`` between the two (:func:`_one_of`). The value
path (:func:`values`) has the same two branches without codes: the fast
path's arithmetic, and three exact steps on the bits (:func:`_exact_values`).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.mx import bits as bits_lib
from jaxfp8._src.mx import elements as elements_lib
from jaxfp8._src.mx import nvfp4
from jaxfp8._src.mx import pack as mx_pack
from jaxfp8._src.mx import scales as scales_lib
from jaxfp8._src.mx import tuning
from jaxfp8._src.mx.formats import get_format
from jaxfp8._src.mx.formats import INT8
from jaxfp8._src.mx.formats import MXFormat
from jaxfp8._src.numerics import rounding as rounding_lib

U32, I32 = bits_lib.U32, bits_lib.I32


# -- blocks --------------------------------------------------------------------

def _padded(x, axis: int, block_size: int):
  """Moves ``axis`` last and pads it with zeros to whole blocks."""
  x = jnp.moveaxis(x, axis, -1)
  n = x.shape[-1]
  padded = -(-n // block_size) * block_size
  if padded != n:
    widths = [(0, 0)] * (x.ndim - 1) + [(0, padded - n)]
    x = jnp.pad(x, widths)
  return x


def _blocks(x, block_size: int):
  """(..., padded) -> (..., n_blocks, block_size)."""
  return x.reshape(*x.shape[:-1], x.shape[-1] // block_size, block_size)


# -- what the branches return, and the storage made of it ----------------------

def _nan_blocks(codes, bad, mx: MXFormat):
  """What a branch returns: codes, NaN blocks filled, packed in part.

  Codes (..., n_blocks, block) with the NaN fill in blocks holding NaN or
  Inf; fp8 codes bitcast to their element dtype, narrower ones through
  :func:`mx_pack.pack_groups` (6-bit codes only where
  :data:`tuning.PACK_6BIT_IN_BRANCH`: on JAX 0.11 they pack faster in one
  loop after the branch); :func:`_storage` finishes.
  """
  fill = elements_lib.nan_fill(mx) if mx.power_of_two_scales else 0
  codes = jnp.where(bad[..., None], jnp.asarray(fill, codes.dtype), codes)
  if mx.bits == 8 and mx.element is not INT8:  # in-branch; after it, a copy
    return lax.bitcast_convert_type(codes, mx.element.dtype)
  return mx_pack.pack_groups(codes, mx.bits) if _groups_in_branch(mx) else codes


def _groups_in_branch(mx: MXFormat) -> bool:
  """Whether a branch packs its codes into groups (:func:`_nan_blocks`), so
  that :func:`_storage` only turns the groups into bytes."""
  return mx.bits < 8 and (mx.bits != 6 or tuning.PACK_6BIT_IN_BRANCH)


def _storage(groups, mx: MXFormat):
  """MXArray data from :func:`_nan_blocks`' result."""
  groups = mx_pack.merge_last(groups)
  if mx.bits == 8:  # fp8 elements have their dtype already
    return groups
  if _groups_in_branch(mx):
    return mx_pack.pack_bytes(groups, mx.bits)
  return mx_pack.pack(groups, mx.bits)  # the branch left the codes unpacked


def _one_of(fast_ok, fast, exact, rounding: str, *operands):
  """``exact(*operands)``, or ``fast(*operands)`` where it is exact.

  A ``lax.cond``: one branch runs. The branches take the float32 blocks, not
  their bits, and return codes packed in part (:func:`_nan_blocks`): XLA
  then copies nothing into them, and finishes the packing in a loop of its
  own (fused into the element arithmetic, it would run element by element).
  """
  if rounding != "nearest":
    return exact(*operands)
  return lax.cond(fast_ok, fast, exact, *operands)


# -- quantize ------------------------------------------------------------------

def _quantize_mx(xp, rand, mx: MXFormat, block_size: int, mode: str,
                 rounding: str):
  amax = scales_lib.block_max(lax.bitcast_convert_type(xp, U32), block_size)
  xb = _blocks(xp, block_size)
  if rand is not None:
    rand = _blocks(rand, block_size)
  scales, k = scales_lib.e8m0_scales(amax, mx, mode)
  k_min = elements_lib.fast_min_exponent(mx)

  # The branches take the scale codes alone: a per-block array is a pass.
  def exact(xb, s, rand):
    k, bad = scales_lib.e8m0_parts(s)
    bits = lax.bitcast_convert_type(xb, U32)
    y = rounding_lib.ldexp_or_zero(bits_lib.finite_magnitude(bits),
                                   -k[..., None])
    codes = elements_lib.element_codes((bits & U32(bits_lib.SIGN)) | y, mx,
                                       rounding=rounding, rand=rand)
    return _nan_blocks(codes, bad, mx)

  def fast(xb, s, rand):
    del rand
    k, bad = scales_lib.e8m0_parts(s)
    # All-zero and NaN blocks decode the same whatever k their elements take.
    codes = elements_lib.fast_element_codes(lax.bitcast_convert_type(xb, U32),
                                            jnp.clip(k, k_min, 127), mx)
    return _nan_blocks(codes, bad, mx)

  fast_ok = jnp.all((amax >= bits_lib.INF) | (amax == 0) | (k >= k_min))
  codes = _one_of(fast_ok, fast, exact, rounding, xb, scales, rand)
  return _storage(codes, mx), scales, None


def _quantize_nv(xp, rand, mx: MXFormat, block_size: int, mode: str,
                 rounding: str):
  # NVFP4's one quantizer, in tiles of 1 x block_size over xp's rows; the
  # codes are packed in its branches, as _nan_blocks packs the MX ones.
  rows = xp.reshape(1, -1) if xp.ndim == 1 else xp
  if rand is not None:
    rand = rand.reshape(rows.shape)
  finish = ((lambda codes: mx_pack.pack_groups(codes, mx.bits))
            if _groups_in_branch(mx) else None)
  groups, sc, tensor_scale = nvfp4.quantize_tiles(
      rows, rand, (1, block_size), tensor_scale="pow2", scale_mode=mode,
      rounding=rounding, finish=finish)
  n_blocks = xp.shape[-1] // block_size
  groups = groups.reshape(*xp.shape[:-1], n_blocks, groups.shape[-1])
  return (_storage(groups, mx), sc.reshape(*xp.shape[:-1], n_blocks),
          tensor_scale)


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5, 6))
def _quantize_jit(x, rand, fmt_name: str, block_size: int, axis: int,
                  mode: str, rounding: str):
  mx = get_format(fmt_name)
  xp = _padded(x, axis, block_size)
  if rand is not None:
    rand = _padded(rand, axis, block_size)
  quantize = _quantize_mx if mx.power_of_two_scales else _quantize_nv
  data, scales, tensor_scale = quantize(xp, rand, mx, block_size, mode,
                                        rounding)
  return (jnp.moveaxis(data, -1, axis), jnp.moveaxis(scales, -1, axis),
          tensor_scale)


def quantize_blocks(x32: jax.Array, mx: MXFormat, *, block_size: int,
                    axis: int, scale_mode: str, rounding: str,
                    rand: jax.Array | None = None
                    ) -> tuple[jax.Array, jax.Array, jax.Array | None]:
  """The storage of ``x32`` in ``mx``: (data, scale codes, tensor scale).

  The arrays of an :class:`~jaxfp8._src.mx.array.MXArray`, laid out as its
  docstring describes; the arguments are checked by
  :func:`jaxfp8._src.mx.array.quantize`, which documents the scale modes.

  Args:
    x32: float32 array.
    mx: the MX format.
    block_size: elements per block (a multiple of the packing group).
    axis: the blocked axis, negative; its length is padded to whole blocks
      with zeros.
    scale_mode: one of :data:`jaxfp8._src.mx.scales.SCALE_MODES`.
    rounding: one of :data:`jaxfp8._src.mx.elements.ROUNDINGS`.
    rand: uint32 random bits of ``x32``'s shape for stochastic rounding.

  Returns:
    ``(data, scales, tensor_scale)``; ``tensor_scale`` is None for the MX
    formats (E8M0 scales) and a float32 scalar for nvfp4.
  """
  return _quantize_jit(x32, rand, mx.name, block_size, axis, scale_mode,
                       rounding)


# -- quantize and decode in one pass -------------------------------------------

def _fast_values(xb, k, mx: MXFormat):
  """float32 values of the fast path's codes times 2^k, from x itself: x
  rounded to the element grid scaled by 2^k (the same rounding, since the
  scale is a power of two), saturated at max * 2^k. Valid where the fast
  path is (``k``, broadcastable against ``xb``, clipped at
  :func:`elements_lib.fast_min_exponent`, so every quantity below is a
  normal float32)."""
  elem = mx.element
  m, emin = elem.mantissa_bits, elem.min_exponent
  bits = lax.bitcast_convert_type(xb, U32)
  mag = bits & 0x7FFFFFFF
  sh = 23 - m
  hi = (mag + U32((1 << (sh - 1)) - 1) + ((mag >> sh) & 1)) & U32(
      (0xFFFFFFFF >> sh) << sh)
  z = lax.bitcast_convert_type(mag, jnp.float32) * bits_lib.pow2_float(
      m - emin - k)
  lo = bits_lib.nearest_integer(z).astype(I32).astype(
      jnp.float32) * bits_lib.pow2_float(emin - m + k)
  normal = mag >= ((emin + 127 + k) << 23).astype(U32)
  r = jnp.where(normal, hi, lax.bitcast_convert_type(lo, U32))
  top = (U32(rounding_lib.f32_bits(elem.max)) + (k << 23).astype(U32))
  r = jnp.minimum(r, top)
  return lax.bitcast_convert_type(r | (bits & U32(bits_lib.SIGN)),
                                  jnp.float32)


def _exact_values(xb, k, mx: MXFormat):
  """:func:`_fast_values` for every block exponent ``k`` (E8M0's, -127 to
  127, broadcastable against ``xb``), in three exact steps on the bits:
  ``x / 2^k`` (a quotient below float32's normal range rounds to zero in
  every element format either way), rounded to nearest even and saturated
  in the element format, times ``2^k`` (nearest even among float32's
  subnormals)."""
  bits = lax.bitcast_convert_type(xb, U32)
  xs = rounding_lib.ldexp_or_zero(bits_lib.finite_magnitude(bits), -k)
  mag = rounding_lib.saturated_bits(xs, mx.element, rounding="nearest")
  v = bits_lib.mul_pow2(lax.bitcast_convert_type(mag, jnp.float32), k)
  return lax.bitcast_convert_type(
      lax.bitcast_convert_type(v, U32) | (bits & U32(bits_lib.SIGN)),
      jnp.float32)


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _values_jit(x, fmt_name: str, block_size: int, axis: int, mode: str):
  # Blocks are cut along `axis` where it lies (no transposes: a GEMM's
  # operand is quantized along its contracting axis in its own layout).
  mx = get_format(fmt_name)
  axis %= x.ndim
  n = x.shape[axis]
  n_pad = -(-n // block_size) * block_size
  xp = x
  if n_pad != n:
    xp = jnp.pad(x, [(0, 0)] * axis + [(0, n_pad - n)]
                 + [(0, 0)] * (x.ndim - axis - 1))
  blocked = x.shape[:axis] + (n_pad // block_size, block_size) + x.shape[
      axis + 1:]
  xb = xp.reshape(blocked)
  if axis == x.ndim - 1:
    amax = scales_lib.block_max(lax.bitcast_convert_type(xp, U32),
                                block_size)
  else:  # a reduce over a major axis: XLA vectorizes it along the minor one
    amax = jnp.max(lax.bitcast_convert_type(xb, U32) & 0x7FFFFFFF,
                   axis=axis + 1)
  _, k = scales_lib.e8m0_scales(amax, mx, mode)
  k_min = elements_lib.fast_min_exponent(mx)
  bad = amax >= bits_lib.INF
  fast_ok = jnp.all(bad | (amax == 0) | (k >= k_min))

  def fast(xb, k):
    v = _fast_values(xb, jnp.expand_dims(jnp.clip(k, k_min, 127), axis + 1),
                     mx)
    return jnp.where(jnp.expand_dims(bad, axis + 1), np.float32(np.nan), v)

  def exact(xb, k):
    # Blocks along the last axis, as the quantizer cuts them: computed in
    # `xb`'s own layout, this branch led XLA to fuse the plain branch's
    # block maxima worse, and MXFP8 training steps ran slower on CPU (the
    # benchmark log has the figures).
    xl = _blocks(jnp.moveaxis(xb.reshape(xp.shape), axis, -1), block_size)
    kl = jnp.moveaxis(k, axis, -1)[..., None]
    bl = jnp.moveaxis(bad, axis, -1)[..., None]
    v = jnp.where(bl, np.float32(np.nan), _exact_values(xl, kl, mx))
    v = jnp.moveaxis(v.reshape(*v.shape[:-2], v.shape[-2] * v.shape[-1]),
                     -1, axis)
    return v.reshape(blocked)

  out = lax.cond(fast_ok, fast, exact, xb, k).reshape(xp.shape)
  return lax.slice_in_dim(out, 0, n, axis=axis)


def values(x32: jax.Array, mx: MXFormat, *, block_size: int, axis: int,
           scale_mode: str) -> jax.Array:
  """float32 values of ``x32`` quantized into ``mx`` (nearest even) and
  decoded: :func:`dequantize_blocks` of :func:`quantize_blocks` bit for bit,
  without packing or storing codes. What the recipes' emulated MX GEMMs
  multiply; nvfp4 and MXINT8 take the two steps.

  Arguments as :func:`quantize_blocks` takes them (checked by the caller;
  ``axis`` padded to whole blocks and cut back). The blocks are cut along
  ``axis`` in ``x32``'s own layout, any axis, without moving it.
  """
  if not mx.power_of_two_scales or mx.element is INT8:
    data, sc, ts = quantize_blocks(x32, mx, block_size=block_size, axis=axis,
                                   scale_mode=scale_mode, rounding="nearest")
    return dequantize_blocks(data, sc, ts, mx, axis=axis,
                             length=x32.shape[axis], block_size=block_size)
  return _values_jit(x32, mx.name, block_size, axis, scale_mode)


# -- dequantize ----------------------------------------------------------------

def _unpacked_codes(data, mx: MXFormat, axis: int):
  """Element codes, one per element, blocked axis last: (..., padded)."""
  data = jnp.moveaxis(data, axis, -1)
  if mx.bits == 8 and mx.element is not INT8:
    return lax.bitcast_convert_type(data, jnp.uint8)
  return mx_pack.unpack(data, mx.bits) if mx.bits < 8 else data


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6))
def _dequantize_jit(data, scales, tensor_scale, fmt_name: str, axis: int,
                    length: int, block_size: int):
  mx = get_format(fmt_name)
  codes = _unpacked_codes(data, mx, axis)
  codes = codes.reshape(*codes.shape[:-1], codes.shape[-1] // block_size,
                        block_size)
  vals = elements_lib.element_values(codes, mx)
  sc = jnp.moveaxis(scales, axis, -1)
  if mx.power_of_two_scales:
    k, nan_block = scales_lib.e8m0_parts(sc)
  else:
    sv = scales_lib.scale_values(sc, mx)
    vals = vals * sv[..., None]  # exact: <= 6 significant bits, >= 2^-10
    ts = lax.bitcast_convert_type(tensor_scale, U32)
    ts = ts.reshape(ts.shape + (1,) * (sc.ndim - ts.ndim))
    k = (ts >> 23).astype(I32) - 127
    nan_block = (sc & 0x7F) == 0x7F
  out = bits_lib.mul_pow2(vals, k[..., None])
  out = jnp.where(nan_block[..., None], np.float32(np.nan), out)
  out = mx_pack.merge_last(out)[..., :length]
  return jnp.moveaxis(out, -1, axis)


def dequantize_blocks(data: jax.Array, scales: jax.Array,
                      tensor_scale: jax.Array | None, mx: MXFormat, *,
                      axis: int, length: int, block_size: int) -> jax.Array:
  """float32 values ``element * scale`` of an MX storage, exactly rounded.

  The inverse of :func:`quantize_blocks`: ``data``, ``scales`` and
  ``tensor_scale`` as an :class:`~jaxfp8._src.mx.array.MXArray` holds them,
  cut to ``length`` along ``axis`` (negative). Blocks with a NaN scale give
  NaN.
  """
  return _dequantize_jit(data, scales, tensor_scale, mx.name, axis, length,
                         block_size)
