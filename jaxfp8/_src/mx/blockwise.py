"""FP8 blockwise quantization: Transformer Engine's ``Float8BlockScaling``.

The recipe DeepSeek-V3 trained with (arXiv 2412.19437) and Transformer
Engine (TE) ships as ``Float8BlockScaling``: an array ``(..., M, K)`` is cut
into tiles of ``bm x bk`` elements (``(1, 128)``: a scale per 128
consecutive elements along K, for activations and gradients; ``(128, 128)``:
a scale per square block, for weights), each with its own float32 scale.
:func:`quantize` gives the fp8 codes and the *decode* scales (value =
code * scale); :func:`dequantize` multiplies them back.

The rule, step by step, as TE computes it (files of NVIDIA/TransformerEngine:
``common/recipe/recipe_common.cuh`` ``compute_scale_from_amax``; the kernels
``common/transpose/quantize_transpose_vector_blockwise.cu`` (1xN) and
``quantize_transpose_square_blockwise.cu`` (NxN); the recipe defaults in
``common/recipe/__init__.py``; the Python reference
``tests/pytorch/references/blockwise_quantizer_reference.py`` with
``quantize_scale_calc.py``), every operation in IEEE float32:

1. ``amax`` = the largest ``|x|`` of the tile. A partial tile at a ragged
   edge (M or K not a multiple of the block) takes the amax of the elements
   it holds: TE pads with zeros, which cannot raise a maximum.
2. ``amax == 0`` (an all-zero tile): encode scale 1. TE floors amax at
   ``amax_epsilon`` first; the recipe sets it to 0.0, so that is a no-op.
3. ``encode = fmt_max / amax`` (448 for e4m3, 57344 for e5m2), correctly
   rounded. Where it overflows (amax below ``fmt_max / FLT_MAX``, every
   subnormal amax among them) TE uses the largest finite value of the input
   type, float32 here: ``FLT_MAX``.
4. ``scale="pow2"`` (TE's default, ``power_2_scale=True``): the mantissa
   bits of ``encode`` are cleared (bits ``& 0xFF800000``), rounding it down to
   a power of two, so the decode scale rounds up and the largest element
   still fits. ``"float32"`` (TE's ``NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1``)
   keeps ``encode`` as it is.
5. ``decode = 1 / encode``, correctly rounded in float32 (it may be a
   float32 subnormal: 2^-127 for an amax below about 1.3e-36).
6. Each element: ``code = fp8(x * encode)``, the float32 product rounded to
   nearest even into the format, saturating to +-max (the CUDA cast's
   ``satfinite``; the reference clamps before casting).

All of it is exact on every backend, also for subnormal float32 inputs
(:mod:`jaxfp8._src.mx.f32`; XLA on CPU would flush them).

NaN and Inf (where this module differs from TE): TE's CUDA amax is an
``fmaxf`` reduction, which drops NaN, and an infinite amax gives encode
scale 1 (the Python reference gives 0), after which Inf saturates to +-max:
a finite code for an infinite input. Here a tile holding any NaN or Inf gets
decode scale NaN and NaN codes in all of its elements, so it dequantizes to
NaN and never to a silently finite value; other tiles are unaffected.
"""
from __future__ import annotations

import functools
from typing import Any, Literal

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.mx import bits as bits_lib
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import rounding as rounding_lib
from jaxfp8._src.numerics import validate
from jaxfp8._src.mx import f32
from jaxfp8._src.mx import scales as mx_scales

ScaleKind = Literal["pow2", "float32"]
SCALES: tuple[str, ...] = ("pow2", "float32")
FORMATS: tuple[str, ...] = ("float8_e4m3fn", "float8_e5m2")
U32 = bits_lib.U32
# Decode scales at least this large make every code * scale a normal
# float32 (codes are at least 2^-16): the plain float product is exact.
_FAST_DECODE_MIN = np.float32(2.0**-100)


# -- arguments -----------------------------------------------------------------

def check_block(block: Any, fn: str, arg: str = "block") -> tuple[int, int]:
  """``block`` as a pair of positive ints, or TypeError/ValueError naming
  ``arg``."""
  if (not isinstance(block, (tuple, list)) or len(block) != 2):
    raise TypeError(f"`{arg}` argument to `{fn}` must be a pair (rows, "
                    f"columns) such as (1, 128) or (128, 128), got {block!r}")
  return tuple(validate.check_size(b, arg, fn, minimum=1) for b in block)


def check_matrix(x: Any, fn: str, arg: str = "x") -> jax.Array:
  """``x`` as float32 with at least two axes (..., M, K)."""
  x = rounding_lib.to_float32(x, fn=fn, arg=arg)
  if x.ndim < 2:
    raise ValueError(f"`{arg}` argument to `{fn}` must have at least two axes "
                     f"(..., M, K), got shape {x.shape}")
  return x


def block_grid(shape: tuple[int, ...], block: tuple[int, int]
               ) -> tuple[int, ...]:
  """Shape of the per-block scales of an array of ``shape``."""
  *lead, m, k = shape
  return (*lead, -(-m // block[0]), -(-k // block[1]))


def check_scales(scales: Any, codes_shape: tuple[int, ...],
                 block: tuple[int, int], fn: str, arg: str = "scales"
                 ) -> jax.Array:
  """``scales`` as float32 of the shape ``block_grid`` says."""
  scales = rounding_lib.to_float32(scales, fn=fn, arg=arg)
  want = block_grid(codes_shape, block)
  if scales.shape != want:
    raise ValueError(f"`{arg}` argument to `{fn}` must have shape {want} for "
                     f"codes of shape {codes_shape} and block {block}, got "
                     f"{scales.shape}")
  return scales


# -- tiles ---------------------------------------------------------------------

def tiles(x: jax.Array, block: tuple[int, int]) -> jax.Array:
  """(..., M, K) -> (..., M/bm, bm, K/bk, bk), zero-padded to whole tiles."""
  bm, bk = block
  *lead, m, k = x.shape
  mp, kp = -(-m // bm) * bm, -(-k // bk) * bk
  if (mp, kp) != (m, k):
    x = jnp.pad(x, [(0, 0)] * len(lead) + [(0, mp - m), (0, kp - k)])
  return x.reshape(*lead, mp // bm, bm, kp // bk, bk)


def untiles(t: jax.Array, shape: tuple[int, ...]) -> jax.Array:
  """The inverse of :func:`tiles`: (..., M/bm, bm, K/bk, bk) -> ``shape``."""
  *lead, mb, bm, kb, bk = t.shape
  out = t.reshape(*lead, mb * bm, kb * bk)
  return out[..., :shape[-2], :shape[-1]]


def tile_amax(t: jax.Array) -> jax.Array:
  """uint32 bits of each tile's largest magnitude; NaN sorts above Inf, so
  a tile holding either has amax bits >= Inf's.

  Tiles of one row go through :func:`jaxfp8._src.mx.scales.block_max`, the
  reduce XLA on CPU vectorizes (a reduce over the minor axis of the tiles
  runs element by element); taller tiles have their rows, and long rows
  their runs of 8, halved first (:func:`jaxfp8._src.mx.scales.halve_max`).
  """
  *lead, mb, bm, kb, bk = t.shape
  if bm == 1:
    flat = lax.bitcast_convert_type(t, U32).reshape(*lead, mb, kb * bk)
    return mx_scales.block_max(flat, bk)
  mag = lax.bitcast_convert_type(t, U32) & 0x7FFFFFFF
  if bk % 8 == 0 and bk > 32:
    mag = mx_scales.halve_max(mag.reshape(*mag.shape[:-1], bk // 8, 8), -2)
    return jnp.max(mx_scales.halve_max(mag, -4), axis=(-4, -2, -1))
  return jnp.max(mx_scales.halve_max(mag, -3), axis=(-3, -1))


def per_element(v: jax.Array) -> jax.Array:
  """Per-tile (..., Mb, Kb) -> broadcastable against tiles."""
  return v[..., :, None, :, None]


# -- quantize ------------------------------------------------------------------

def encode_scales(amax: jax.Array, fmt_max: float, scale: str) -> jax.Array:
  """TE's ``compute_scale_from_amax`` (steps 2-4), for finite amax bits."""
  amax_f = lax.bitcast_convert_type(amax, jnp.float32)
  enc = np.float32(fmt_max) / jnp.where(amax == 0, np.float32(1), amax_f)
  # A subnormal amax overflows the quotient (XLA on CPU would divide by 0).
  enc = jnp.where(amax < 0x800000, np.float32(np.inf), enc)
  enc = jnp.where(jnp.isinf(enc), f32.F32_MAX, enc)
  if scale == "pow2":
    enc = lax.bitcast_convert_type(
        lax.bitcast_convert_type(enc, U32) & U32(0xFF800000), jnp.float32)
  return jnp.where(amax == 0, np.float32(1), enc)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _quantize_jit(x, block, fmt_name: str, scale: str):
  fmt = formats.get(fmt_name)
  t = tiles(x, block)
  amax = tile_amax(t)
  bad = amax >= bits_lib.INF
  enc = encode_scales(jnp.where(bad, U32(0), amax), fmt.max, scale)
  dec = jnp.where(bad, np.float32(np.nan), f32.reciprocal(enc))
  y = f32.mul_into_narrow(t, per_element(enc))
  y = jnp.where(per_element(bad), np.float32(np.nan), y)
  codes = rounding_lib.round_to(y, fmt, rounding="nearest", saturate=True)
  return untiles(codes, x.shape), dec


# Tiles whose amax is 0 or at least this large keep every step in float32's
# normal range, for both formats: encode scales <= 57344 * 2^80, decode
# scales and code * decode products >= 2^-112, and a subnormal element
# times its encode scale (< 2^-30) rounds to zero either way. There plain
# float32 arithmetic is the IEEE one.
_PLAIN_AMAX = np.float32(2.0**-80)


def _tile_values(t, enc, bad, fmt: formats.Format, *, exact: bool):
  """:func:`values` of tiles ``t`` from their encode scales: the decode
  scales, the element rounding in the rounding core's magnitude form, and
  the last product. ``exact``: the IEEE steps for every amax (:mod:`.f32`'s
  forms); otherwise plain float32 operations, the same for tiles whose amax
  is 0 or at least :data:`_PLAIN_AMAX`."""
  if exact:
    dec = f32.reciprocal(enc)
    # A subnormal element times a large encode scale; XLA would flush it.
    y = f32.mul_into_narrow(t, per_element(enc))
  else:
    dec = np.float32(1) / enc
    y = t * per_element(enc)
  v = lax.bitcast_convert_type(rounding_lib.saturated_bits(
      lax.bitcast_convert_type(y, U32), fmt, rounding="nearest"),
      jnp.float32)
  dec = per_element(dec)
  # v: fp8 values, at most 4 significant bits.
  out = f32.mul_narrow(v, dec) if exact else v * dec
  return jnp.where(per_element(bad), np.float32(np.nan), out)


@functools.partial(jax.jit, static_argnums=(1, 2, 3))
def _values_jit(x, block, fmt_name: str, scale: str):
  fmt = formats.get(fmt_name)
  t = tiles(x, block)
  amax = tile_amax(t)
  bad = amax >= bits_lib.INF
  plain = jnp.all((amax == 0) | bad
                  | (amax >= rounding_lib.f32_bits(_PLAIN_AMAX)))
  enc = encode_scales(jnp.where(bad, U32(0), amax), fmt.max, scale)
  out = lax.cond(plain, functools.partial(_tile_values, fmt=fmt, exact=False),
                 functools.partial(_tile_values, fmt=fmt, exact=True),
                 t, enc, bad)
  return untiles(out, x.shape)


def values(x: jax.Array, *, block: tuple[int, int], fmt: str,
           scale: str) -> jax.Array:
  r"""float32 values of ``x`` (..., M, K) quantized blockwise and decoded:
  ``dequantize(*quantize(x, ...))`` bit for bit, in fewer passes (no codes
  or scales are stored). What the recipes' emulated GEMMs multiply.

  Runs inside its callers' jit; arguments are checked (as :func:`quantize`
  checks them). Where every tile's amax is 0 or at least 2^-80, the steps
  are plain float32 arithmetic; otherwise their exact forms run (a
  ``lax.cond``: one branch runs). Both round elements as :func:`quantize`
  does, without its codes.

  >>> import jax.numpy as jnp
  >>> values(jnp.array([[1.0, -3.0, 0.5, 96.0]]), block=(1, 2),
  ...        fmt="float8_e4m3fn", scale="pow2")
  Array([[ 1. , -3. ,  0.5, 96. ]], dtype=float32)
  """
  return _values_jit(x, block, formats.get(fmt).name, scale)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1, 2, 3))
def _quantize(x, block, fmt_name: str, scale: str):
  return _quantize_jit(x, block, fmt_name, scale)


@_quantize.defjvp
def _quantize_jvp(block, fmt_name, scale, primals, tangents):
  del block, fmt_name, scale, primals, tangents
  raise TypeError(NO_GRADIENT.format(fn="quantize"))


NO_GRADIENT = (
    "`{fn}` has no gradient (a rounding to codes; zeros would be silent): "
    "differentiate through jaxfp8's recipe dot_general, whose custom VJP "
    "quantizes each GEMM's operands")


def quantize(x: Any, *, block: tuple[int, int],
             fmt: str = "float8_e4m3fn", scale: ScaleKind = "pow2"
             ) -> tuple[jax.Array, jax.Array]:
  """Quantizes ``x`` (..., M, K) into fp8 with one scale per tile.

  Transformer Engine's ``Float8BlockScaling`` rule (module docstring): the
  tile's encode scale is ``max / amax`` (rounded down to a power of two by
  default), elements are ``x * encode`` rounded to nearest even and
  saturated, and the returned scales are the decode scales ``1 / encode``.

  Args:
    x: real array with at least two axes (..., M, K); K is the blocked
      (contracting) axis. Leading axes are independent matrices.
    block: tile shape ``(bm, bk)``: ``(1, 128)`` for one scale per 128
      consecutive elements along K, ``(128, 128)`` for square blocks.
    fmt: ``"float8_e4m3fn"`` (TE's default for every tensor) or
      ``"float8_e5m2"`` (aliases such as ``"e4m3"`` work).
    scale: ``"pow2"`` (power-of-two scales, TE's default) or ``"float32"``.

  Returns:
    ``(codes, scales)``: codes of ``x``'s shape in ``fmt``'s dtype; float32
    decode scales of shape ``(..., ceil(M / bm), ceil(K / bk))``. A tile
    holding NaN or Inf has scale NaN and NaN codes.

  Raises:
    TypeError: non-numeric ``x``, a ``block`` that is not a pair of ints;
      differentiating it (it has no gradient: the recipe core's custom VJP
      defines the gradients of quantized GEMMs).
    ValueError: fewer than two axes, a non-positive block size, another
      format or scale kind.

  >>> import jax.numpy as jnp
  >>> x = jnp.array([[1.0, -3.0, 0.5, 96.0]])
  >>> codes, scales = quantize(x, block=(1, 2))
  >>> codes  # encode 448/3 -> 128, 448/96 -> 4 (powers of two, down)
  Array([[128, -384, 2, 384]], dtype=float8_e4m3fn)
  >>> scales
  Array([[0.0078125, 0.25     ]], dtype=float32)
  >>> dequantize(codes, scales, block=(1, 2))
  Array([[ 1. , -3. ,  0.5, 96. ]], dtype=float32)
  """
  fn = "quantize"
  block = check_block(block, fn)
  fmt = formats.get(fmt, arg="fmt", fn=fn)
  validate.check_choice(fmt.name, FORMATS, "fmt", fn)
  validate.check_choice(scale, SCALES, "scale", fn)
  x = check_matrix(x, fn)
  return _quantize(x, block, fmt.name, scale)


# -- dequantize ----------------------------------------------------------------

@functools.partial(jax.jit, static_argnums=(2,))
def _dequantize_jit(values, scales, block):
  t = tiles(values, block)
  s = per_element(scales)
  fast = jnp.all(jnp.isnan(scales) | (scales >= _FAST_DECODE_MIN))
  out = lax.cond(fast, lambda t, s: t * s, f32.mul, t, s)
  return untiles(out, values.shape)


def dequantize(codes: Any, scales: Any, *, block: tuple[int, int]
               ) -> jax.Array:
  """float32 values ``code * scale`` of a :func:`quantize` result.

  Each product is rounded once, to nearest even, also where a decode scale
  is a float32 subnormal. Tiles with a NaN scale give NaN.

  Args:
    codes: fp8 codes (..., M, K) (any real array is taken as its values).
    scales: float32 decode scales (..., ceil(M / bm), ceil(K / bk)).
    block: the tile shape ``(bm, bk)`` they were quantized with.

  Returns:
    float32 array of ``codes``' shape.

  Raises:
    TypeError, ValueError: as :func:`quantize`; scales of the wrong shape.

  >>> import jax.numpy as jnp
  >>> codes, scales = quantize(jnp.full((2, 3), 0.1), block=(2, 2))
  >>> dequantize(codes, scales, block=(2, 2))[0]
  Array([0.1015625, 0.1015625, 0.1015625], dtype=float32)
  """
  fn = "dequantize"
  block = check_block(block, fn)
  values = check_matrix(codes, fn, "codes")
  scales = check_scales(scales, values.shape, block, fn)
  return _dequantize_jit(values, scales, block)


__all__ = ["FORMATS", "NO_GRADIENT", "SCALES", "block_grid", "check_block",
           "check_matrix", "check_scales", "dequantize", "encode_scales",
           "per_element", "quantize", "tile_amax", "tiles", "untiles",
           "values"]
