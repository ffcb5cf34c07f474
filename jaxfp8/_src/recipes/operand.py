"""Quantizing one GEMM operand as its :class:`~.spec.Quantizer` says.

Two forms, by what the GEMM needs:

* per tensor (:func:`quantize_tensor`): narrow codes and one float32 scale,
  in the operand's own layout; the core multiplies the codes and then the
  scales, as the fp8 ``dot_general`` always has. Kinds ``"tensor"`` and
  ``"cast"`` quantize elementwise (:func:`dequantize_elementwise` gives
  their values in the operand's layout).
* in a GEMM view (:func:`view`, :func:`quantize_view`): the operand
  transposed and reshaped to (batch..., free, contracting), ``(..., M, K)``,
  the layout the block quantizers take (each batch element is its own
  matrix; tensor-level quantities are over the whole operand), optionally
  transformed (:func:`rht`), then quantized and dequantized exactly in
  float32.

Everything here runs inside the core's ``custom_vjp`` (no straight-through
rule applies: the backward pass is written out there).
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.fp8 import scaling
from jaxfp8._src.mx import array as mx_lib
from jaxfp8._src.recipes import mx_gemm as gemm_lib
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics.cast import cast
from jaxfp8._src.numerics.rounding import operand_float32
from jaxfp8._src.numerics.codes import decode
from jaxfp8._src.mx import blockwise
from jaxfp8._src.mx import hadamard
from jaxfp8._src.mx import nvfp4
from jaxfp8._src.mx import quantize as mx_quantize
from jaxfp8._src.mx.formats import get_format as get_mx_format
from jaxfp8._src.random import bits as random_bits
from jaxfp8._src.recipes.spec import Quantizer

# The Hadamard transform's block: it mixes runs of 16 along the contracting
# axis, the NVFP4 block length.
RHT_SIZE = 16


def float32(x: Any) -> jax.Array:
  """The operand's values in float32 (narrow and CodeArray ones decoded)."""
  return operand_float32(x, fn="dot_general")


# -- per tensor ----------------------------------------------------------------

def scaler(q: Quantizer, state: Any = None):
  """The fp8 scaling object of a ``"tensor"`` quantizer: its delayed
  ``state``, or a :class:`~jaxfp8._src.fp8.scaling.CurrentScaling`."""
  if q.delayed:
    return state
  return scaling.CurrentScaling(q.format, q.margin, q.scale == "pow2")


def quantize_tensor(x32: jax.Array, q: Quantizer, state: Any = None):
  """``(codes, scale)`` of float32 ``x32`` by the one per-tensor quantizer,
  the ``quantize`` of :func:`scaler`'s object: ``cast(x32 / scale)``
  (``scaling.divide`` keeps subnormal operands). A ``"cast"`` quantizer
  gives ``cast(x32, format)`` (saturating) into a narrow format, IEEE's
  ``x32.astype(format)`` into a wide one (bfloat16: Inf, NaN and overflow
  as ``lax``), and scale None."""
  if q.kind == "cast" and not formats.is_narrow(q.format):
    # bfloat16, float16: IEEE rounding (Inf and NaN kept, overflow to Inf),
    # as lax.dot_general on operands cast to that dtype.
    return x32.astype(q.format), None
  if q.kind == "cast":
    return cast(x32, q.format), None
  if x32.size == 0 and not q.delayed:  # no amax: the scale of amax 0
    scale = scaling.compute_scale(jnp.float32(0), q.format, margin=q.margin,
                                  power_of_two=q.scale == "pow2")
    return scaling.quantize(x32, q.format, scale), scale
  return scaler(q, state).quantize(x32)


def dequantize_elementwise(codes: Any, scale: Optional[jax.Array]):
  """float32 values of :func:`quantize_tensor`'s result, exact: the
  scaling objects' own ``dequantize`` where there is a scale."""
  if scale is None:
    return decode(codes, jnp.float32)
  return scaling.dequantize(codes, scale)


def next_state(x32: jax.Array, state: Any) -> Any:
  """The delayed state after recording ``x32``'s amax (0 for an empty
  operand, which holds no magnitude)."""
  return state.update(scaling.amax(x32) if x32.size else jnp.float32(0))


# -- GEMM views ----------------------------------------------------------------

def free_dims(ndim: int, contract: Sequence[int],
              batch: Sequence[int]) -> tuple[int, ...]:
  return gemm_lib.free_dims(ndim, contract, batch)


def view(x32: jax.Array, batch: Sequence[int],
         contract: Sequence[int]) -> jax.Array:
  """``x32`` as (batch..., free, contracting): batch dims in the order
  given, free dims and contracting dims each flattened in order."""
  free = free_dims(x32.ndim, contract, batch)
  shape = [x32.shape[d] for d in batch]
  size = lambda dims: math.prod(x32.shape[d] for d in dims)
  return x32.transpose(tuple(batch) + free + tuple(contract)).reshape(
      shape + [size(free), size(contract)])


def rht_signs(key: jax.Array) -> jax.Array:
  """The random signs of a GEMM's Hadamard transform: both operands take
  the same (so the transforms cancel in ``a . b``: the Hadamard matrix is
  orthogonal)."""
  return hadamard.random_signs(key, RHT_SIZE)


def rht(v: jax.Array, signs: jax.Array, axis: int) -> jax.Array:
  """``v`` transformed along its contracting ``axis``."""
  return hadamard.rht(v, signs, axis=axis)


def unview_operand(v: jax.Array, shape: Sequence[int], batch: Sequence[int],
                   contract: Sequence[int]) -> jax.Array:
  """The inverse of :func:`view`: a view back in the operand's layout."""
  free = free_dims(len(shape), contract, batch)
  perm = tuple(batch) + free + tuple(contract)
  return v.reshape([shape[d] for d in perm]).transpose(
      tuple(int(i) for i in np.argsort(perm)))


def quantize_along(x32: jax.Array, axis: int, q: Optional[Quantizer],
                   key: Optional[jax.Array] = None,
                   row_groups: Optional[tuple[jax.Array, int]] = None
                   ) -> jax.Array:
  """:func:`quantize_view` of a matrix whose contracting axis is ``axis``
  (0 or 1), in its own layout: the same values as quantizing its view and
  transposing back (tiles are cut transposed; stochastic rounding reads
  the view's random bits, transposed), without moving the data.
  ``row_groups``: an NVFP4 quantizer's rows as groups, each a tensor of its
  own (``nvfp4.values``)."""
  if axis == x32.ndim - 1 or q is None or q.kind in ("cast", "tensor"):
    return quantize_view(x32, q, key, row_groups)
  if q.kind == "block":
    return blockwise.values(x32, block=q.block[::-1], fmt=q.format,
                            scale=q.scale)
  if q.kind == "nvfp4":
    rand = _stochastic_bits(q, key, x32.shape[::-1])
    return nvfp4.values(x32, None if rand is None else rand.T, q.block[::-1],
                        tensor_scale=q.scale, scale_mode="floor",
                        rounding=q.rounding, row_groups=row_groups)
  if not q.stochastic:  # MX, in place
    return mx_quantize.values(x32, get_mx_format(q.format),
                              block_size=_mx_block(q), axis=axis,
                              scale_mode=q.scale)
  return quantize_view(x32.T, q, key).T  # its random bits by its shape


def quantize_view(v: jax.Array, q: Optional[Quantizer],
                  key: Optional[jax.Array] = None,
                  row_groups: Optional[tuple[jax.Array, int]] = None
                  ) -> jax.Array:
  """The float32 values a view holds after quantizing by ``q`` (None: as
  given); ``key`` for stochastic rounding; ``row_groups`` as
  :func:`quantize_along`'s."""
  if q is None:
    return v
  if q.kind in ("cast", "tensor"):
    return dequantize_elementwise(*quantize_tensor(v, q))
  if q.kind == "block":
    return blockwise.values(v, block=q.block, fmt=q.format, scale=q.scale)
  if q.kind == "nvfp4":
    rand = _stochastic_bits(q, key, v.shape)
    return nvfp4.values(v, rand, q.block, tensor_scale=q.scale,
                        scale_mode="floor", rounding=q.rounding,
                        row_groups=row_groups)
  if not q.stochastic:  # decoded in one pass, no packed storage
    return mx_quantize.values(v, get_mx_format(q.format),
                              block_size=_mx_block(q), axis=-1,
                              scale_mode=q.scale)
  a = mx_lib.quantize(v, q.format, block_size=q.block_size, axis=-1,
                      scale_mode=q.scale, rounding=q.rounding,
                      key=key if q.stochastic else None, pad=True)
  return a.dequantize()


def _stochastic_bits(q: Quantizer, key, shape) -> Optional[jax.Array]:
  """The 32 random bits per element stochastic rounding reads: the words of
  ``jax.random.bits(key, shape)`` (what ``nvfp4.quantize`` draws), by the
  faster written-out hash; None for rounding to nearest."""
  return random_bits.bits32(key, shape) if q.stochastic else None


def _mx_block(q: Quantizer) -> int:
  """The block size of an MX quantizer: its own, else its format's."""
  return q.block_size or get_mx_format(q.format).block_size


def view_dot(a: jax.Array, b: jax.Array, n_batch: int) -> jax.Array:
  """``a . b`` of two views over K, float32 at HIGHEST: (batch..., M, N)."""
  batch = tuple(range(n_batch))
  return lax.dot_general(a, b, (((a.ndim - 1,), (b.ndim - 1,)),
                                (batch, batch)),
                         precision=lax.Precision.HIGHEST,
                         preferred_element_type=jnp.float32)


def unview(out: jax.Array, a_shape: Sequence[int], b_shape: Sequence[int],
           dims) -> jax.Array:
  """A view product (batch..., M, N) reshaped to ``dot_general``'s result
  layout (batch, lhs free, rhs free)."""
  (ac, bc), (ab, bb) = dims
  shape = ([a_shape[d] for d in ab]
           + [a_shape[d] for d in free_dims(len(a_shape), ac, ab)]
           + [b_shape[d] for d in free_dims(len(b_shape), bc, bb)])
  return out.reshape(shape)
