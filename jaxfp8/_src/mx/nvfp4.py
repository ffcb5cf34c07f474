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

``tensor_scale="pow2"`` is jaxfp8's own ``nvfp4`` MX format instead
(:mod:`jaxfp8._src.mx.scales`, ``nv_scales`` with scale mode ``"floor"``,
reused here): the tensor scale is the power of two ``2^j``, the smallest
with ``amax <= 2688 * 2^j``, block scales are ``amax_block / (6 * 2^j)``
rounded down into e4m3, and elements are ``(x / 2^j) / block_scale``
rounded, which makes every step exact. With ``block=(1, 16)`` and nearest
rounding it gives the codes and scales of ``jaxfp8.mx.quantize(x, "nvfp4")``.

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
from typing import Any, Literal

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.mx import bits as bits_lib
from jaxfp8._src.mx import scales as mx_scales
from jaxfp8._src.mx.formats import get_format
from jaxfp8._src.numerics import rounding as rounding_lib
from jaxfp8._src.numerics import validate
from jaxfp8._src.mx import blockwise
from jaxfp8._src.mx import f32

TensorScale = Literal["te", "pow2"]
TENSOR_SCALES: tuple[str, ...] = ("te", "pow2")
BLOCKS: tuple[tuple[int, int], ...] = ((1, 16), (16, 16))
ELEMENT = "float4_e2m1fn"
SCALE = "float8_e4m3fn"
U32 = bits_lib.U32
_RANGE = np.float32(448.0 * 6.0)   # e4m3 max * e2m1 max
_SIXTH = np.float32(1.0) / np.float32(6.0)  # TE's constexpr 1.0f / 6.0f
_NVFP4 = "nvfp4"
# Tensor scales at least this large make every code * block_scale *
# tensor_scale a normal float32 (code * block_scale >= 2^-10).
_FAST_TENSOR_MIN = np.float32(2.0**-100)


def _te_scales(bmax, tamax):
  """Steps 1-4: (e4m3 block scales, element encode scales, S_dec)."""
  tamax_f = lax.bitcast_convert_type(tamax, jnp.float32)
  s_enc = _RANGE / jnp.where(tamax == 0, np.float32(1), tamax_f)
  s_enc = jnp.where(tamax < 0x800000, np.float32(np.inf), s_enc)
  s_enc = jnp.minimum(s_enc, f32.F32_MAX)
  s_enc = jnp.where(tamax == 0, np.float32(1), s_enc)
  s_dec = f32.reciprocal(s_enc)
  bmax_f = lax.bitcast_convert_type(bmax, jnp.float32)
  bs = f32.mul_into_narrow(bmax_f, s_enc * _SIXTH)
  bs = rounding_lib.round_to(jnp.minimum(bs, f32.F32_MAX), SCALE)
  d = f32.mul(bs.astype(jnp.float32), s_dec)
  enc = jnp.minimum(f32.reciprocal(d), f32.F32_MAX)
  return bs, enc, s_dec


def _pow2_scales(bmax):
  """jaxfp8's nvfp4 (mode "floor"): (e4m3 block scales, tensor exponent j)."""
  codes, j = mx_scales.nv_scales(bmax, get_format(_NVFP4), "floor")
  return lax.bitcast_convert_type(codes, jnp.float8_e4m3fn), j


@functools.partial(jax.jit, static_argnums=(2, 3, 4))
def _quantize_jit(x, rand, block, tensor_scale: str, rounding: str):
  t = blockwise.tiles(x, block)
  bmax = blockwise.tile_amax(t)
  bad = bmax >= bits_lib.INF
  good_max = jnp.where(bad, U32(0), bmax)
  bits = lax.bitcast_convert_type(t, U32)
  sign = bits & U32(bits_lib.SIGN)
  if tensor_scale == "te":
    bs, enc, ts = _te_scales(good_max, jnp.max(good_max, initial=U32(0)))
    y = f32.mul_into_narrow(t, blockwise.per_element(enc))
  else:
    bs, j = _pow2_scales(bmax)
    ts = bits_lib.pow2_float(j)
    # As jaxfp8.mx's nvfp4: x / 2^j exactly, then one division by the block
    # scale; quotients below float32's normal range round to (signed) zero.
    xs = bits_lib.ldexp(bits_lib.finite_magnitude(bits), -j)
    sv = blockwise.per_element(bs.astype(jnp.float32))
    ym = lax.bitcast_convert_type(xs, jnp.float32) / jnp.where(
        sv == 0, np.float32(1), sv)
    ym = jnp.where((xs < 0x800000) | (sv == 0), np.float32(0), ym)
    y = lax.bitcast_convert_type(lax.bitcast_convert_type(ym, U32) | sign,
                                 jnp.float32)
  # A block with NaN or Inf: codes +0 under the NaN scale, as jaxfp8's nvfp4.
  y = jnp.where(blockwise.per_element(bad), np.float32(0), y)
  if rand is not None:
    rand = blockwise.tiles(rand, block)
  codes = rounding_lib.round_to(y, ELEMENT, rounding=rounding, saturate=True,
                                rand=rand)
  bs = jnp.where(bad, jnp.asarray(np.nan, bs.dtype), bs)
  return blockwise.untiles(codes, x.shape), bs, ts


@functools.partial(jax.custom_jvp, nondiff_argnums=(2, 3, 4))
def _quantize(x, rand, block, tensor_scale: str, rounding: str):
  return _quantize_jit(x, rand, block, tensor_scale, rounding)


@_quantize.defjvp
def _quantize_jvp(block, tensor_scale, rounding, primals, tangents):
  del block, tensor_scale, rounding, primals, tangents
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
             key: jax.Array | None = None
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
    key: PRNG key for stochastic rounding (32 random bits per element);
      ignored for nearest rounding.

  Returns:
    ``(codes, block_scales, tensor_scale)``: float4_e2m1fn codes of ``x``'s
    shape; float8_e4m3fn block scales ``(..., ceil(M / bm), ceil(K / bk))``
    (NaN for blocks holding NaN or Inf); the float32 scalar decode tensor
    scale. value = code * block_scale * tensor_scale.

  Raises:
    TypeError: non-numeric ``x``, a bad ``block`` or ``key``; differentiating
      it (no gradient: the recipe core's custom VJP defines them).
    ValueError: fewer than two axes, another block shape, tensor scale or
      rounding; stochastic rounding without a key.

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
  x = blockwise.check_matrix(x, fn)
  rand = rounding_lib.stochastic_bits(rounding, key, x.shape, fn=fn)
  return _quantize(x, rand, block, tensor_scale, rounding)


@functools.partial(jax.jit, static_argnums=(3,))
def _dequantize_jit(values, block_scales, tensor_scale, block):
  t = blockwise.tiles(values, block) * blockwise.per_element(block_scales)
  fast = tensor_scale >= _FAST_TENSOR_MIN
  out = lax.cond(fast, lambda t, s: t * s, f32.mul, t, tensor_scale)
  return blockwise.untiles(out, values.shape)


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
           "dequantize", "quantize"]
