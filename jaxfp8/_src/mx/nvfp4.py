"""NVFP4 with Transformer Engine's two-level scales (``NVFP4BlockScaling``).

NVFP4 (arXiv 2509.25149, "Pretraining Large Language Models with NVFP4")
stores e2m1 elements with one e4m3 scale per block of 16 (``(1, 16)`` along
K for activations and gradients, ``(16, 16)`` 2-D blocks for weights) and
one float32 scale for the whole tensor. :func:`quantize` follows
Transformer Engine (TE) operation by operation, in IEEE float32; the files
followed (NVIDIA/TransformerEngine) are the CUDA kernels
``common/cast/nvfp4/core_nvfp4.cuh``
(``compute_global_encode_scaling_factor_FP4``,
``compute_decoding_scaling_factor``) and
``common/cast/nvfp4/quantize_transpose_nvfp4.cuh`` (the float32
``block_scale_inverse`` and ``mul_cvt_fp32_to_fp4``), which TE's tests
match bit for bit against the PyTorch reference
``pytorch/custom_recipes/reference_nvfp4.py``
(``NVFP4QuantizerRef._quantize_blockwise_reference``):

1. ``amax`` = the largest ``|x|`` of the whole array; ``S_enc = (448 * 6) /
   amax``, correctly rounded; ``S_enc = min(S_enc, FLT_MAX)`` (an amax below
   about 7.9e-36 overflows it); ``S_enc = 1`` where amax is 0.
2. ``S_dec = 1 / S_enc`` (correctly rounded; a float32 subnormal where
   ``S_enc > 2^126``). This is the returned ``tensor_scale``.
3. Per block: ``block_scale = e4m3(block_amax * (S_enc * (1/6)))``, where
   ``1/6`` is the float32 constant 0.16666667 and each product is rounded
   to float32; the e4m3 cast rounds to nearest even and saturates at 448.
4. Per block: ``encode = min(1 / (float(block_scale) * S_dec), FLT_MAX)``
   (a block scale of 0 gives ``FLT_MAX``: that block's nonzero elements
   saturate to +-6 and dequantize to 0). TE's tuned 1-D kernel for
   bfloat16 inputs computes ``S_enc / block_scale`` in bfloat16 instead;
   its float32 path, followed here, is the one above.
5. Each element: ``e2m1(x * encode)``, the float32 product rounded to
   nearest even (or stochastically, with ``rounding="stochastic"``) and
   saturated to +-6.

:func:`dequantize` gives ``code * block_scale * tensor_scale``: ``code *
block_scale`` is exact (at most 6 significant bits), and the product with
the tensor scale is rounded once. TE's own dequantize kernel and its GEMM
``alpha`` use ``amax / 2688`` (``amax * (1 / 2688)``) for the tensor scale,
which can differ from ``1 / S_enc`` in the last bit; this module keeps one
definition of the quantized value, the ``S_dec`` the quantizer used.

``tensor_scale="pow2"`` is jaxfp8's own ``nvfp4`` MX format instead: the
tensor scale is the power of two ``2^j``, the smallest with ``amax <= 2688 *
2^j``, block scales are ``amax_block / (6 * 2^j)`` rounded into e4m3 (down
by default; the MX scale modes of :mod:`jaxfp8._src.mx.scales`, whose
``nv_scales`` computes them), and elements are ``(x / 2^j) / block_scale``
rounded, which makes every step exact.

This module is jaxfp8's one NVFP4 quantizer: :func:`quantize_tiles` serves
:func:`quantize` and ``jaxfp8.mx.quantize(x, "nvfp4")`` (tiles of 1 x
block_size, ``"pow2"``), so for block (1, 16) the two give the same codes,
scales and tensor scale, also with stochastic rounding and the same key.

Both rules are exact on every backend, also for subnormal float32 inputs
and scales (:mod:`jaxfp8._src.mx.f32`; XLA on CPU would flush them).

Ragged edges: partial blocks take the amax of the elements they hold (TE
pads with zeros). NaN and Inf, where this module differs from TE (whose
amax reductions drop NaN and whose ``S_enc`` becomes 1 for an infinite
amax, re-scaling the whole tensor): the tensor amax is taken over the blocks
without NaN or Inf, and a block holding either gets the e4m3 NaN scale and
element codes 0, so it dequantizes to NaN (as jaxfp8's ``nvfp4`` does).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Literal

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.mx import bits as bits_lib
from jaxfp8._src.mx import blockwise
from jaxfp8._src.mx import elements as elements_lib
from jaxfp8._src.mx import f32
from jaxfp8._src.mx import scales as mx_scales
from jaxfp8._src.mx.formats import get_format
from jaxfp8._src.numerics import rounding as rounding_lib
from jaxfp8._src.numerics import validate

TensorScale = Literal["te", "pow2"]
TENSOR_SCALES: tuple[str, ...] = ("te", "pow2")
BLOCKS: tuple[tuple[int, int], ...] = ((1, 16), (16, 16))
ELEMENT = "float4_e2m1fn"
SCALE = "float8_e4m3fn"
U32, I32 = bits_lib.U32, bits_lib.I32
_FORMAT = get_format("nvfp4")
_ELEMENT_FORMAT = _FORMAT.element
_RANGE = _FORMAT.max * _FORMAT.scale.max   # e2m1 max * e4m3 max: 2688
_SIXTH = np.float32(1.0) / np.float32(6.0)  # TE's constexpr 1.0f / 6.0f
# Tensor scales at least this large make every code * block_scale *
# tensor_scale a normal float32 (code * block_scale >= 2^-10).
_FAST_TENSOR_MIN = np.float32(2.0**-100)


def _tensor_scales(amax):
  """Steps 1-2 from the tensor amax (bits; per tile where tensors are groups
  of tiles): (S_enc, S_dec), the IEEE results for every amax. Computed once
  for both branches of :func:`_te_values` (where its plain branch runs, a
  plain division gives the same bits): scalar kernels in neither."""
  # Step 1 is blockwise's encode rule with the range 448 * 6 for fmt_max.
  s_enc = blockwise.encode_scales(amax, _RANGE, "float32")
  return s_enc, f32.reciprocal(s_enc)


def _te_scales(good_max, s_enc, s_dec, *, exact: bool = True):
  """Steps 3-4 from finite block maxima (bits) and :func:`_tensor_scales`:
  (block scales, float32 values of e4m3; element encode scales).

  ``exact``: every step the IEEE one for every amax (:mod:`.f32`'s forms).
  Otherwise plain float32 operations, the same wherever the amax is 0 or
  at least :data:`_PLAIN_TE_AMAX` (XLA on CPU would flush a step below)."""
  bmax_f = lax.bitcast_convert_type(good_max, jnp.float32)
  if exact:
    bs = f32.mul_into_narrow(bmax_f, s_enc * _SIXTH)
  else:
    bs = bmax_f * (s_enc * _SIXTH)
  # Into e4m3 to nearest, saturating: round_to's values, no codes.
  bs = lax.bitcast_convert_type(rounding_lib.saturated_bits(
      lax.bitcast_convert_type(jnp.minimum(bs, f32.F32_MAX), U32),
      _FORMAT.scale, rounding="nearest"), jnp.float32)
  if exact:
    # bs: e4m3's 4 bits. bs * S_dec <= 448 * FLT_MAX / 2688 < 2^126, so
    # the reciprocal is normal (or, for bs 0, Inf).
    enc = f32.reciprocal_to_normal(f32.mul_narrow(bs, s_dec))
  else:
    enc = np.float32(1) / (bs * s_dec)
  return bs, jnp.minimum(enc, f32.F32_MAX)


def quantize_tiles(x: jax.Array, rand: jax.Array | None,
                   block: tuple[int, int], *, tensor_scale: str,
                   scale_mode: str, rounding: str,
                   finish: Callable[[jax.Array], Any] | None = None
                   ) -> tuple[Any, jax.Array, jax.Array]:
  """NVFP4 quantization of float32 ``x`` (..., M, K), in tiles: every NVFP4
  quantizer of jaxfp8 (:func:`quantize`, ``jaxfp8.mx.quantize(x, "nvfp4")``)
  is this function. Runs inside its callers' jit; arguments are checked.

  Args:
    x: float32 (..., M, K), zero-padded here to whole tiles.
    rand: uint32 random bits of ``x``'s shape for stochastic rounding.
    block: ``(bm, bk)``; ``(1, n)`` for any even n, or ``(16, 16)``.
    tensor_scale: ``"te"`` or ``"pow2"``.
    scale_mode: the block scales' rounding into e4m3 for ``"pow2"``, one of
      :data:`jaxfp8._src.mx.scales.SCALE_MODES` (``"te"`` has its own).
    rounding: ``"nearest"`` or ``"stochastic"``.
    finish: applied to the codes inside the branch that makes them (the MX
      storage packs them there: XLA then copies nothing); default none.

  Returns:
    ``(finish(codes), scale_codes, tensor_scale)``: uint8 e2m1 codes in tiles
    (..., Mb, bm, Kb, bk), 0 in blocks holding NaN or Inf; uint8 e4m3 block
    scale codes (..., Mb, Kb), the NaN code for those blocks; the float32
    decode tensor scale.

  >>> import jax.numpy as jnp
  >>> codes, sc, ts = quantize_tiles(jnp.full((1, 16), 3.0), None, (1, 16),
  ...     tensor_scale="pow2", scale_mode="floor", rounding="nearest")
  >>> codes[0, 0, 0, :2], sc  # 3 = e2m1 6 (code 7) * e4m3 256 (120) * 2^-9
  (Array([7, 7], dtype=uint8), Array([[120]], dtype=uint8))
  >>> ts
  Array(0.00195312, dtype=float32)
  """
  finish = finish or (lambda codes: codes)
  t = blockwise.tiles(x, block)
  if rand is not None:
    rand = blockwise.tiles(rand, block)
  bmax = blockwise.tile_amax(t)
  bad = bmax >= bits_lib.INF

  def done(codes, bad):
    # A block with NaN or Inf: codes +0 under the NaN scale.
    return finish(jnp.where(blockwise.per_element(bad), jnp.uint8(0), codes))

  if tensor_scale == "te":
    good = jnp.where(bad, U32(0), bmax)
    s_enc, ts = _tensor_scales(jnp.max(good, initial=U32(0)))
    sc, enc = _te_scales(good, s_enc, ts)
    # The values are e4m3's: the conversion is exact.
    sc = lax.bitcast_convert_type(sc.astype(_FORMAT.scale.dtype), jnp.uint8)
    y = f32.mul_into_narrow(t, blockwise.per_element(enc))
    codes = rounding_lib.round_to_codes(
        jnp.where(blockwise.per_element(bad), np.float32(0), y), ELEMENT,
        rounding=rounding, rand=rand)
    sc = jnp.where(bad, jnp.uint8(_FORMAT.scale.nan_code), sc)
    return done(codes, bad), sc, ts

  sc, j = mx_scales.nv_scales(bmax, _FORMAT, scale_mode)
  # Broadcast in the branches: XLA copies a per-element operand of a cond.
  s_blk = mx_scales.scale_values(sc, _FORMAT)

  # x / 2^j exactly (|x| / 2^j <= 2688), then one division by the block
  # scale; quotients below float32's normal range round to (signed) zero
  # in e2m1 either way.
  def exact(t, j, s_blk, rand):
    sv = blockwise.per_element(s_blk)
    bits = lax.bitcast_convert_type(t, U32)
    xs = rounding_lib.ldexp_or_zero(bits_lib.finite_magnitude(bits), -j)
    ym = lax.bitcast_convert_type(
        f32.divide(lax.bitcast_convert_type(xs, jnp.float32), sv), U32)
    ym = jnp.where((xs < 0x800000) | (sv == 0), U32(0), ym)
    codes = elements_lib.element_codes((bits & U32(bits_lib.SIGN)) | ym,
                                       _FORMAT, rounding=rounding, rand=rand)
    return done(codes, jnp.isnan(s_blk))

  # Nearest even from j = nv_fast_min_exponent on: x / 2^j on the bits is
  # exact where x and the quotient are normal, and where either is not the
  # element rounds to zero anyway.
  def fast(t, j, s_blk, rand):
    del rand
    sv = blockwise.per_element(s_blk)
    bits = lax.bitcast_convert_type(t, U32)
    mag = (bits & 0x7FFFFFFF).astype(I32)
    xs = mag - (j << 23)
    xs = jnp.where((mag >= 0x800000) & (xs >= 0x800000), xs, 0)
    ym = lax.bitcast_convert_type(
        f32.divide(lax.bitcast_convert_type(xs, jnp.float32), sv), U32)
    ym = jnp.where(sv == 0, U32(0), ym)
    codes = elements_lib.fast_element_codes(
        (bits & U32(bits_lib.SIGN)) | ym, jnp.zeros(sv.shape[:-1], I32),
        _FORMAT)
    return done(codes, jnp.isnan(s_blk))

  if rounding != "nearest":
    codes = exact(t, j, s_blk, rand)
  else:
    codes = lax.cond(j >= mx_scales.nv_fast_min_exponent(_FORMAT), fast,
                     exact, t, j, s_blk, rand)
  return codes, sc, bits_lib.pow2_float(j)


# A tensor amax at least this large (or 0) keeps every step of the "te"
# rule in float32's normal range: S_dec >= 2^-100 / 2688, block scales times
# S_dec >= 2^-9 * S_dec, encode scales <= 2^122, dequantized values >=
# 2^-10 * S_dec. There plain float32 arithmetic is the IEEE one.
_PLAIN_TE_AMAX = np.float32(2.0**-100)


def _te_values(t, good, bad, amax, rand, rounding: str):
  """:func:`values`' ``"te"`` rule on tiles ``t`` (``good``, ``bad``: their
  finite block maxima, their blocks with NaN or Inf; ``amax`` per tensor or
  tile): :func:`_tensor_scales`, then :func:`_te_scales` and the last
  product plain where the amax is 0 or at least :data:`_PLAIN_TE_AMAX`,
  exact elsewhere (two conds), around one element stage, exact for every
  amax (no codes)."""
  plain = jnp.all((amax == 0)
                  | (amax >= rounding_lib.f32_bits(_PLAIN_TE_AMAX)))
  s_enc, s_dec = _tensor_scales(amax)
  bs, enc = lax.cond(
      plain, functools.partial(_te_scales, exact=False), _te_scales, good,
      s_enc, s_dec)
  # A subnormal element times a large encode scale (up to float32's max for
  # the smallest amaxes) is exact here; XLA would flush the element.
  y = lax.bitcast_convert_type(
      f32.mul_into_narrow(t, blockwise.per_element(enc)), U32)
  v = lax.bitcast_convert_type(rounding_lib.saturated_bits(
      y, _ELEMENT_FORMAT, rounding=rounding, rand=rand), jnp.float32)
  v = v * blockwise.per_element(bs)  # exact: at most 6 significant bits
  if s_dec.ndim:
    s_dec = blockwise.per_element(s_dec)
  out = lax.cond(plain, lambda v, s: v * s, f32.mul_narrow, v, s_dec)
  return jnp.where(blockwise.per_element(bad), np.float32(np.nan), out)


def group_amax(good: jax.Array, tile_group: jax.Array,
               n_groups: int) -> jax.Array:
  """Each tile's tensor amax (bits) where rows of tiles form groups:
  ``good`` (Mb, Kb) finite tile maxima, ``tile_group`` (Mb,) each tile
  row's group; tiles of group ``n_groups`` (no group) get 0."""
  top = jax.ops.segment_max(jnp.max(good, axis=-1), tile_group,
                            num_segments=n_groups + 1)
  return jnp.where(tile_group < n_groups, top[tile_group], U32(0))[:, None]


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5, 7))
def _values_jit(x, rand, block, tensor_scale: str, scale_mode: str,
                rounding: str, row_group=None, n_groups: int = 0):
  if tensor_scale != "te":
    codes, sc, ts = quantize_tiles(
        x, rand, block, tensor_scale=tensor_scale, scale_mode=scale_mode,
        rounding=rounding,
        finish=lambda c: elements_lib.element_values(c, _FORMAT))
    return _dequantize_tiles(codes, scale_values(sc), ts, x.shape)
  t = blockwise.tiles(x, block)
  bmax = blockwise.tile_amax(t)
  bad = bmax >= bits_lib.INF
  good = jnp.where(bad, U32(0), bmax)
  if row_group is None:
    amax = jnp.max(good, initial=U32(0))
  else:  # a tile row's group is its first row's
    rows = t.shape[-4] * block[0]
    first = jnp.pad(row_group, (0, rows - x.shape[-2]),
                    constant_values=n_groups)[::block[0]]
    amax = group_amax(good, first, n_groups)
  r = None if rand is None else blockwise.tiles(rand, block)
  return blockwise.untiles(_te_values(t, good, bad, amax, r, rounding),
                           x.shape)


def values(x: jax.Array, rand: jax.Array | None, block: tuple[int, int], *,
           tensor_scale: str, scale_mode: str, rounding: str,
           row_groups: tuple[jax.Array, int] | None = None) -> jax.Array:
  r"""float32 values of ``x`` (..., M, K) quantized into NVFP4 and decoded:
  ``dequantize(*quantize(x, ...))`` bit for bit, in fewer passes (no codes
  or scale arrays are stored). What the recipes' emulated GEMMs multiply.

  Runs inside its callers' jit; arguments are checked (as
  :func:`quantize_tiles` takes them). With ``tensor_scale="te"``, a tensor
  whose amax keeps every step in float32's normal range (all but amaxes
  below 2^-100) takes plain float32 arithmetic for its per-block steps and
  last product, the others their exact forms (``lax.cond``\ s: one branch
  of each runs); the element rounding between them is one, exact for both.

  ``row_groups=(group, G)`` (``"te"``, 2-D ``x``): rows of ``x`` form
  tensors of their own, ``group`` (M,) int32 each row's (``G``: none, any
  values), each with its own amax and tensor scale; no tile may hold rows
  of two groups.

  >>> import jax.numpy as jnp
  >>> values(jnp.array([[6.0, 1.0, -0.3] + [0.0] * 13]), None, (1, 16),
  ...        tensor_scale="te", scale_mode="floor", rounding="nearest")[0, :3]
  Array([ 6.0000005,  1.       , -0.5      ], dtype=float32)
  """
  if row_groups is None:
    return _values_jit(x, rand, block, tensor_scale, scale_mode, rounding)
  if tensor_scale != "te" or x.ndim != 2:
    raise ValueError(f"`row_groups` argument to `values` needs "
                     f"tensor_scale='te' and a matrix, got "
                     f"{tensor_scale!r} and shape {x.shape}")
  return _values_jit(x, rand, block, tensor_scale, scale_mode, rounding,
                     row_groups[0], int(row_groups[1]))


def scale_values(sc: jax.Array) -> jax.Array:
  """float32 values of uint8 e4m3 block-scale codes (NaN code: NaN)."""
  return mx_scales.scale_values(sc, _FORMAT)


def _dequantize_tiles(values_t, block_scales, tensor_scale, shape):
  """``values * block_scale * tensor_scale`` of tiles, rounded once, back in
  ``shape``: :func:`dequantize`'s arithmetic."""
  t = values_t * blockwise.per_element(block_scales)
  fast = jnp.all(tensor_scale >= _FAST_TENSOR_MIN)
  if tensor_scale.ndim:  # per tile
    tensor_scale = blockwise.per_element(tensor_scale)
  out = lax.cond(fast, lambda t, s: t * s, f32.mul, t, tensor_scale)
  return blockwise.untiles(out, shape)


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5))
def _quantize_jit(x, rand, block, tensor_scale: str, scale_mode: str,
                  rounding: str):
  as_elements = lambda codes: elements_lib.element_values(
      codes, _FORMAT).astype(_FORMAT.element.dtype)
  codes, sc, ts = quantize_tiles(x, rand, block, tensor_scale=tensor_scale,
                                 scale_mode=scale_mode, rounding=rounding,
                                 finish=as_elements)
  return (blockwise.untiles(codes, x.shape),
          lax.bitcast_convert_type(sc, _FORMAT.scale.dtype), ts)


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4, 5))
def _quantize(x, rand, block, tensor_scale: str, scale_mode: str,
              rounding: str):
  return _quantize_jit(x, rand, block, tensor_scale, scale_mode, rounding)


@_quantize.defjvp
def _quantize_jvp(block, tensor_scale, scale_mode, rounding, primals,
                  tangents):
  del block, tensor_scale, scale_mode, rounding, primals, tangents
  raise TypeError(blockwise.NO_GRADIENT.format(fn="quantize"))


def check_block(block: Any, fn: str) -> tuple[int, int]:
  """``block`` as (1, 16) or (16, 16), or TypeError/ValueError."""
  block = blockwise.check_block(block, fn)
  if block not in BLOCKS:
    raise ValueError(f"`block` argument to `{fn}` must be (1, 16) or "
                     f"(16, 16) for NVFP4, got {block}")
  return block


def quantize(x: Any, *, block: tuple[int, int] = (1, 16),
             tensor_scale: TensorScale = "te", rounding: str = "nearest",
             key: jax.Array | None = None,
             scale_mode: mx_scales.ScaleMode | None = None
             ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Quantizes ``x`` (..., M, K) into NVFP4 with TE's two-level scales.

  The rule is Transformer Engine's, step by step (module docstring): a
  float32 tensor scale from the amax of the whole array, e4m3 block scales,
  e2m1 elements rounded to nearest even or stochastically, saturating.

  Args:
    x: real array with at least two axes (..., M, K); K is the blocked
      (contracting) axis. The tensor scale is over the whole array, block
      scales per matrix.
    block: ``(1, 16)`` (16 consecutive elements along K) or ``(16, 16)``.
    tensor_scale: ``"te"`` (TE's ``448 * 6 / amax`` rule) or ``"pow2"``
      (jaxfp8's ``nvfp4`` format: a power-of-two tensor scale).
    rounding: ``"nearest"`` (ties to even) or ``"stochastic"`` (needs
      ``key``; up with probability equal to the fraction of the gap).
    key: PRNG key for stochastic rounding (32 random bits per element,
      ``jax.random.bits(key, x.shape)``: the bits ``jaxfp8.mx.quantize``
      draws); ignored for nearest rounding.
    scale_mode: how block scales round into e4m3 under ``tensor_scale=
      "pow2"``: ``"floor"`` (the default), ``"ceil"``, ``"rceil"`` or
      ``"even"``, as in ``jaxfp8.mx.quantize``. ``"te"`` has its own rule
      (nearest even) and takes None only.

  Returns:
    ``(codes, block_scales, tensor_scale)``: float4_e2m1fn codes of ``x``'s
    shape; float8_e4m3fn block scales ``(..., ceil(M / bm), ceil(K / bk))``
    (NaN for blocks holding NaN or Inf); the float32 scalar decode tensor
    scale. value = code * block_scale * tensor_scale.

  Raises:
    TypeError: non-numeric ``x``, a bad ``block`` or ``key``; differentiating
      it (no gradient: the recipe core's custom VJP defines them).
    ValueError: fewer than two axes, another block shape, tensor scale,
      scale mode or rounding; a scale mode with ``"te"``; stochastic
      rounding without a key.

  >>> import jax.numpy as jnp
  >>> x = jnp.array([[6.0, 1.0, -0.3] + [0.0] * 13])
  >>> codes, block_scales, tensor_scale = quantize(x)
  >>> codes[0, :3]
  Array([6, 1, -0.5], dtype=float4_e2m1fn)
  >>> block_scales, tensor_scale  # S_enc = 2688 / 6 = 448
  (Array([[448]], dtype=float8_e4m3fn), Array(0.00223214, dtype=float32))
  >>> dequantize(codes, block_scales, tensor_scale)[0, :3]  # S_dec = fl(1/448)
  Array([ 6.0000005,  1.       , -0.5      ], dtype=float32)
  """
  fn = "quantize"
  block = check_block(block, fn)
  validate.check_choice(tensor_scale, TENSOR_SCALES, "tensor_scale", fn)
  validate.check_choice(rounding, rounding_lib.NEAREST_OR_STOCHASTIC,
                        "rounding", fn)
  if tensor_scale == "te" and scale_mode is not None:
    raise ValueError(f"`scale_mode` argument to `{fn}` is for "
                     f"tensor_scale='pow2'; 'te' rounds its block scales by "
                     f"its own rule, got scale_mode={scale_mode!r}")
  scale_mode = "floor" if scale_mode is None else scale_mode
  validate.check_choice(scale_mode, mx_scales.SCALE_MODES, "scale_mode", fn)
  x = blockwise.check_matrix(x, fn)
  rand = rounding_lib.stochastic_bits(rounding, key, x.shape, fn=fn)
  return _quantize(x, rand, block, tensor_scale, scale_mode, rounding)


@functools.partial(jax.jit, static_argnums=(3,))
def _dequantize_jit(values, block_scales, tensor_scale, block):
  return _dequantize_tiles(blockwise.tiles(values, block), block_scales,
                           tensor_scale, values.shape)


def dequantize(codes: Any, block_scales: Any, tensor_scale: Any, *,
               block: tuple[int, int] = (1, 16)) -> jax.Array:
  """float32 values ``code * block_scale * tensor_scale`` of :func:`quantize`.

  ``code * block_scale`` is exact; the product with the tensor scale is
  rounded once, to nearest even (also where it is a float32 subnormal).
  Blocks with a NaN scale give NaN.

  Args:
    codes: e2m1 codes (..., M, K) (any real array is taken as its values).
    block_scales: e4m3 block scales (..., ceil(M / bm), ceil(K / bk)).
    tensor_scale: the float32 scalar decode tensor scale.
    block: the block shape they were quantized with.

  Returns:
    float32 array of ``codes``' shape.

  Raises:
    TypeError, ValueError: as :func:`quantize`; scales of the wrong shape, a
      tensor scale that is not a scalar.

  >>> import jax.numpy as jnp
  >>> codes, bs, ts = quantize(jnp.full((16, 16), 0.1), block=(16, 16))
  >>> dequantize(codes, bs, ts, block=(16, 16))[0, 0]
  Array(0.1, dtype=float32)
  """
  fn = "dequantize"
  block = check_block(block, fn)
  values = blockwise.check_matrix(codes, fn, "codes")
  scales = blockwise.check_scales(block_scales, values.shape, block, fn,
                                  "block_scales")
  ts = rounding_lib.to_float32(tensor_scale, fn=fn, arg="tensor_scale")
  if ts.shape != ():
    raise ValueError(f"`tensor_scale` argument to `{fn}` must be a scalar, "
                     f"got shape {ts.shape}")
  return _dequantize_jit(values, scales, ts, block)


__all__ = ["BLOCKS", "ELEMENT", "SCALE", "TENSOR_SCALES", "check_block",
           "dequantize", "quantize", "quantize_tiles", "values"]
