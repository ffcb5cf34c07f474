"""MXFP8 block-scaled matmul: ``a @ b.T`` for MXArrays blocked along K.

``a`` (M, K) and ``b`` (N, K) are :class:`jaxfp8.mx.MXArray` s in mxfp8
(e4m3 or e5m2 elements), each run of ``block_size`` (32) elements along K
sharing one E8M0 scale 2^(code - 127). The kernel keeps the operands in fp8:
for each K block it multiplies the fp8 sub-tiles into a float32 partial sum
and adds ``partial * 2^(ea + eb - 254)`` to the float32 accumulator
(promotion at block boundaries), so the scales never touch the fp8 operands.

The power of two must be applied exactly, and 2^-127 (code 0, what quantize
gives all-zero blocks) and products down to 2^-254 are not normal float32
numbers; XLA on CPU flushes float32 subnormals to zero. Two paths, chosen at
run time from the scale codes alone (a few reductions over (M + N) K / 32
codes):

* Fast (every realistic input): the accumulator runs in a shifted domain,
  ``acc' = acc * 2^T``. Row factors ``2^(ea - 127 + Ta)`` and column factors
  ``2^(eb - 127 + Tb)`` (Ta + Tb = T) are normal float32 numbers, and so is
  their product for every pair of blocks whose contribution can be seen in
  float32 at all (pairs below ``2^-150 / (K max_a max_b)`` can't). One
  multiply builds the scale and one multiply-add applies it; the result is
  multiplied by 2^-T once at the end. T > 0 is only used when even the
  largest possible sum stays finite after the shift.
* Exact (scales so spread that no shift fits): each block's partial sum is
  multiplied by two normal factors 2^E1 2^E2 = 2^(ea + eb - 254) built from
  the integer exponent (E1 clamped to float32's normal range, E2 the rest).

Both give the float32 accumulation of exactly scaled block sums. The jnp
reference, :func:`mx_matmul_reference`, uses the exact path; it is the one
reference the kernel is tested against (``jaxfp8.mx.matmul`` is ``a @ b`` for
every MX format, a different op).
"""
from __future__ import annotations

import functools
from typing import Any

import jax
from jax import lax
from jax.experimental import pallas as pl
import jax.numpy as jnp

from jaxfp8._src.kernels import common
from jaxfp8._src.kernels import triton_common
from jaxfp8._src.mx import array as mx_lib
from jaxfp8._src.kernels.mx_matmul import reference as reference_lib



# Default tiles. Each K block needs a second float32 tile (the partial sum)
# beside the accumulator, so tiles are 128 x 128, not 128 x 256.
_CAPS = (128, 128, 128)


def _kernel(a_ref, b_ref, ca_ref, cb_ref, shift_ref, unshift_ref, o_ref, *,
            block_k: int, block_size: int, exact: bool, upcast: bool):
  """One output tile: per K block, fp8 partial sum times its two scales.

  ``ca_ref`` / ``cb_ref`` hold scale codes transposed, (K blocks, rows), so a
  block's codes for all rows of the tile are one contiguous load.
  """
  per_step = block_k // block_size

  def body(k, acc):
    for j in range(per_step):
      kb = k * per_step + j
      start = pl.multiple_of(kb * block_size, block_size)
      a = a_ref[:, pl.ds(start, block_size)]
      b = b_ref[:, pl.ds(start, block_size)]
      if upcast:  # mixed formats or HIGHEST: bf16 holds fp8 values exactly
        a, b = a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)
      partial = lax.dot_general(a, b, common.CONTRACT_K,
                                preferred_element_type=jnp.float32)
      ca = ca_ref[kb, :].astype(jnp.int32)
      cb = cb_ref[kb, :].astype(jnp.int32)
      if exact:
        acc = acc + reference_lib.exact_block_scale(partial, ca, cb)
      else:
        fa = reference_lib.pow2(ca + shift_ref[0], ca == reference_lib.NAN_CODE)
        fb = reference_lib.pow2(cb + shift_ref[1], cb == reference_lib.NAN_CODE)
        acc = acc + partial * (fa[:, None] * fb[None, :])
    return acc

  num_k = a_ref.shape[1] // block_k
  acc = lax.fori_loop(0, num_k, body, jnp.zeros(o_ref.shape, jnp.float32))
  if not exact:
    acc = acc * unshift_ref[0]
  o_ref[...] = acc.astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("out_dtype", "mode", "tiles",
                                             "block_size", "path", "widen"))
def _mx_matmul(a_data, a_codes, b_data, b_codes, *, out_dtype, mode: str,
               tiles: triton_common.Tiles, block_size: int, path: str,
               widen: bool = False):
  if mode == "reference":
    return reference_lib.reference(a_data, a_codes, b_data, b_codes, out_dtype=out_dtype,
                     block_size=block_size)
  m, n = a_data.shape[0], b_data.shape[0]
  ca, cb = a_codes.astype(jnp.int32), b_codes.astype(jnp.int32)
  fast, shifts, unshift = reference_lib.fast_plan(ca, cb, a_data.shape[1], a_data.dtype,
                                    b_data.dtype)
  bm, bn, bk = tiles.block_m, tiles.block_n, tiles.block_k
  # Padding codes repeat a present code so they change no range; the padded
  # elements are zeros, so padded blocks add nothing.
  pad_a = jnp.min(jnp.where(ca != reference_lib.NAN_CODE, ca, 255))
  pad_b = jnp.min(jnp.where(cb != reference_lib.NAN_CODE, cb, 255))
  a_data = common.pad_to(a_data, (bm, bk))
  b_data = common.pad_to(b_data, (bn, bk))
  ca = _pad_codes(ca, (bm, bk // block_size), pad_a).T.astype(jnp.uint8)
  cb = _pad_codes(cb, (bn, bk // block_size), pad_b).T.astype(jnp.uint8)
  (mp, kp), np_ = a_data.shape, b_data.shape[0]
  grid_m, grid_n = mp // bm, np_ // bn
  tile = functools.partial(common.tile_of_program, grid_m=grid_m,
                           grid_n=grid_n, group_m=tiles.group_m)

  def run(exact: bool):
    return pl.pallas_call(
        functools.partial(_kernel, block_k=bk, block_size=block_size,
                          exact=exact,
                          upcast=widen or a_data.dtype != b_data.dtype),
        out_shape=jax.ShapeDtypeStruct((mp, np_), out_dtype),
        grid=(grid_m * grid_n,),
        in_specs=[
            pl.BlockSpec((bm, kp), lambda p: (tile(p)[0], 0)),
            pl.BlockSpec((bn, kp), lambda p: (tile(p)[1], 0)),
            pl.BlockSpec((kp // block_size, bm), lambda p: (0, tile(p)[0])),
            pl.BlockSpec((kp // block_size, bn), lambda p: (0, tile(p)[1])),
            pl.BlockSpec((2,), lambda p: (0,)),
            pl.BlockSpec((1,), lambda p: (0,)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda p: tile(p)),
        interpret=mode == "interpret",
        compiler_params=triton_common.compiler_params(mode, tiles),
        name="mx_matmul_exact" if exact else "mx_matmul",
    )(a_data, b_data, ca, cb, shifts, unshift)

  if path == "fast":
    out = run(False)
  elif path == "exact":
    out = run(True)
  else:
    out = lax.cond(fast, lambda: run(False), lambda: run(True))
  return out[:m, :n]


def _pad_codes(c, multiples, value):
  pads = [(0, -d % mult) for d, mult in zip(c.shape, multiples)]
  return jnp.pad(c, pads, constant_values=value) if any(
      p for _, p in pads) else c


def mx_matmul(a: mx_lib.MXArray, b: mx_lib.MXArray, *,
              out_dtype: Any = jnp.bfloat16, interpret: bool | None = None,
              precision: Any = None, block_m: int | None = None, block_n: int | None = None,
              block_k: int | None = None, num_warps: int | None = None,
              num_stages: int | None = None) -> jax.Array:
  """MXFP8 matmul ``a @ b.T`` with block scales applied inside the kernel.

  For each block of K the fp8 sub-tiles are multiplied into a float32 partial
  sum, which is scaled by the two blocks' E8M0 scales (exact powers of two)
  and added to the float32 accumulator; the result is rounded once to
  ``out_dtype``.

  Args:
    a: (M, K) :class:`jaxfp8.mx.MXArray`, mxfp8_e4m3 or mxfp8_e5m2,
      blocked along K (``quantize(x, fmt, axis=-1)``).
    b: (N, K) MXArray, blocked along K with the same block size (the
      transposed right operand). Mixed e4m3/e5m2 is exact (bf16 dot).
    out_dtype: bfloat16 (default), float16 or float32.
    interpret: None (default): the compiled kernel on a GPU, the jnp
      reference elsewhere. True: the kernel in Pallas' interpreter.
      False: the compiled kernel (GPU only).
    precision: None (default): fp8 MMA per block. ``jax.lax.Precision.HIGHEST``:
      the fp8 sub-tiles are widened to bfloat16 (exactly) for the bfloat16
      MMA's full float32 accumulation, at half the fp8 rate.
    block_m: rows of an output tile (power of two >= 16; default by shape).
    block_n: columns of an output tile (power of two >= 16).
    block_k: K step, a power of two >= the block size (several blocks per
      step).
    num_warps: Triton warps per program.
    num_stages: Triton software-pipelining depth.

  Returns:
    The (M, N) product in ``out_dtype``.

  Raises:
    TypeError: an operand is not an MXArray.
    ValueError: not 2-D, not blocked along K, or shapes or block sizes differ.
    NotImplementedError: a non-mxfp8 format, a block size that is not a power
      of two >= 32 (the fp8 MMA depth), an unsupported ``out_dtype``, or
      ``interpret=False`` without a GPU.

  >>> import jax.numpy as jnp, jaxfp8
  >>> a = jaxfp8.mx.quantize(jnp.full((4, 64), 3.0), "mxfp8_e4m3")
  >>> b = jaxfp8.mx.quantize(jnp.full((2, 64), 0.5), "mxfp8_e4m3")
  >>> jaxfp8.ops.mx_matmul(a, b, interpret=True)
  Array([[96, 96],
         [96, 96],
         [96, 96],
         [96, 96]], dtype=bfloat16)
  """
  return _mx_matmul_impl(a, b, out_dtype=out_dtype, interpret=interpret,
                         precision=precision, block_m=block_m, block_n=block_n, block_k=block_k,
                         num_warps=num_warps, num_stages=num_stages,
                         path="auto")


def _mx_matmul_impl(a, b, *, out_dtype, interpret, block_m, block_n, block_k,
                    num_warps, num_stages, path: str,
                    precision: Any = None) -> jax.Array:
  """mx_matmul with the scale path forced ("fast", "exact") or "auto"."""
  fn = "mx_matmul"
  reference_lib.check_pair(a, b, fn)
  out_dtype = common.check_out_dtype(out_dtype, fn)
  widen = common.widen_to_bf16(precision, fn)
  mode = triton_common.resolve_mode(interpret, fn)
  bs = a.block_size
  if mode != "reference" and (bs < 32 or bs & (bs - 1)):
    raise NotImplementedError(
        f"`{fn}` kernel needs a block size that is a power of two >= 32 (one "
        f"fp8 MMA step per block), got {bs}; use interpret=None on CPU for "
        "the reference")
  (m, k), n = a.shape, b.shape[0]
  tiles = triton_common.choose_tiles(
      m, n, a.data.shape[1], caps=_CAPS, fn=fn, min_k=bs, block_m=block_m,
      block_n=block_n, block_k=block_k, num_warps=num_warps,
      num_stages=num_stages)
  if m == 0 or n == 0 or k == 0:
    return jnp.zeros((m, n), out_dtype)
  with triton_common.quiet_triton_deprecation(mode):
    return _mx_matmul(a.data, a.scales, b.data, b.scales,
                      out_dtype=out_dtype, mode=mode, tiles=tiles,
                      block_size=bs, path=path, widen=widen)
