"""The reference of the MXFP8 matmul and the exact scale arithmetic both of
its kernels share: E8M0 powers of two built from bits, the exact per-block
scaling, and the plan of the fast shifted path (see the Triton kernel's
module, :mod:`jaxfp8._src.kernels.mx_matmul.triton`, for why).
"""
from __future__ import annotations

import functools
import math
from typing import Any

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src.kernels import common
from jaxfp8._src.mx import array as mx_lib


# The MX formats whose elements fp8 tensor cores read directly.
MXFP8_FORMATS: tuple[str, ...] = ("mxfp8_e4m3", "mxfp8_e5m2")


NAN_CODE = 255


_NAN_BITS = 0x7FC00000


_F32_MIN_EXP, _F32_MAX_EXP = -126, 127


def pow2(biased, nan):
  """float32 2^(biased - 127) for ``biased`` in [1, 254]; NaN where ``nan``."""
  bits = jnp.where(nan, jnp.int32(_NAN_BITS), biased << 23)
  return lax.bitcast_convert_type(bits, jnp.float32)


def exact_block_scale(partial, ca, cb):
  """``partial * 2^(ca + cb - 254)`` exactly: ca (rows,), cb (cols,) codes.

  2^E with E in [-254, 254] is applied as two normal powers of two, the first
  clamped to [-126, 127], so no intermediate is a float32 subnormal unless
  the result is one.
  """
  e = ca[:, None] + cb[None, :] - 254
  e1 = jnp.clip(e, _F32_MIN_EXP, _F32_MAX_EXP)
  e2 = jnp.clip(e - e1, _F32_MIN_EXP, _F32_MAX_EXP)
  nan = (ca == NAN_CODE)[:, None] | (cb == NAN_CODE)[None, :]
  return partial * pow2(e1 + 127, nan) * pow2(e2 + 127, False)


def _visible_exponent(k: int, a_dtype, b_dtype) -> tuple[int, int]:
  """(G, lowest visible E): |sum| <= 2^G 2^E for a pair of blocks' scale 2^E.

  A pair whose scale is below 2^(-150 - G) adds less than half float32's
  smallest subnormal to any output, in total over all K.
  """
  amax = float(jnp.finfo(a_dtype).max) * float(jnp.finfo(b_dtype).max)
  g = math.ceil(math.log2(max(k, 1) * amax))
  return g, -150 - g


def fast_plan(ca, cb, k: int, a_dtype, b_dtype):
  """Whether the fast path is exact for these codes, and its shifts.

  Returns (fast: bool scalar, shifts: int32[2] = (Ta, Tb), unshift:
  float32[1] = 2^-T). ``ca`` (M, nkb) and ``cb`` (N, nkb) are int32 codes
  before padding. See the module docstring for the argument.
  """
  g, vis = _visible_exponent(k, a_dtype, b_dtype)
  va, vb = ca != NAN_CODE, cb != NAN_CODE
  lo_a = jnp.min(jnp.where(va, ca, 255), axis=0)
  hi_a = jnp.max(jnp.where(va, ca, 0), axis=0)
  lo_b = jnp.min(jnp.where(vb, cb, 255), axis=0)
  hi_b = jnp.max(jnp.where(vb, cb, 0), axis=0)
  e_lo = jnp.maximum(jnp.min(lo_a + lo_b) - 254, vis)
  e_hi = jnp.max(hi_a + hi_b) - 254
  t = jnp.maximum(0, _F32_MIN_EXP - e_lo)
  # Every present code's factor 2^(c - 127 + T_x) must be normal:
  # 1 <= c + T_x <= 254 for c in [min code, max code].
  la, ha, lb, hb = jnp.min(lo_a), jnp.max(hi_a), jnp.min(lo_b), jnp.max(hi_b)
  ta_lo = jnp.maximum(1 - la, t - (254 - hb))
  ta_hi = jnp.minimum(254 - ha, t - (1 - lb))
  fast = ((ta_lo <= ta_hi) & (e_hi + t <= _F32_MAX_EXP)
          & ((t == 0) | (e_hi + t + g <= _F32_MAX_EXP)))
  ta = jnp.where(fast, ta_lo, 0)
  tb = jnp.where(fast, t - ta_lo, 0)
  unshift = pow2(127 - jnp.where(fast, t, 0), False)  # t <= 24 + g < 127
  return fast, jnp.stack([ta, tb]).astype(jnp.int32), unshift.reshape(1)


def mx_matmul_reference(a: mx_lib.MXArray, b: mx_lib.MXArray, *,
                        out_dtype: Any = jnp.bfloat16) -> jax.Array:
  """Plain-jnp MXFP8 ``a @ b.T``: per-block float32 sums, exactly scaled.

  Block by block along K, the float32 sum of the block's exact fp8 products
  is multiplied by 2^(ea + eb - 254) (as two normal powers of two) and added
  to a float32 accumulator, as the kernel does.

  Args:
    a: (M, K) MXArray (mxfp8, blocked along its last axis).
    b: (N, K) MXArray with the same format family, K and block size.
    out_dtype: dtype of the result.

  Returns:
    The (M, N) product in ``out_dtype``.

  >>> import jax.numpy as jnp, jaxfp8
  >>> a = jaxfp8.mx.quantize(jnp.full((2, 64), 3.0), "mxfp8_e4m3")
  >>> b = jaxfp8.mx.quantize(jnp.full((1, 64), 2.0**-130), "mxfp8_e5m2")
  >>> out = mx_matmul_reference(a, b, out_dtype=jnp.float32)
  >>> out.shape, float(out[0, 0]) == 64 * 3.0 * 2.0**-130
  ((2, 1), True)
  """
  check_pair(a, b, "mx_matmul_reference")
  return reference(a.data, a.scales, b.data, b.scales, out_dtype=np.dtype(
      out_dtype), block_size=a.block_size)


@functools.partial(jax.jit, static_argnames=("out_dtype", "block_size"))
def reference(a_data, a_codes, b_data, b_codes, *, out_dtype, block_size):
  """:func:`mx_matmul_reference` on the arrays of two MXArrays."""
  m, n = a_data.shape[0], b_data.shape[0]
  nkb = a_codes.shape[1]
  ad = a_data.astype(jnp.float32).reshape(m, nkb, block_size)
  bd = b_data.astype(jnp.float32).reshape(n, nkb, block_size)
  ca, cb = a_codes.astype(jnp.int32), b_codes.astype(jnp.int32)

  def body(kb, acc):
    pa = lax.dynamic_index_in_dim(ad, kb, axis=1, keepdims=False)
    pb = lax.dynamic_index_in_dim(bd, kb, axis=1, keepdims=False)
    partial = lax.dot_general(pa, pb, common.CONTRACT_K,
                              precision=lax.Precision.HIGHEST,
                              preferred_element_type=jnp.float32)
    return acc + exact_block_scale(
        partial, lax.dynamic_index_in_dim(ca, kb, 1, keepdims=False),
        lax.dynamic_index_in_dim(cb, kb, 1, keepdims=False))

  acc = lax.fori_loop(0, nkb, body, jnp.zeros((m, n), jnp.float32))
  return acc.astype(out_dtype)


def check_pair(a: Any, b: Any, fn: str, *,
               fp8_only: bool = True) -> None:
  """Raises unless ``a`` (M, K) and ``b`` (N, K) are MXArrays blocked along
  K with one K and block size (and, with ``fp8_only``, mxfp8 elements)."""
  for x, arg in ((a, "a"), (b, "b")):
    if not isinstance(x, mx_lib.MXArray):
      raise TypeError(f"`{arg}` argument to `{fn}` must be a jaxfp8.mx.MXArray "
                      f"(from jaxfp8.mx.quantize), got {type(x).__name__}")
    if fp8_only and x.fmt.name not in MXFP8_FORMATS:
      raise NotImplementedError(
          f"`{arg}` argument to `{fn}` is {x.fmt.name}: only "
          f"{' and '.join(MXFP8_FORMATS)} elements are read by fp8 tensor "
          "cores as stored (other MX elements are packed or scaled per "
          "tensor); dequantize it instead")
    if x.ndim != 2:
      raise ValueError(f"`{arg}` argument to `{fn}` must be 2-D (rows, K), got "
                       f"shape {x.shape}")
    if x.axis != -1:
      raise ValueError(
          f"`{arg}` argument to `{fn}` must be blocked along K, its last axis "
          f"(quantize with axis=-1), got axis={x.axis + x.ndim}")
  if a.block_size != b.block_size:
    raise ValueError(f"`a` and `b` arguments to `{fn}` must share a block "
                     f"size, got {a.block_size} and {b.block_size}")
  if a.shape[1] != b.shape[1] or a.data.shape[1] != b.data.shape[1]:
    raise ValueError(f"`a` and `b` arguments to `{fn}` must have the same K "
                     f"(their last axis): got shapes {a.shape} and {b.shape}")
