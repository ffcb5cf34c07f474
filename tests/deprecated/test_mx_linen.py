"""MX training in Flax linen: one jitted step through the one-call conversion
(``linen_mx``), rules leaving chosen layers in high precision, the
``MXDotGeneral`` module and ``Einsum`` layers."""
from __future__ import annotations

import functools

from flax import linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfp8 import mx
from jaxfp8._src import compat
from jaxfp8._src.recipes import mx_gemm as mx_gemm
from mx_models import data
from mx_models import MLP
import pytest

# These tests exercise the deprecated names themselves.
pytestmark = pytest.mark.filterwarnings(
    "ignore:jaxfp8.mx.* is deprecated:DeprecationWarning")


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
  model, (x, y) = MLP(), data()
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
  x, _ = data()
  params = model.init(jax.random.key(0), x)
  with mx_gemm.trace_gemms() as log:
    g = jax.grad(lambda p: model.apply(p, x).sum())(params)
  assert [e[:2] for e in log] == [("fwd", "mxfp4_e2m1"),
                                  ("dgrad", "mxfp4_e2m1"),
                                  ("wgrad", "mxfp4_e2m1")]
  assert np.any(g["params"]["kernel"] != 0)


class EinsumNet(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = nn.Einsum((32, 64), "bi,io->bo", name="mix")(x)
    return nn.Dense(8, name="head")(nn.relu(x))


def test_linen_einsum_step_through_the_conversion():
  model, (x, y) = EinsumNet(), data()
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
