"""Serving from packed weights: linen and nnx models applied straight from
a packed parameter tree, or from its dequantized copy."""
from __future__ import annotations

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8 import mx
from jaxfp8 import recipes
from jaxfp8._src.recipes import mx_gemm as mx_gemm
from mx_models import data
from mx_models import MLP
from mx_models import NnxMLP


@pytest.fixture(scope="module")
def model_params_x():
  # Both tests serve the same model; initialized once, by one jitted program
  # (linen's init outside jit compiles a program per op), with one jitted
  # apply whose program the float references share.
  model, (x, _) = MLP(), data()
  return model, jax.jit(model.init)(jax.random.key(2), x), x, jax.jit(
      model.apply)


def test_serving_straight_from_the_packed_tree(model_params_x):
  model, params, x, apply = model_params_x
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
    # The references jitted too: op by op, each would compile per op.
    np.testing.assert_allclose(only, apply(plain, x), rtol=1e-5, atol=1e-6)
    with mx_gemm.trace_gemms() as log:
      dyn = jax.jit(lambda p: _served(model, p, x, fmt))(packed)
    assert [e[:2] for e in log] == [("serve", fmt)] * 3
    np.testing.assert_allclose(
        dyn, jax.jit(lambda p: _dyn_on(model, p, x, fmt))(plain),
        rtol=1e-5, atol=1e-6)
  # nnx: merged from the packed state, converted, applied as packed
  m = NnxMLP(nnx.Rngs(0))
  graphdef, state = nnx.split(m)
  served = recipes.nnx_recipe(nnx.merge(graphdef, mx.quantize_params(
      state, "mxfp8_e4m3")), [(".*", None)])
  assert isinstance(served.head.kernel.get_value(), mx.MXArray)
  with mx_gemm.trace_gemms() as log:
    out = nnx.jit(lambda mod: mod(x))(served)
  # Einsum's kernel is dequantized (jnp.einsum takes arrays): a plain GEMM
  assert [e[:2] for e in log] == [("serve", None), ("fwd", None),
                                  ("serve", None)]
  ref = jax.jit(lambda st: nnx.merge(graphdef, st)(x))(
      mx.dequantize_params(mx.quantize_params(state, "mxfp8_e4m3")))
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def _served(model, packed, x, rules):
  with recipes.linen_recipe(rules):
    return model.apply(packed, x)


def _dyn_on(model, params, x, fmt):
  with recipes.linen_recipe(f"f={fmt},d=none,w=none"):
    return model.apply(params, x)


def test_serving_from_packed_weights(model_params_x):
  model, params, x, apply = model_params_x
  ref = apply(params, x)
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
  with recipes.linen_recipe("f=mxfp8,d=none,w=none"):
    return model.apply(mx.dequantize_params(p), x)
