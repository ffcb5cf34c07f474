"""The random Hadamard transform (RHT) of NVFP4 training, and its inverse.

NVFP4 pretraining (arXiv 2509.25149) multiplies both operands of the
weight-gradient GEMM by a random orthogonal matrix along their contracting
axis before quantizing them: outliers are spread over a block, and the
product is unchanged, since ``(Q a) . (Q b) = a . b`` for orthogonal ``Q``.
The matrix is block diagonal with 16x16 blocks

    Q = (1/4) H16 diag(signs)

where ``H16`` is the Sylvester Hadamard matrix (entries +-1, ``H16 H16^T =
16 I``; ``1/4 = 1/sqrt(16)`` makes it orthogonal) and ``signs`` is a vector
of 16 random +-1. The signs are applied first, then ``H16``: Transformer
Engine builds its matrix as ``diag(signs) @ H`` and multiplies row vectors
by it (``x @ (diag(s) H) / 4``), which is ``(1/4) H diag(s) x`` for a column
(``H`` is symmetric); see ``transformer_engine/jax/quantize/hadamard.py``
``get_rht_matrix`` and ``pytorch/custom_recipes/reference_nvfp4.py``
``_build_hadamard_matrix``. TE fixes the signs to one hard-coded vector
(``get_wgrad_sign_vector``, :data:`TE_SIGNS` here); :func:`random_signs`
draws them from a key, as the paper describes.

:func:`rht` applies ``Q`` to every chunk of 16 along the last axis as a fast
Walsh-Hadamard transform: four stages of sums and differences in float32,
then the exact scaling by 1/4, so each output is within a few float32
roundings of the exact value (exact where the stage sums are, e.g. for
small integers). A chunk whose sums could overflow (values from 2^123,
about 1e37) is divided by 16 first and multiplied by 4 after: its outputs
are finite wherever their exact values are. The inverse, ``Q^T = (1/4) diag(signs) H16``, undoes it to
within the same rounding. Values below float32's normal range may be
flushed to zero by XLA on CPU; the transform feeds a 4-bit quantizer, whose
grid lies far above them.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.mx import array as mx_array
from jaxfp8._src.numerics import rounding as rounding_lib
from jaxfp8._src.numerics import validate

SIZE = 16
# Transformer Engine's fixed sign vector (``get_wgrad_sign_vector``).
TE_SIGNS: tuple[int, ...] = (1, 1, 1, -1, 1, -1, -1, -1,
                             -1, -1, -1, 1, -1, 1, -1, -1)


def random_signs(key: jax.Array, n: int = SIZE) -> jax.Array:
  """``n`` random signs, each +1 or -1 with probability 1/2.

  Args:
    key: a PRNG key.
    n: how many (the chunk length of :func:`rht`; 16 for NVFP4).

  Returns:
    float32 array of shape ``(n,)`` holding +1.0 and -1.0.

  Raises:
    TypeError: a bad key or a non-integer ``n``.
    ValueError: ``n`` below 1.

  >>> import jax
  >>> random_signs(jax.random.key(0))  # doctest: +SKIP
  Array([-1., -1.,  1.,  1., -1.,  1.,  1., -1., -1.,  1., -1.,  1., -1.,
         -1., -1., -1.], dtype=float32)
  """
  fn = "random_signs"
  key = validate.check_single_key(key, fn)
  n = validate.check_size(n, "n", fn, minimum=1)
  return jnp.where(jax.random.bernoulli(key, 0.5, (n,)), np.float32(1),
                   np.float32(-1))


def _walsh_hadamard(x, axis: int):
  """``H x`` over ``axis`` (length a power of two, non-negative), Sylvester
  order: H_2n = [[H_n, H_n], [H_n, -H_n]] is a sum and a difference of
  halves. Along a major axis XLA vectorizes the stages along the minor one."""
  n = x.shape[axis]
  lead, trail = x.shape[:axis], x.shape[axis + 1:]
  h = 1
  while h < n:
    y = x.reshape(*lead, n // (2 * h), 2, h, *trail)
    a = lax.index_in_dim(y, 0, axis + 1, keepdims=False)
    b = lax.index_in_dim(y, 1, axis + 1, keepdims=False)
    x = jnp.stack([a + b, a - b], axis=axis + 1).reshape(x.shape)
    h *= 2
  return x


@functools.partial(jax.jit, static_argnums=(2, 3))
def _rht_jit(x, signs, inverse: bool, axis: int):
  n = signs.shape[0]
  chunks = x.reshape(*x.shape[:axis], x.shape[axis] // n, n,
                     *x.shape[axis + 1:])
  signs = signs.reshape((n,) + (1,) * (x.ndim - axis - 1))
  scale = np.float32(1 / np.sqrt(n))  # exact for powers of four (16)
  # A chunk whose sums could overflow (n values up to 2^(127 - log2 n)) is
  # divided by n first, exactly, and multiplied back with the scale: every
  # output finite where the transform's exact value is (an overflowed stage
  # sum would make its whole butterfly Inf or NaN). Elsewhere the bits are
  # those of the plain transform.
  k = n.bit_length() - 1
  big = jnp.max(jnp.abs(chunks), axis=axis + 1, keepdims=True) >= np.float32(
      2.0 ** (127 - k))
  chunks = jnp.where(big, chunks * np.float32(2.0 ** -k), chunks)
  scale = jnp.where(big, np.float32(2.0 ** k / np.sqrt(n)), scale)
  if inverse:
    out = signs * (_walsh_hadamard(chunks, axis + 1) * scale)
  else:
    out = _walsh_hadamard(chunks * signs, axis + 1) * scale
  return out.reshape(x.shape)


def rht(x: Any, signs: Any, *, inverse: bool = False,
        axis: int = -1) -> jax.Array:
  """The random Hadamard transform of every chunk of ``axis`` (the last).

  Each chunk ``v`` of ``len(signs)`` consecutive elements (16 for NVFP4)
  becomes ``(1/4) H16 diag(signs) v``; with ``inverse=True`` it becomes
  ``(1/4) diag(signs) H16 v``, the transpose, which undoes the transform.

  Args:
    x: real array; its ``axis`` is a multiple of ``len(signs)``.
    signs: float32 vector of +-1 (:func:`random_signs`, :data:`TE_SIGNS`)
      whose length is a power of two.
    inverse: apply the inverse (transpose) instead.
    axis: the transformed axis; the same arithmetic along any axis, so
      ``rht(x, s, axis=0)`` is ``rht(x.T, s).T`` bit for bit.

  Returns:
    float32 array of ``x``'s shape.

  Raises:
    TypeError: non-numeric ``x`` or ``signs``, a non-bool ``inverse``.
    ValueError: ``signs`` not a vector of power-of-two length, an ``axis``
      out of range or whose length is not a multiple of it.

  >>> import jax.numpy as jnp
  >>> x = jnp.arange(16.0)
  >>> y = rht(x, jnp.ones(16))
  >>> y[:4]
  Array([30., -2., -4.,  0.], dtype=float32)
  >>> rht(y, jnp.ones(16), inverse=True)[:4]
  Array([0., 1., 2., 3.], dtype=float32)
  """
  fn = "rht"
  inverse = validate.check_bool(inverse, "inverse", fn)
  x = rounding_lib.to_float32(x, fn=fn)
  signs = rounding_lib.to_float32(signs, fn=fn, arg="signs")
  n = signs.shape[0] if signs.ndim == 1 else 0
  if signs.ndim != 1 or n & (n - 1) or n < 1:
    raise ValueError(f"`signs` argument to `{fn}` must be a vector whose "
                     f"length is a power of two (16 for NVFP4), got shape "
                     f"{signs.shape}")
  if x.ndim == 0:
    raise ValueError(f"`x` argument to `{fn}` must have an axis that is a "
                     f"multiple of {n}, got a scalar")
  axis = mx_array.check_axis(axis, x.ndim, fn=fn) % x.ndim
  if x.shape[axis] % n:
    raise ValueError(f"`x` argument to `{fn}` must have an axis {axis} that "
                     f"is a multiple of {n}, got shape {x.shape}")
  return _rht_jit(x, signs, inverse, axis)


__all__ = ["SIZE", "TE_SIGNS", "random_signs", "rht"]
