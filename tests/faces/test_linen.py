"""The recipe core in Flax linen: a ``Dense`` with ``RecipeDotGeneral`` equals
the core ``dot_general`` called directly, bit for bit (outputs, gradients,
delayed-scaling state over two ``TrainState`` steps, SR/RHT keys from the
``"recipe"`` stream); ``linen_recipe`` rules choose each layer's recipe,
route ``Einsum`` and leave the others exactly as they were."""
from __future__ import annotations

import functools

from flax import linen as nn
from flax.training import train_state
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxfp8 import recipes
from jaxfp8._src import compat
from recipe_testing import delayed_reference_step
from recipe_testing import DIMS

OWG = "_overwrite_with_gradient"
# One per kind: per tensor (current), MX, fp8 blockwise, NVFP4 (SR + RHT).
STATELESS = ["fp8_current", "mxfp8", "fp8_blockwise", "nvfp4"]


def _data():
  k1, k2 = jax.random.split(jax.random.key(0))
  x = jax.random.normal(k1, (32, 64))
  c = jax.random.normal(k2, (32, 32))  # the loss's cotangent
  return x, c


def _key(name, seed=7):
  """The key linen's ``make_rng("recipe")`` gives a module named ``name``
  directly under the top-level module (``RecipeDotGeneral_0`` in a Dense)."""

  class Probe(nn.Module):

    @nn.compact
    def __call__(self):
      return self.make_rng("recipe")

  class Top(nn.Module):

    @nn.compact
    def __call__(self):
      return Probe(name=name)()

  return Top().apply({}, rngs={"recipe": jax.random.key(seed)})


def _dense(recipe, **kw):
  return nn.Dense(32, dot_general_cls=functools.partial(
      recipes.RecipeDotGeneral, recipe=recipe, **kw))


@pytest.mark.parametrize("name", STATELESS)
def test_dense_equals_the_core(name):
  x, c = _data()
  model = _dense(name)
  # Jitted: init runs the layer, op by op a program per operation (jitted,
  # the unused forward is dropped).
  variables = jax.jit(model.init)(jax.random.key(1), x)
  assert set(variables) == {"params"}
  needs_key = recipes.get_recipe(name).needs_key
  key = _key("RecipeDotGeneral_0") if needs_key else None

  def core(p, x):
    return recipes.dot_general(x, p["params"]["kernel"], DIMS, recipe=name,
                               key=key) + p["params"]["bias"]

  @jax.jit  # one compilation for both sides
  def both(v, x):
    apply = lambda v, x: model.apply(v, x, rngs={"recipe": jax.random.key(7)})
    out = []
    for f in (apply, core):
      y, vjp = jax.vjp(f, v, x)
      out.append((y, *vjp(c)))
    return out

  got, want = both(variables, x)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_array_equal(a, b)
  assert np.any(np.asarray(got[1]["params"]["kernel"]) != 0)


def test_keys_come_from_the_recipe_stream():
  x, c = _data()
  model = _dense("nvfp4")
  variables = jax.jit(model.init)(jax.random.key(1), x)  # not op by op
  grad = jax.jit(lambda v, seed: jax.grad(lambda v: jnp.sum(model.apply(
      v, x, rngs={"recipe": jax.random.key(seed)}) * c))(v)["params"][
          "kernel"])
  a, b = grad(variables, 7), grad(variables, 8)
  assert not np.array_equal(a, b)  # the stream's seed rounds the gradient
  np.testing.assert_array_equal(a, grad(variables, 7))
  with pytest.raises(ValueError, match=r"'nvfp4'.*rngs=\{'recipe': key\}"):
    model.apply(variables, x)


def test_delayed_state_follows_train_state_for_two_steps():
  x, c = _data()
  model = _dense("fp8_delayed", history_length=4)
  variables = jax.jit(model.init)(jax.random.key(1), x)  # not op by op
  names = {f"{r}_{f}" for r in ("input", "kernel", "output_grad")
           for f in ("amax_history", "scale")}
  assert set(variables[OWG]["RecipeDotGeneral_0"]) == names
  tx = optax.sgd(0.1)
  ts = train_state.TrainState.create(apply_fn=model.apply, params=variables,
                                     tx=tx)
  step = jax.jit(lambda ts: ts.apply_gradients(grads=jax.grad(
      lambda v: jnp.sum(ts.apply_fn(v, x) * c))(ts.params)))

  # the same two steps by hand: the state's gradient is the next state
  params, state = variables["params"], recipes.init_state(
      "fp8_delayed", history_length=4)
  opt = tx.init(params)

  ref_step = delayed_reference_step(tx, x, c)

  for _ in range(2):
    ts = step(ts)
    params, state, opt = ref_step(params, state, opt)
    held = ts.params[OWG]["RecipeDotGeneral_0"]
    for role, flax_name in (("x", "input"), ("w", "kernel"),
                            ("dy", "output_grad")):
      np.testing.assert_array_equal(held[f"{flax_name}_amax_history"],
                                    state[role].amax_history)
      np.testing.assert_array_equal(held[f"{flax_name}_scale"],
                                    state[role].scale)
    for leaf in ("kernel", "bias"):
      np.testing.assert_array_equal(ts.params["params"][leaf], params[leaf])
  assert float(state["dy"].amax_history[1]) > 0  # two steps recorded


class Net(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(64, name="hidden")(x))
    x = nn.Einsum((64, 64), "bi,io->bo", name="mix")(x)
    x = nn.relu(nn.DenseGeneral(64, name="mid")(x))
    return nn.Dense(8, name="head")(x)


def _spy(monkeypatch):
  """Records (recipe name, lhs shape, rhs shape) of every core call."""
  from jaxfp8._src.recipes import core  # pylint: disable=g-import-not-at-top
  calls, real = [], core.dot_general

  def spy(lhs, rhs, *args, recipe, **kwargs):
    calls.append((recipe.name, lhs.shape, rhs.shape))
    return real(lhs, rhs, *args, recipe=recipe, **kwargs)

  monkeypatch.setattr(core, "dot_general", spy)
  return calls


def test_rules_choose_each_layer(monkeypatch):
  x, _ = _data()
  model = Net()
  params = model.init(jax.random.key(1), x)
  plain = model.apply(params, x)
  calls = _spy(monkeypatch)
  rules = [("head", None), ("mix", "fp8_delayed"), ("hidden", "mxfp8")]
  with recipes.linen_recipe(rules):
    variables = model.init(jax.random.key(1), x)
    out = model.apply(variables, x)
  # mid: no rule; head: high precision
  assert sorted(set(calls)) == [("fp8_delayed", (32, 64), (64, 64)),
                                ("mxfp8", (32, 64), (64, 64))]
  assert set(variables[OWG]) == {"mix"}  # the state lives in the layer
  assert "input_scale" in variables[OWG]["mix"]
  assert not np.array_equal(out, plain)
  # the einsum layer alone equals the core through jnp.einsum
  layer, p = nn.Einsum((64, 64), "bi,io->bo"), params["params"]["mix"]
  h = jax.random.normal(jax.random.key(3), (32, 64))
  with recipes.linen_recipe("fp8_current"):
    got = layer.apply({"params": p}, h)
  dot = functools.partial(recipes.dot_general, recipe="fp8_current")
  ref = compat.einsum("bi,io->bo", h, p["kernel"], dot_general=dot)
  np.testing.assert_array_equal(got, ref + p["bias"])
  # unmatched and high-precision layers are exactly what they were
  calls.clear()
  with recipes.linen_recipe([("head", None), ("nothing", "fp8_current")]):
    np.testing.assert_array_equal(model.apply(params, x), plain)
  assert not calls


def test_bad_rules_and_recipes_are_named():
  with pytest.raises(ValueError, match="`rules` argument to `linen_recipe`"):
    with recipes.linen_recipe([("Dense",)]):
      pass
  with pytest.raises(ValueError, match="bad regex"):
    with recipes.linen_recipe([("(", "fp8_current")]):
      pass
  with pytest.raises(ValueError, match="nope"):
    with recipes.linen_recipe([(".*", "nope")]):
      pass
  with pytest.raises(ValueError, match="nope"):
    recipes.RecipeDotGeneral(recipe="nope")
  x, _ = _data()
  params = Net().init(jax.random.key(1), x)
  with pytest.raises(ValueError, match=r"linen_recipe.*'mix'.*rngs="):
    with recipes.linen_recipe([("mix", "nvfp4")]):
      Net().apply(params, x)
