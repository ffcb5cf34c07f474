"""The recipe core in Flax nnx: a ``Linear`` with ``NnxRecipeDotGeneral``
equals the core ``dot_general`` called directly, bit for bit (NVFP4's keys
from an ``nnx.Rngs`` stream, fresh each call; delayed-scaling state over two
optimizer steps through ``nnx_apply_recipe_state``); ``nnx_recipe`` rules
choose each layer's recipe, route ``Einsum`` and leave the others as they
were."""
from __future__ import annotations

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxfp8 import recipes
from recipe_testing import delayed_reference_step
from recipe_testing import DIMS



def _data():
  k1, k2 = jax.random.split(jax.random.key(0))
  return jax.random.normal(k1, (32, 64)), jax.random.normal(k2, (32, 32))


def _linear(dot):
  return nnx.Linear(64, 32, dot_general=dot, rngs=nnx.Rngs(1))


def _core(layer, x, **kw):
  return recipes.dot_general(x, layer.kernel[...], DIMS, **kw) + layer.bias[...]


def test_linear_equals_the_core_with_a_fresh_key_each_call():
  x, c = _data()
  layer = _linear(recipes.NnxRecipeDotGeneral(
      "nvfp4", rngs=nnx.Rngs(recipe=5)))
  twin = nnx.Rngs(recipe=5)  # the same stream, drawn by hand

  loss = lambda f: lambda m: jnp.sum(f(m) * c)
  core = lambda k: lambda m: _core(m, x, recipe="nvfp4", key=k)

  @nnx.jit  # one compilation for both sides
  def both(m, k1, k2):
    return ((m(x), nnx.grad(loss(lambda m: m(x)))(m)),
            (core(k1)(m), nnx.grad(loss(core(k2)))(m)))

  for _ in range(2):  # two steps: two keys each
    got, want = both(layer, twin.recipe(), twin.recipe())
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
      np.testing.assert_array_equal(a, b)
  with pytest.raises(ValueError, match=r"'nvfp4'.*rngs=nnx.Rngs"):
    recipes.NnxRecipeDotGeneral("nvfp4")


def test_delayed_state_over_two_optimizer_steps():
  x, c = _data()
  model = _linear(recipes.NnxRecipeDotGeneral("fp8_delayed",
                                              history_length=4))
  opt = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)
  diff = nnx.DiffState(0, (nnx.Param, recipes.NnxRecipeState))
  loss = lambda m: jnp.sum(m(x) * c)

  @nnx.jit
  def step(model, opt):
    grads = nnx.grad(loss, argnums=diff)(model)
    opt.update(model, recipes.nnx_apply_recipe_state(model, grads))

  tx = optax.sgd(0.1)
  params = {"kernel": model.kernel[...], "bias": model.bias[...]}
  state = recipes.init_state("fp8_delayed", history_length=4)
  opt_ref = tx.init(params)
  ref_step = delayed_reference_step(tx, x, c)

  dot = model.dot_general
  for _ in range(2):
    step(model, opt)
    params, state, opt_ref = ref_step(params, state, opt_ref)
    for role, name in (("x", "input"), ("w", "kernel"), ("dy", "output_grad")):
      np.testing.assert_array_equal(getattr(dot, f"{name}_amax_history")[...],
                                    state[role].amax_history)
      np.testing.assert_array_equal(getattr(dot, f"{name}_scale")[...],
                                    state[role].scale)
    np.testing.assert_array_equal(model.kernel[...], params["kernel"])
    np.testing.assert_array_equal(model.bias[...], params["bias"])
  assert float(state["x"].amax_history[1]) > 0  # two steps recorded


class Net(nnx.Module):

  def __init__(self, rngs):
    self.hidden = nnx.Linear(64, 64, rngs=rngs)
    self.mix = nnx.Einsum("bi,io->bo", (64, 64), (64,), rngs=rngs)
    self.mid = nnx.LinearGeneral(64, 64, rngs=rngs)
    self.head = nnx.Linear(64, 8, rngs=rngs)

  def __call__(self, x):
    x = nnx.relu(self.hidden(x))
    return self.head(nnx.relu(self.mid(self.mix(x))))


def test_rules_choose_each_layer(monkeypatch):
  from jaxfp8._src.recipes import core  # pylint: disable=g-import-not-at-top
  x, _ = _data()
  fresh = Net(nnx.Rngs(0))
  plain = fresh(x)
  calls, real = [], core.dot_general

  def spy(lhs, rhs, *args, recipe, **kwargs):
    calls.append((recipe.name, lhs.shape, rhs.shape))
    return real(lhs, rhs, *args, recipe=recipe, **kwargs)

  monkeypatch.setattr(core, "dot_general", spy)
  rules = [("head", None), ("mix", "fp8_delayed"), ("hidden", "mxfp8")]
  model = recipes.nnx_recipe(Net(nnx.Rngs(0)), rules)
  assert isinstance(model.hidden.dot_general, recipes.NnxRecipeDotGeneral)
  assert model.head.dot_general is fresh.head.dot_general
  assert model.mid.dot_general is fresh.mid.dot_general
  out = model(x)
  # mid: no rule; head: high precision
  assert sorted(calls) == [("fp8_delayed", (32, 64), (64, 64)),
                           ("mxfp8", (32, 64), (64, 64))]
  assert not np.array_equal(out, plain)
  assert len(nnx.state(model, recipes.NnxRecipeState)["mix"]["einsum_op"][
      "dot"]) == 6  # the einsum's delayed state
  calls.clear()
  same = recipes.nnx_recipe(Net(nnx.Rngs(0)), [("head", None), ("no", "bf16")])
  np.testing.assert_array_equal(same(x), plain)
  assert not calls


def test_bad_rules_and_missing_rngs_are_named():
  with pytest.raises(ValueError, match="`rules` argument to `nnx_recipe`"):
    recipes.nnx_recipe(Net(nnx.Rngs(0)), [("hidden", "fp8_current", 1)])
  with pytest.raises(ValueError, match=r"nnx_recipe.*'hidden'.*rngs="):
    recipes.nnx_recipe(Net(nnx.Rngs(0)), [("hidden", "nvfp4")])
  with pytest.raises(TypeError, match="`rngs` argument to `nnx_recipe`"):
    recipes.nnx_recipe(Net(nnx.Rngs(0)), "nvfp4", rngs=0)
  m = recipes.nnx_recipe(Net(nnx.Rngs(0)), "nvfp4", rngs=nnx.Rngs(recipe=0))
  assert m.head.dot_general.recipe.name == "nvfp4"
