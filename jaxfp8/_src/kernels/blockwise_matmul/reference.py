"""The reference of the fp8 blockwise matmul (1x128 / 128x128 blocks with
float32 decode scales, as :func:`jaxfp8._src.mx.blockwise.quantize` gives
them) and the argument checks its kernel shares.

The blocks are the quantizer's own: the scales' shape is its
:func:`~jaxfp8._src.mx.blockwise.block_grid` and K is cut into blocks by its
:func:`~jaxfp8._src.mx.blockwise.tiles`, so the GEMM and the quantizer can't
disagree on a ragged edge.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src.kernels import common as shared
from jaxfp8._src.mx import blockwise


# The scale block along K, and the operand blocks the GEMM takes.
BLOCK_K = 128


BLOCKS: tuple[tuple[int, int], ...] = ((1, BLOCK_K), (BLOCK_K, BLOCK_K))


def per_row(scales: jax.Array, rows: int, block: tuple[int, int]):
  """(rows, K blocks) float32 factors: a tile's scale repeated per row."""
  if block[0] == 1:
    return scales
  return jnp.repeat(scales, block[0], axis=0)[:rows]


@functools.partial(jax.jit, static_argnames=("out_dtype", "a_block",
                                             "b_block"))
def reference(a, a_scales, b, b_scales, *, out_dtype, a_block, b_block):
  m, n, k = a.shape[0], b.shape[0], a.shape[1]
  nkb = -(-k // BLOCK_K)
  # (rows, 1, K blocks, BLOCK_K) tiles of one row each, zero-padded along K
  av = blockwise.tiles(a.astype(jnp.float32), (1, BLOCK_K)).reshape(
      m, nkb, BLOCK_K)
  bv = blockwise.tiles(b.astype(jnp.float32), (1, BLOCK_K)).reshape(
      n, nkb, BLOCK_K)
  sa, sb = per_row(a_scales, m, a_block), per_row(b_scales, n, b_block)
  partial = lax.dot_general(av, bv, (((2,), (2,)), ((1,), (1,))),
                            precision=lax.Precision.HIGHEST,
                            preferred_element_type=jnp.float32)
  factors = sa.T[:, :, None] * sb.T[:, None, :]

  def body(kb, acc):
    return acc + partial[kb] * factors[kb]

  acc = lax.fori_loop(0, nkb, body, jnp.zeros((m, n), jnp.float32))
  return acc.astype(out_dtype)


def check_block(block: Any, arg: str, fn: str) -> tuple[int, int]:
  try:
    block = tuple(int(b) for b in block)
  except TypeError as e:
    raise TypeError(f"`{arg}` argument to `{fn}` must be one of "
                    f"{', '.join(map(str, BLOCKS))}, got {block!r}") from e
  if block not in BLOCKS:
    raise ValueError(f"`{arg}` argument to `{fn}` must be one of "
                     f"{', '.join(map(str, BLOCKS))} (blocks of 128 along K), "
                     f"got {block}")
  return block


def check_scales(s: Any, rows: int, k: int, block, arg: str, fn: str):
  expect = blockwise.block_grid((rows, k), block)
  dtype = getattr(s, "dtype", None)
  if dtype is None or np.dtype(dtype) != np.float32:
    raise TypeError(f"`{arg}` argument to `{fn}` must be a float32 array, "
                    f"got {getattr(dtype, 'name', type(s).__name__)}")
  if tuple(s.shape) != expect:
    raise ValueError(f"`{arg}` argument to `{fn}` must have shape {expect} "
                     f"(one scale per {block[0]}x{block[1]} block), got "
                     f"{tuple(s.shape)}")
  return jnp.asarray(s)


def blockwise_matmul_reference(a: jax.Array, a_scales: jax.Array,
                               b: jax.Array, b_scales: jax.Array, *,
                               a_block: tuple[int, int] = (1, 128),
                               b_block: tuple[int, int] = (128, 128),
                               out_dtype: Any = jnp.bfloat16) -> jax.Array:
  """Plain-jnp fp8 blockwise ``(a * a_scales) @ (b * b_scales).T``.

  Per 128-long block of K, the float32 sum of the block's exact fp8 products
  (HIGHEST precision) is multiplied by its row and column scales and added
  to a float32 accumulator, as the kernel does.

  Args: as :func:`blockwise_matmul`.

  Returns:
    The (M, N) product in ``out_dtype``.

  >>> import jax.numpy as jnp
  >>> a = jnp.ones((2, 256), jnp.float8_e4m3fn)
  >>> sa = jnp.array([[1.0, 2.0], [0.5, 0.5]], jnp.float32)
  >>> b = jnp.ones((1, 256), jnp.float8_e4m3fn)
  >>> sb = jnp.array([[4.0, 1.0]], jnp.float32)
  >>> blockwise_matmul_reference(a, sa, b, sb, out_dtype=jnp.float32)
  Array([[768.],
         [320.]], dtype=float32)
  """
  fn = "blockwise_matmul_reference"
  return checked(a, a_scales, b, b_scales, a_block, b_block, out_dtype, fn,
                  reference)


def checked(a, a_scales, b, b_scales, a_block, b_block, out_dtype, fn, run):
  a, b = shared.check_fp8_pair(a, b, fn)
  a_block = check_block(a_block, "a_block", fn)
  b_block = check_block(b_block, "b_block", fn)
  k = a.shape[1]
  a_scales = check_scales(a_scales, a.shape[0], k, a_block, "a_scales", fn)
  b_scales = check_scales(b_scales, b.shape[0], k, b_block, "b_scales", fn)
  out_dtype = shared.check_out_dtype(out_dtype, fn)
  if 0 in (a.shape[0], b.shape[0], k):
    return jnp.zeros((a.shape[0], b.shape[0]), out_dtype)
  return run(a, a_scales, b, b_scales, out_dtype=out_dtype, a_block=a_block,
             b_block=b_block)
