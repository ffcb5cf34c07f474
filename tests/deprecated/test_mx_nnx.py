"""MX training in Flax nnx: one jitted step through the graph surgery of
``nnx_mx``, rules leaving chosen layers in high precision, and stochastic
gradient rounding with a fresh key per step."""
from __future__ import annotations

from flax import nnx
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxfp8 import mx
from jaxfp8._src.recipes import mx_gemm as mx_gemm
from mx_models import data
from mx_models import NnxMLP

# These tests exercise the deprecated names themselves.
pytestmark = pytest.mark.filterwarnings(
    "ignore:jaxfp8.mx.* is deprecated:DeprecationWarning")


def test_nnx_step_graph_surgery():
  x, y = data()
  model = mx.nnx_mx(NnxMLP(nnx.Rngs(0)), [("head", None), (".*", "mxfp8")])
  assert isinstance(model.hidden.dot_general, mx.NnxMXDotGeneral)
  assert not isinstance(model.head.dot_general, mx.NnxMXDotGeneral)
  optimizer = nnx.Optimizer(model, optax.adam(1e-2), wrt=nnx.Param)

  @nnx.jit
  def step(model, optimizer):
    def loss(m):
      return jnp.mean((m(x) - y) ** 2)
    l, g = nnx.value_and_grad(loss)(model)
    optimizer.update(model, g)
    return l

  with mx_gemm.trace_gemms() as log:
    l0 = step(model, optimizer)
  assert sorted({e[:3] for e in log}) == sorted({
      ("fwd", "mxfp8_e4m3", (16, 32)), ("dgrad", "mxfp8_e4m3", (16, 64)),
      ("wgrad", "mxfp8_e4m3", (16, 32)), ("fwd", "mxfp8_e4m3", (16, 64)),
      ("wgrad", "mxfp8_e4m3", (16, 64))})
  assert all((64, 8) not in e for e in log)  # the head stays plain
  assert step(model, optimizer) < l0


def test_nnx_stochastic_rounding_takes_a_fresh_key_each_step():
  x, _ = data()

  def grads_of_two_steps(seed):
    model = mx.nnx_mx(NnxMLP(nnx.Rngs(0)), "sr=1", rngs=nnx.Rngs(mx=seed))
    assert isinstance(model.hidden.dot_general, mx.NnxStochasticMXDotGeneral)
    grad = nnx.jit(nnx.grad(lambda m: jnp.sum(m(x) * 0.37)))
    return grad(model), grad(model)  # the same weights, two steps

  a1, a2 = grads_of_two_steps(5)
  b1, _ = grads_of_two_steps(5)
  c1, _ = grads_of_two_steps(6)
  k = lambda g: np.asarray(g["hidden"]["kernel"].get_value())
  assert not np.array_equal(k(a1), k(a2))  # a fresh key per step
  np.testing.assert_array_equal(k(a1), k(b1))  # the seed reproduces
  assert not np.array_equal(k(a1), k(c1))
  e = lambda g: np.asarray(g["mix"]["kernel"].get_value())
  assert not np.array_equal(e(a1), e(a2))  # Einsum too
  with pytest.raises(ValueError, match="rngs=nnx.Rngs"):
    mx.nnx_mx(NnxMLP(nnx.Rngs(0)), "sr=1")
  with pytest.raises(ValueError, match="NnxStochasticMXDotGeneral"):
    mx.NnxMXDotGeneral("sr=1")
