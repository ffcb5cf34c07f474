"""The random Hadamard transform against a float64 reference: forward,
inverse, orthogonality, TE's sign convention, gradients."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8._src.mx import hadamard

TE_SIGNS = np.array(hadamard.TE_SIGNS, np.float32)


def sylvester(n):
  h = np.ones((1, 1))
  while h.shape[0] < n:
    h = np.block([[h, h], [h, -h]])
  return h


def reference(x, signs, inverse=False):
  """float64: (1/4) H diag(s) v per chunk v (the transpose for inverse)."""
  n = len(signs)
  q = sylvester(n) @ np.diag(np.asarray(signs, np.float64)) / np.sqrt(n)
  chunks = np.asarray(x, np.float64).reshape(*np.shape(x)[:-1], -1, n)
  out = chunks @ (q if inverse else q.T)   # rows: v @ Q^T = (Q v)^T
  return out.reshape(np.shape(x))


def _chunk_l1(x, n=16):
  a = np.abs(np.asarray(x, np.float64)).reshape(*np.shape(x)[:-1], -1, n)
  return np.repeat(a.sum(-1), n, -1).reshape(np.shape(x))


def test_te_convention():
  """TE multiplies rows by diag(s) @ H / 4: signs first, then H."""
  rng = np.random.default_rng(0)
  x = rng.integers(-64, 64, (3, 32)).astype(np.float32)
  te_matrix = np.diag(TE_SIGNS.astype(np.float64)) @ sylvester(16) / 4
  want = (x.reshape(3, 2, 16) @ te_matrix).reshape(3, 32)
  np.testing.assert_array_equal(np.asarray(hadamard.rht(x, TE_SIGNS)), want)


@pytest.mark.parametrize("inverse", [False, True])
def test_against_float64(inverse):
  rng = np.random.default_rng(1)
  signs = np.asarray(hadamard.random_signs(jax.random.key(3)))
  x = (rng.standard_normal((4, 64))
       * 2.0 ** rng.integers(-20, 20, (4, 64))).astype(np.float32)
  got = np.asarray(hadamard.rht(x, signs, inverse=inverse), np.float64)
  want = reference(x, signs, inverse)
  # Four stages of float32 sums, each rounding within 2^-24 of a partial sum
  # bounded by the chunk's l1 norm; the errors add through the later stages.
  assert (np.abs(got - want) <= 2.0**-22 * _chunk_l1(x)).all()
  ints = rng.integers(-1000, 1000, (4, 64)).astype(np.float32)
  np.testing.assert_array_equal(
      np.asarray(hadamard.rht(ints, signs, inverse=inverse)),
      reference(ints, signs, inverse))   # exact where the sums are


def test_inverse_recovers_the_input():
  rng = np.random.default_rng(2)
  x = rng.standard_normal((8, 48)).astype(np.float32)
  y = hadamard.rht(x, TE_SIGNS)
  back = np.asarray(hadamard.rht(y, TE_SIGNS, inverse=True), np.float64)
  assert (np.abs(back - x) <= 2.0**-21 * _chunk_l1(x)).all()
  ints = rng.integers(-2**10, 2**10, (8, 48)).astype(np.float32)
  np.testing.assert_array_equal(np.asarray(hadamard.rht(
      hadamard.rht(ints, TE_SIGNS), TE_SIGNS, inverse=True)), ints)


def test_orthogonal():
  q = np.asarray(hadamard.rht(np.eye(16, dtype=np.float32), TE_SIGNS))
  np.testing.assert_array_equal(q @ q.T, np.eye(16))   # entries +-1/4: exact
  rng = np.random.default_rng(3)
  a, b = rng.standard_normal((2, 5, 256)).astype(np.float32)
  ra, rb = (np.asarray(hadamard.rht(v, TE_SIGNS), np.float64) for v in (a, b))
  want = (a.astype(np.float64) * b).sum(-1)
  norm = np.linalg.norm(a.astype(np.float64), axis=-1) * np.linalg.norm(
      b.astype(np.float64), axis=-1)
  assert (np.abs((ra * rb).sum(-1) - want) <= 1e-6 * norm).all()


def test_random_signs():
  s = np.asarray(hadamard.random_signs(jax.random.key(0)))
  assert s.shape == (16,) and s.dtype == np.float32
  assert set(np.unique(s)) <= {-1.0, 1.0}
  np.testing.assert_array_equal(
      s, np.asarray(hadamard.random_signs(jax.random.key(0))))
  many = np.asarray(hadamard.random_signs(jax.random.key(1), 4096))
  assert many.shape == (4096,) and abs(many.mean()) < 5 / 64   # 5 sigma
  assert (many == 1).any() and (many == -1).any()


def test_gradient_is_the_inverse():
  """rht is linear and orthogonal: its VJP is the inverse transform."""
  w = np.random.default_rng(4).standard_normal((2, 32)).astype(np.float32)
  g = jax.grad(lambda x: jnp.sum(hadamard.rht(x, TE_SIGNS) * w))(
      jnp.zeros((2, 32)))
  np.testing.assert_allclose(
      np.asarray(g), np.asarray(hadamard.rht(w, TE_SIGNS, inverse=True)),
      rtol=0, atol=1e-6)


def test_bad_arguments_raise():
  with pytest.raises(ValueError, match="multiple of 16"):
    hadamard.rht(np.ones((2, 24), np.float32), TE_SIGNS)
  with pytest.raises(ValueError, match="power of two"):
    hadamard.rht(np.ones((2, 24), np.float32), np.ones(12, np.float32))
  with pytest.raises(ValueError, match="signs"):
    hadamard.rht(np.ones((2, 16), np.float32), np.ones((4, 4), np.float32))
  with pytest.raises(TypeError, match="inverse"):
    hadamard.rht(np.ones((2, 16), np.float32), TE_SIGNS, inverse="yes")
  with pytest.raises(TypeError, match="key"):
    hadamard.random_signs(3)


@pytest.mark.parametrize("inverse", [False, True])
def test_the_transform_along_a_major_axis_is_the_transposed_one(inverse):
  # rht(x, axis=0) is what the recipes apply to an operand contracted along
  # its first axis, in place of rht of its transpose: the same bits.
  x = jax.random.normal(jax.random.key(5), (48, 32, 3))
  s = hadamard.random_signs(jax.random.key(6))
  for axis in (0, 1):
    got = hadamard.rht(x, s, inverse=inverse, axis=axis)
    want = jnp.moveaxis(hadamard.rht(jnp.moveaxis(x, axis, -1), s,
                                     inverse=inverse), -1, axis)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32),
                                  np.asarray(want).view(np.uint32))
  with pytest.raises(ValueError, match="axis 2 .* multiple of 16"):
    hadamard.rht(x, s, axis=2)
