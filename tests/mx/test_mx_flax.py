"""MX training in Flax: one jitted step through the one-call conversion
(linen and nnx), rules leaving chosen layers in high precision, and serving
from packed weights."""
from __future__ import annotations

import functools

from flax import linen as nn
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxfp8 import mx
from jaxfp8._src import compat
from jaxfp8._src.mx import gemm as mx_gemm


class MLP(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(64, name="hidden")(x))
    x = nn.relu(nn.DenseGeneral(64, name="mid")(x))
    return nn.Dense(8, name="head")(x)


def _data():
  x = jax.random.normal(jax.random.key(0), (16, 32))
  y = jax.random.normal(jax.random.key(1), (16, 8))
  return x, y


def _linen_train_step(model, rules, x, y):
  """(opt, step): one jitted Adam step of a linen model under linen_mx(rules);
  step(params, state) -> (params, state, loss, grads)."""
  opt = optax.adam(1e-2)

  @jax.jit
  def step(params, state):
    def loss(p):
      with mx.linen_mx(rules):
        return jnp.mean((model.apply(p, x) - y) ** 2)
    l, g = jax.value_and_grad(loss)(params)
    u, state = opt.update(g, state)
    return optax.apply_updates(params, u), state, l, g

  return opt, step


def test_linen_step_rules_choose_the_mx_gemms():
  model, (x, y) = MLP(), _data()
  params = model.init(jax.random.key(2), x)
  rules = [("head", None), ("mid", "mxfp8_hp_wgrad"), (".*", "mxfp8")]
  opt, step = _linen_train_step(model, rules, x, y)
  state = opt.init(params)
  with mx_gemm.trace_gemms() as log:
    params2, _, l0, _ = step(params, state)
  ran = {(gemm, fmt, lhs, rhs) for gemm, fmt, lhs, rhs in log}
  assert ran == {
      ("fwd", "mxfp8_e4m3", (16, 32), (32, 64)),
      ("dgrad", "mxfp8_e4m3", (16, 64), (32, 64)),
      ("wgrad", "mxfp8_e4m3", (16, 32), (16, 64)),
      ("fwd", "mxfp8_e4m3", (16, 64), (64, 64)),
      ("dgrad", "mxfp8_e4m3", (16, 64), (64, 64)),
      ("wgrad", None, (16, 64), (16, 64)),
  }  # the head is a plain lax.dot_general: no entry
  _, _, l1, _ = step(params2, state)
  assert np.isfinite(l0) and l1 < l0
  grads = jax.grad(lambda p: jnp.mean(model.apply(p, x) ** 2))(params)
  assert all(np.any(g != 0) for g in jax.tree_util.tree_leaves(grads))


def test_linen_dot_general_cls():
  model = nn.Dense(8, dot_general_cls=functools.partial(
      mx.MXDotGeneral, recipe="mxfp4"))
  x, _ = _data()
  params = model.init(jax.random.key(0), x)
  with mx_gemm.trace_gemms() as log:
    g = jax.grad(lambda p: model.apply(p, x).sum())(params)
  assert [e[:2] for e in log] == [("fwd", "mxfp4_e2m1"),
                                  ("dgrad", "mxfp4_e2m1"),
                                  ("wgrad", "mxfp4_e2m1")]
  assert np.any(g["params"]["kernel"] != 0)


class NnxMLP(nnx.Module):

  def __init__(self, rngs):
    self.hidden = nnx.Linear(32, 64, rngs=rngs)
    self.mix = nnx.Einsum("bi,io->bo", (64, 64), (64,), rngs=rngs)
    self.head = nnx.Linear(64, 8, rngs=rngs)

  def __call__(self, x):
    return self.head(nnx.relu(self.mix(nnx.relu(self.hidden(x)))))


def test_nnx_step_graph_surgery():
  x, y = _data()
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


class EinsumNet(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = nn.Einsum((32, 64), "bi,io->bo", name="mix")(x)
    return nn.Dense(8, name="head")(nn.relu(x))


def test_linen_einsum_step_through_the_conversion():
  model, (x, y) = EinsumNet(), _data()
  params = model.init(jax.random.key(2), x)
  opt, step = _linen_train_step(model, [("head", None), ("mix", "mxfp8")],
                                 x, y)
  state = opt.init(params)

  with mx_gemm.trace_gemms() as log:
    params2, _, l0, g = step(params, state)
  # jnp.einsum contracts (kernel, inputs): the MX GEMMs are the einsum's
  assert sorted({e[:2] for e in log}) == [("dgrad", "mxfp8_e4m3"),
                                        ("fwd", "mxfp8_e4m3"),
                                        ("wgrad", "mxfp8_e4m3")]
  assert all((64, 8) not in e[2:] for e in log)  # the head stays plain
  assert np.any(g["params"]["mix"]["kernel"] != 0)
  assert np.any(g["params"]["mix"]["bias"] != 0)
  # the layer's forward: the product of its quantized operands, plus bias
  layer, p = nn.Einsum((32, 64), "bi,io->bo"), params["params"]["mix"]
  with mx.linen_mx("mxfp8"):
    out = layer.apply({"params": p}, x)
  q = lambda v, axis: np.asarray(mx.quantize(
      v, "mxfp8_e4m3", axis=axis, scale_mode="rceil").dequantize(), np.float64)
  ref = q(x, 1) @ q(p["kernel"], 0) + np.asarray(p["bias"], np.float64)
  np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)
  plain = model.apply(params, x)
  with mx.linen_mx([(".*", None)]):
    np.testing.assert_array_equal(model.apply(params, x), plain)
  _, _, l1, _ = step(params2, state)
  assert l1 < l0
  # the einsum hook itself (a private JAX keyword, held in compat)
  calls = []

  def dot(a, b, dims, precision=None, preferred_element_type=None, **kw):
    calls.append(dims)
    return jax.lax.dot_general(a, b, dims, precision=precision,
                               preferred_element_type=preferred_element_type)

  out = compat.einsum("bi,io->bo", x, jnp.ones((32, 3)), dot_general=dot)
  assert calls and out.shape == (16, 3)


def test_nnx_stochastic_rounding_takes_a_fresh_key_each_step():
  x, _ = _data()

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


def test_serving_straight_from_the_packed_tree():
  model, (x, _) = MLP(), _data()
  params = model.init(jax.random.key(2), x)
  for fmt, per_weight in [("mxfp4_e2m1", 17 / 32), ("mxfp8_e4m3", 33 / 32)]:
    packed = mx.quantize_params(params, fmt)
    kernels = [v["kernel"] for v in packed["params"].values()]
    assert all(isinstance(k, mx.MXArray) for k in kernels)
    assert sum(k.nbytes for k in kernels) == per_weight * sum(
        k.size for k in kernels)
    plain = mx.dequantize_params(packed)
    with mx_gemm.trace_gemms() as log:
      only = jax.jit(lambda p: _served(model, p, x, [(".*", None)]))(packed)
    assert [e[:2] for e in log] == [("serve", None)] * 3
    np.testing.assert_allclose(only, model.apply(plain, x), rtol=1e-5,
                               atol=1e-6)
    with mx_gemm.trace_gemms() as log:
      dyn = jax.jit(lambda p: _served(model, p, x, fmt))(packed)
    assert [e[:2] for e in log] == [("serve", fmt)] * 3
    np.testing.assert_allclose(dyn, _dyn_on(model, plain, x, fmt),
                               rtol=1e-5, atol=1e-6)
  # nnx: merged from the packed state, converted, applied as packed
  m = NnxMLP(nnx.Rngs(0))
  graphdef, state = nnx.split(m)
  served = mx.nnx_mx(nnx.merge(graphdef, mx.quantize_params(
      state, "mxfp8_e4m3")), [(".*", None)])
  assert isinstance(served.head.kernel.get_value(), mx.MXArray)
  with mx_gemm.trace_gemms() as log:
    out = nnx.jit(lambda mod: mod(x))(served)
  # Einsum's kernel is dequantized (jnp.einsum takes arrays): a plain GEMM
  assert [e[:2] for e in log] == [("serve", None), ("fwd", None),
                                  ("serve", None)]
  ref = nnx.merge(graphdef, mx.dequantize_params(mx.quantize_params(
      state, "mxfp8_e4m3")))(x)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def _served(model, packed, x, rules):
  with mx.linen_mx(rules):
    return model.apply(packed, x)


def _dyn_on(model, params, x, fmt):
  with mx.linen_mx(f"f={fmt},d=none,w=none"):
    return model.apply(params, x)


def test_serving_from_packed_weights():
  model, (x, _) = MLP(), _data()
  params = model.init(jax.random.key(2), x)
  ref = model.apply(params, x)
  packed = mx.quantize_params(params, "mxfp4_e2m1")
  kernels = [v["kernel"] for v in packed["params"].values()]
  assert all(isinstance(k, mx.MXArray) for k in kernels)
  n = sum(k.size for k in kernels)
  assert sum(k.nbytes for k in kernels) == n // 2 + n // 32  # 0.53 B/weight
  bf16 = sum(k.size * 2 for k in kernels)
  assert sum(k.nbytes for k in kernels) / bf16 < 0.27
  serve = jax.jit(lambda p, x: model.apply(mx.dequantize_params(p), x))
  out = serve(packed, x)
  rel = float(jnp.linalg.norm(out - ref) / jnp.linalg.norm(ref))
  assert 0 < rel < 0.3
  # dynamic MX activations on top: the activations quantized too
  with mx_gemm.trace_gemms() as log:
    out2 = jax.jit(lambda p, x: _dyn(model, p, x))(packed, x)
  assert [e[:2] for e in log] == [("fwd", "mxfp8_e4m3")] * 3
  assert float(jnp.linalg.norm(out2 - out) / jnp.linalg.norm(out)) < 0.1
  # nnx: the same from packed state
  m = NnxMLP(nnx.Rngs(0))
  graphdef, state = nnx.split(m)
  packed_state = mx.quantize_params(state, "mxfp8_e4m3")
  assert isinstance(packed_state["head"]["kernel"].get_value(), mx.MXArray)
  assert mx.packed_bytes(packed_state) < mx.packed_bytes(state) * 0.3
  served = nnx.merge(graphdef, mx.dequantize_params(packed_state))
  np.testing.assert_allclose(served(x), m(x), rtol=0.1, atol=0.05)


def _dyn(model, p, x):
  with mx.linen_mx("f=mxfp8,d=none,w=none"):
    return model.apply(mx.dequantize_params(p), x)
