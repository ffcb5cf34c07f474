"""Straight-through gradients: ``mx.fake_quantize`` and ``mx.matmul``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8 import mx
from mx_testing import device_normal


def test_grad_through_quantize_dequantize_is_straight_through():
  x = np.asarray(device_normal(0, (4, 64), 100.0)).copy()
  x[0, 0] = 1e6  # saturates in e4m3 under floor: still passes
  x = jax.device_put(x)
  c = device_normal(1, x.shape)
  for fmt in ["mxfp8_e4m3", "mxfp6_e3m2", "mxfp4_e2m1", "nvfp4", "mxint8"]:
    g = jax.grad(lambda v: (mx.quantize(v, fmt).dequantize() * c).sum())(x)
    np.testing.assert_array_equal(g, c)
  for fmt in ["mxfp8_e4m3", "nvfp4"]:
    g = jax.jit(jax.grad(
        lambda v: (mx.quantize(v, fmt).dequantize("bf16") * c).sum()))(x)
    np.testing.assert_allclose(g, c, rtol=1e-2)
    g = jax.grad(lambda v: (mx.fake_quantize(v, fmt) * c).sum())(x)
    np.testing.assert_array_equal(g, c)
  y = mx.fake_quantize(jax.device_put(np.asarray(x).astype(jnp.bfloat16)),
                       "mxfp4")
  assert y.dtype == jnp.bfloat16
  # views keep the straight-through source
  g = jax.grad(lambda v: mx.quantize(v, "mxfp4").T[32:, 3:].dequantize().sum()
               )(x)
  g = np.asarray(g)  # checked in NumPy: no eager slice programs
  assert g.shape == (4, 64) and g[3, 32:].sum() == 32 and g.sum() == 32


def test_grad_through_matmul():
  a, b = device_normal(0, (4, 64)), device_normal(1, (64, 8))

  def loss(a, b, method):
    qa = mx.quantize(a, "mxfp8_e4m3")
    qb = mx.quantize(b, "mxfp8_e4m3", axis=0)
    return mx.matmul(qa, qb, method=method).sum()

  ga, gb = jax.grad(loss, argnums=(0, 1))(a, b, "dequantize")
  qa = mx.quantize(a, "mxfp8_e4m3").dequantize()
  qb = mx.quantize(b, "mxfp8_e4m3", axis=0).dequantize()
  # References in float64 NumPy (exact sums of 8 and 4 values).
  ones = np.ones((4, 8))
  np.testing.assert_allclose(ga, ones @ np.asarray(qb, np.float64).T,
                             rtol=1e-6)
  np.testing.assert_allclose(gb, np.asarray(qa, np.float64).T @ ones,
                             rtol=1e-6)
  ga2, gb2 = jax.grad(loss, argnums=(0, 1))(a, b, "scaled_dot")
  np.testing.assert_allclose(ga2, ga, rtol=1e-2)
  np.testing.assert_allclose(gb2, gb, rtol=1e-2)
  # a plain operand against packed weights: quantized on the fly
  c = mx.matmul(a, mx.quantize(b, "mxfp4_e2m1", axis=0), method="scaled_dot")
  ref = mx.matmul(mx.quantize(a, "mxfp4_e2m1"),
                  mx.quantize(b, "mxfp4_e2m1", axis=0))
  np.testing.assert_allclose(c, ref, rtol=1e-2, atol=1e-2)
  # fake_quantize crosses a jit boundary
  g = jax.grad(lambda v: jax.jit(mx.fake_quantize, static_argnums=1)(
      v, "mxfp4").sum())(a)
  np.testing.assert_array_equal(g, np.ones(a.shape, np.float32))


def test_a_path_without_gradient_raises():
  # Operands built in NumPy: their values don't matter here.
  e = np.arange(64.0, dtype=np.float32).reshape(2, 32).astype(
      jnp.float8_e4m3fn)
  s = jax.device_put(np.full((2, 1), 127, np.uint8))

  def loss(elements):
    return mx.from_scaled(elements, s, "mxfp8_e4m3").dequantize().sum()

  with pytest.raises(TypeError, match="carries no gradient"):
    jax.grad(loss)(jax.device_put(e))


def test_the_straight_through_source_crosses_transformation_boundaries():
  # Its regression: the source was no pytree child, so an MXArray passed
  # into jit (or through tree_map) under grad lost it and the gradient came
  # out zero, silently.
  a = device_normal(0, (4, 64))
  qb = mx.quantize(device_normal(1, (64, 8)), "mxfp8_e4m3", axis=0)
  c = np.asarray(device_normal(2, (4, 64)))
  ones = np.ones((4, 64), np.float32)

  def grad_of(fn):
    return np.asarray(jax.grad(lambda v: fn(mx.quantize(v, "mxfp8_e4m3")))(a))

  decode_sum = lambda q: (q.dequantize() * c).sum()
  np.testing.assert_array_equal(grad_of(jax.jit(decode_sum)), c)
  np.testing.assert_array_equal(
      grad_of(lambda q: decode_sum(jax.tree_util.tree_map(lambda x: x, q))),
      c)
  np.testing.assert_array_equal(
      grad_of(lambda q: jax.vmap(lambda r: r.dequantize().sum())(q).sum()),
      ones)
  np.testing.assert_array_equal(
      grad_of(lambda q: jax.lax.scan(lambda r, _: (r, None), q, None,
                                     length=2)[0].dequantize().sum()), ones)
  g = grad_of(jax.jit(lambda q: mx.matmul(q, qb).sum()))
  ref = jax.grad(lambda v: mx.matmul(mx.quantize(v, "mxfp8_e4m3"), qb).sum()
                 )(a)
  np.testing.assert_array_equal(g, ref)
  assert np.abs(g).sum() > 0


def test_a_source_made_in_a_staged_body_stays_there():
  a = device_normal(0, (4, 64))
  q_in_jit = jax.jit(lambda v: mx.quantize(v, "mxfp8_e4m3"))
  # Without differentiation it is only codes: no float32 output beside them.
  assert len(jax.tree_util.tree_leaves(q_in_jit(a))) == 2
  # Differentiated, its storage raises where the gradient would be zero.
  with pytest.raises(TypeError, match="left it without its straight-through"):
    jax.grad(lambda v: q_in_jit(v).dequantize().sum())(a)
  # A loop that re-quantizes its carry keeps one carry type.
  q0 = mx.quantize(np.ones((4, 32), np.float32), "mxfp8_e4m3")
  q, _ = jax.lax.scan(
      lambda r, s: (mx.quantize(r.dequantize() * s, "mxfp8_e4m3"), None),
      q0, jnp.asarray([2.0, 3.0]))
  np.testing.assert_array_equal(q.dequantize(), np.full((4, 32), 6.0))
