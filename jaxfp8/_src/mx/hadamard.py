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
small integers). The inverse, ``Q^T = (1/4) diag(signs) H16``, undoes it to
within the same rounding. Values below float32's normal range may be
flushed to zero by XLA on CPU; the transform feeds a 4-bit quantizer, whose
grid lies far above them.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

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


def _walsh_hadamard(x):
  """``H x`` over the last axis (length a power of two), Sylvester order:
  H_2n = [[H_n, H_n], [H_n, -H_n]] is a sum and a difference of halves."""
  n = x.shape[-1]
  lead = x.shape[:-1]
  h = 1
  while h < n:
    y = x.reshape(*lead, n // (2 * h), 2, h)
    a, b = y[..., 0, :], y[..., 1, :]
    x = jnp.stack([a + b, a - b], axis=-2).reshape(*lead, n)
    h *= 2
  return x


@functools.partial(jax.jit, static_argnums=(2,))
def _rht_jit(x, signs, inverse: bool):
  n = signs.shape[0]
  chunks = x.reshape(*x.shape[:-1], x.shape[-1] // n, n)
  scale = np.float32(1 / np.sqrt(n))  # exact for powers of four (16)
  if inverse:
    out = signs * (_walsh_hadamard(chunks) * scale)
  else:
    out = _walsh_hadamard(chunks * signs) * scale
  return out.reshape(x.shape)


def rht(x: Any, signs: Any, *, inverse: bool = False) -> jax.Array:
  """The random Hadamard transform of every chunk of the last axis.

  Each chunk ``v`` of ``len(signs)`` consecutive elements (16 for NVFP4)
  becomes ``(1/4) H16 diag(signs) v``; with ``inverse=True`` it becomes
  ``(1/4) diag(signs) H16 v``, the transpose, which undoes the transform.

  Args:
    x: real array; its last axis is a multiple of ``len(signs)``.
    signs: float32 vector of +-1 (:func:`random_signs`, :data:`TE_SIGNS`)
      whose length is a power of two.
    inverse: apply the inverse (transpose) instead.

  Returns:
    float32 array of ``x``'s shape.

  Raises:
    TypeError: non-numeric ``x`` or ``signs``, a non-bool ``inverse``.
    ValueError: ``signs`` not a vector of power-of-two length, a last axis of
      ``x`` that is not a multiple of it.

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
  if x.ndim == 0 or x.shape[-1] % n:
    raise ValueError(f"`x` argument to `{fn}` must have a last axis that is a "
                     f"multiple of {n}, got shape {x.shape}")
  return _rht_jit(x, signs, inverse)


__all__ = ["SIZE", "TE_SIGNS", "random_signs", "rht"]
