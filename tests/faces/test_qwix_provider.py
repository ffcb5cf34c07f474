"""jaxfp8's recipes through Qwix: ``qwix.quantize_model(model,
QwixRecipeProvider(rules))`` trains an unchanged Flax model with the numbers
``linen_recipe`` / ``nnx_recipe`` give it (dense and grouped GEMMs, delayed
state, keys), and leaves what no rule names to lax."""
from __future__ import annotations

from flax import linen as nn
from flax import nnx
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8 import recipes

qwix = pytest.importorskip("qwix")

G = 4
SIZES = jnp.array([5, 0, 17, 10], jnp.int32)


class Model(nn.Module):
  """A Dense layer, then two grouped GEMMs (an MoE FFN), then a head."""

  @nn.compact
  def __call__(self, x):
    x = nn.Dense(32, name="inp")(x)
    w1 = self.param("w1", nn.initializers.normal(0.3), (G, 32, 16))
    w2 = self.param("w2", nn.initializers.normal(0.3), (G, 16, 32))
    x = lax.ragged_dot(jax.nn.gelu(lax.ragged_dot(x, w1, SIZES)), w2, SIZES)
    return nn.Dense(8, name="head")(x)


def _x():
  return jax.random.normal(jax.random.key(1), (32, 64))


def _train(model, context, steps=3):
  """Three SGD steps; the delayed state replaced by its gradient."""
  x, y = _x(), jnp.ones((32, 8))
  rngs = {"params": jax.random.key(0), "recipe": jax.random.key(2)}
  with context():
    variables = model.init(rngs, x)

  @jax.jit
  def step(variables, key):
    def loss(v):
      with context():
        return jnp.mean((model.apply(v, x, rngs={"recipe": key}) - y) ** 2)
    value, g = jax.value_and_grad(loss)(variables)
    new = dict(variables, params=jax.tree.map(lambda p, d: p - 0.1 * d,
                                              variables["params"],
                                              g["params"]))
    if recipes.OVERWRITE_WITH_GRADIENT in g:
      new[recipes.OVERWRITE_WITH_GRADIENT] = g[recipes.OVERWRITE_WITH_GRADIENT]
    return new, value

  losses = []
  for i in range(steps):
    variables, value = step(variables, jax.random.fold_in(jax.random.key(3),
                                                          i))
    losses.append(float(value))
  return variables, losses


@pytest.mark.parametrize("name", ["fp8_delayed", "nvfp4", "mxfp8"])
def test_linen_model_trains_as_under_linen_recipe(name):
  provider = recipes.QwixRecipeProvider([
      recipes.QwixRecipeRule(module_path="head", recipe=None),
      recipes.QwixRecipeRule(module_path=".*", recipe=name)])
  quantized = qwix.quantize_model(Model(), provider)
  got, got_losses = _train(quantized, _nothing)
  want, want_losses = _train(
      Model(), lambda: recipes.linen_recipe([("head", None), (".*", name)]))
  assert got_losses == want_losses, (got_losses, want_losses)
  for a, b in zip(jax.tree.leaves(got["params"]),
                  jax.tree.leaves(want["params"])):
    np.testing.assert_array_equal(a, b)
  # The same state, under Qwix's names (op ids) rather than the face's.
  got_state = got.get(recipes.OVERWRITE_WITH_GRADIENT, {})
  want_state = want.get(recipes.OVERWRITE_WITH_GRADIENT, {})
  assert sorted(np.concatenate([np.ravel(v) for v in jax.tree.leaves(
      got_state)] or [[]]).tolist()) == sorted(np.concatenate(
          [np.ravel(v) for v in jax.tree.leaves(want_state)] or [[]]).tolist())
  if name == "fp8_delayed":
    assert got_state["ragged_dot0_kernel_scale"].shape == (G,)
    assert "dot_general0_input_scale" in got_state["inp"]
    assert "head" not in got_state


class _Nothing:
  def __enter__(self):
    return self

  def __exit__(self, *exc):
    return False


def _nothing():
  return _Nothing()


class NnxModel(nnx.Module):

  def __init__(self, rngs):
    self.inp = nnx.Linear(64, 32, rngs=rngs)
    self.head = nnx.Linear(32, 8, rngs=rngs)

  def __call__(self, x):
    return self.head(jax.nn.gelu(self.inp(x)))


def test_nnx_model_matches_nnx_recipe_with_its_state():
  x = _x()
  provider = recipes.QwixRecipeProvider(
      [recipes.QwixRecipeRule(recipe="fp8_delayed")])
  quantized = qwix.quantize_model(NnxModel(nnx.Rngs(0)), provider, x)
  plain = recipes.nnx_recipe(NnxModel(nnx.Rngs(0)), "fp8_delayed")

  def grads(model):
    graphdef, params, state, rest = nnx.split(model, nnx.Param,
                                              recipes.NnxRecipeState, ...)
    loss = lambda p, s: (nnx.merge(graphdef, p, s, rest)(x) ** 2).sum()
    return jax.grad(loss, (0, 1))(params, state)

  (gp, gs), (wp, ws) = grads(quantized), grads(plain)
  for a, b in zip(jax.tree.leaves(gp), jax.tree.leaves(wp)):
    np.testing.assert_array_equal(a, b)
  # Delayed state in NnxRecipeState variables, its gradient the next state.
  assert sorted(np.ravel(v).tolist() for v in jax.tree.leaves(gs)) == sorted(
      np.ravel(v).tolist() for v in jax.tree.leaves(ws))


def test_rules_are_checked_and_unmatched_ops_stay_lax():
  with pytest.raises(TypeError, match="`rules` argument to "
                                      "`QwixRecipeProvider` must hold "
                                      "QwixRecipeRule, got QtRule"):
    recipes.QwixRecipeProvider([qwix.QtRule(weight_qtype="int8")])
  with pytest.raises(ValueError, match="nope"):
    recipes.QwixRecipeProvider([recipes.QwixRecipeRule(recipe="nope")])
  provider = recipes.QwixRecipeProvider([
      recipes.QwixRecipeRule(module_path="inp", recipe="fp8_current")])
  quantized = qwix.quantize_model(Model(), provider)
  variables = Model().init(jax.random.key(0), _x())
  with recipes.linen_recipe([("inp", "fp8_current"), (".*", None)]):
    want = Model().apply(variables, _x())
  np.testing.assert_array_equal(quantized.apply(variables, _x()), want)
  assert not np.array_equal(Model().apply(variables, _x()), want)
