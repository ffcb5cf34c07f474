"""MXFP8 matmul on Mosaic GPU: ``a @ b.T`` for MXArrays blocked along K.

``a`` (M, K) and ``b`` (N, K) are :class:`jaxfp8.mx.MXArray` s in mxfp8
(e4m3 or e5m2 elements, mixed allowed), each run of 32 (the block size)
elements along K sharing one E8M0 scale ``2^(code - 127)``. The operands stay
fp8 into the tensor cores; the block-scaled kernel
(:mod:`jaxfp8._src.kernels.block_scaled_mosaic_gpu`) multiplies each K block's
float32 partial sum by its row and column scales in registers: the only
MXFP8 GEMM that keeps fp8 operands on Hopper, which has no block-scaled MMA
(``jax.nn.scaled_matmul`` dequantizes there).

The scales are applied exactly. 2^-127 (scale code 0) and products of two
scales down to 2^-254 are not normal float32 numbers, so the factors run in
the shifted domain of the Triton kernel's fast path
(:func:`jaxfp8._src.kernels.mx_matmul.reference.fast_plan`): row factors
``2^(ca - 127 + Ta)`` and column factors ``2^(cb - 127 + Tb)`` are normal
float32 numbers, so is their product for every pair of blocks whose
contribution float32 can hold, and the result is multiplied by ``2^-(Ta +
Tb)`` at the end. Where scales are so spread that no shift fits, the jnp
reference (exact, per block) runs instead: chosen on device, from the scale
codes alone. The op and its reference are the Triton kernel's
(:func:`jaxfp8.ops.mx_matmul`, :func:`jaxfp8.ops.mx_matmul_reference`).
"""
from __future__ import annotations

import functools
from typing import Any

import jax
from jax import lax
import jax.numpy as jnp

from jaxfp8._src.kernels import common as shared
from jaxfp8._src.kernels.mx_matmul import reference as mx_lib
from jaxfp8._src.kernels import block_scaled_mosaic_gpu as block_scaled
from jaxfp8._src.kernels import mosaic_gpu_common as common
from jaxfp8._src.mx import array as mx_array

_NAN_CODE = 255


def _factors(codes, shift):
  """float32 ``2^(code - 127 + shift)`` (normal where the plan is fast);
  NaN for the NaN code."""
  return mx_lib.pow2(codes + shift, codes == _NAN_CODE)


@functools.partial(jax.jit, static_argnames=("out_dtype", "mode", "tiles",
                                             "block_size"))
def _mx_matmul(a_data, a_codes, b_data, b_codes, *, out_dtype, mode: str,
               tiles: common.Tiles, block_size: int):
  if mode == "reference":
    return mx_lib.reference(a_data, a_codes, b_data, b_codes,
                            out_dtype=out_dtype, block_size=block_size)
  ca, cb = a_codes.astype(jnp.int32), b_codes.astype(jnp.int32)
  fast, shifts, unshift = mx_lib.fast_plan(ca, cb, a_data.shape[1],
                                           a_data.dtype, b_data.dtype)

  def kernel():
    post = jnp.concatenate([unshift, jnp.ones((1,), jnp.float32)])
    return block_scaled.gemm(
        a_data, b_data, _factors(ca, shifts[0]), _factors(cb, shifts[1]),
        post, out_dtype=out_dtype, mode=mode, tiles=tiles,
        scale_block=block_size)

  def exact():
    return mx_lib.reference(a_data, a_codes, b_data, b_codes,
                            out_dtype=out_dtype, block_size=block_size)

  return lax.cond(fast, kernel, exact)


def mx_matmul_mgpu(a: mx_array.MXArray, b: mx_array.MXArray, *,
                   out_dtype: Any = jnp.bfloat16,
                   interpret: bool | None = None, block_m: int | None = None,
                   block_n: int | None = None,
                   max_concurrent_steps: int | None = None) -> jax.Array:
  """MXFP8 matmul ``a @ b.T`` on Mosaic GPU, block scales applied in registers.

  For each 32-long block of K, Hopper's ``wgmma`` multiplies the fp8 tiles
  into a float32 partial sum, which the two blocks' E8M0 scales (exact powers
  of two) multiply before it joins the float32 accumulator; the result is
  rounded once to ``out_dtype``. The same op as
  :func:`jaxfp8.ops.mx_matmul` (Pallas' Triton backend).

  Args:
    a: (M, K) :class:`jaxfp8.mx.MXArray`, mxfp8_e4m3 or mxfp8_e5m2, blocked
      along K (``quantize(x, fmt, axis=-1)``).
    b: (N, K) MXArray blocked along K with the same block size (the
      transposed right operand). Mixed e4m3/e5m2 is multiplied as it is.
    out_dtype: bfloat16 (default), float16 or float32.
    interpret: None (default): compiled on a GPU of compute capability
      9.x, the jnp reference elsewhere. True: the kernel in Pallas'
      Mosaic GPU interpreter (CPU; JAX >= 0.11). False: compiled.
    block_m: rows of an output tile, 64 or 128 (default 64: the
      accumulator and the partial sum both live in registers).
    block_n: columns of an output tile, a power of two in [16, 256].
    max_concurrent_steps: K steps of 128 whose copies are in flight.

  Returns:
    The (M, N) product in ``out_dtype``.

  Raises:
    TypeError: an operand is not an MXArray.
    ValueError: not 2-D, not blocked along K, shapes or block sizes differ,
      or a tile the kernel doesn't take.
    NotImplementedError: a non-mxfp8 format, a block size other than 32, 64
      or 128, an unsupported ``out_dtype``, ``interpret=False`` without a
      Hopper-class GPU, or ``interpret=True`` on a JAX without the
      interpreter.

  >>> import jax.numpy as jnp, jaxfp8
  >>> a = jaxfp8.mx.quantize(jnp.full((4, 64), 3.0), "mxfp8_e4m3")
  >>> b = jaxfp8.mx.quantize(jnp.full((2, 64), 0.5), "mxfp8_e4m3")
  >>> jaxfp8.ops.mx_matmul_mgpu(a, b)  # the reference on CPU
  Array([[96, 96],
         [96, 96],
         [96, 96],
         [96, 96]], dtype=bfloat16)
  """
  fn = "mx_matmul_mgpu"
  mx_lib.check_pair(a, b, fn)
  out_dtype = shared.check_out_dtype(out_dtype, fn)
  mode = common.resolve_mode(interpret, fn)
  bs = a.block_size
  if mode != "reference":
    common.check_pair_dtypes(a.data.dtype, b.data.dtype, fn)
  if mode != "reference" and bs not in block_scaled.SCALE_BLOCKS:
    raise NotImplementedError(
        f"`{fn}` kernel needs a block size of "
        f"{', '.join(map(str, block_scaled.SCALE_BLOCKS))} (fp8 wgmma steps "
        f"within a 128-long K step), got {bs}; use interpret=None on CPU for "
        "the reference")
  (m, k), n = a.shape, b.shape[0]
  tiles = common.choose_tiles(
      m, n, a.data.shape[1], fn=fn, max_block_m=64, block_m=block_m,
      block_n=block_n, max_concurrent_steps=max_concurrent_steps,
      k_multiple=bs, out_itemsize=out_dtype.itemsize,
      step_bytes=block_scaled.step_bytes(bs))
  if m == 0 or n == 0 or k == 0:
    return jnp.zeros((m, n), out_dtype)
  return _mx_matmul(a.data, a.scales, b.data, b.scales, out_dtype=out_dtype,
                    mode=mode, tiles=tiles, block_size=bs)
