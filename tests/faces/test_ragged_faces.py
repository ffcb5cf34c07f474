"""Grouped GEMMs through the Flax faces: a mixture-of-experts layer that
calls ``lax.ragged_dot`` (linen) or keeps it as an attribute (nnx) trains
under ``linen_recipe`` / ``nnx_recipe`` with the numbers of
``recipes.ragged_dot`` called directly: per-call, per-expert delayed state,
keys from the ``"recipe"`` stream, rules choosing the layer."""
from __future__ import annotations

import dataclasses

from flax import linen as nn
from flax import nnx
import jax
from jax import lax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8 import recipes

G, D, H = 4, 32, 16
SIZES = jnp.array([5, 0, 17, 8], jnp.int32)
# Flax's names of a delayed state's roles.
_ROLE_NAMES = {"x": "input", "w": "kernel", "dy": "output_grad"}


def _x():
  return jax.random.normal(jax.random.key(1), (32, D))


class LinenMoE(nn.Module):
  """Two grouped GEMMs, as an MoE FFN (tokens already sorted by expert)."""

  @nn.compact
  def __call__(self, x, sizes):
    w1 = self.param("w1", nn.initializers.normal(1.0), (G, D, H))
    w2 = self.param("w2", nn.initializers.normal(1.0), (G, H, D))
    return lax.ragged_dot(jax.nn.relu(lax.ragged_dot(x, w1, sizes)), w2,
                          sizes)


class LinenModel(nn.Module):

  @nn.compact
  def __call__(self, x, sizes):
    return nn.Dense(8, name="head")(LinenMoE(name="moe")(x, sizes))


def _states(variables, i):
  """The i-th grouped GEMM's state, from the layer's variables."""
  fresh = recipes.init_state("fp8_delayed", experts=G)
  v = variables["moe"]
  return {role: dataclasses.replace(
      s, amax_history=v[f"ragged_dot_{i}_{_ROLE_NAMES[role]}_amax_history"],
      scale=v[f"ragged_dot_{i}_{_ROLE_NAMES[role]}_scale"])
          for role, s in fresh.items()}


def test_linen_recipe_routes_ragged_dot_with_per_call_expert_state():
  model, x = LinenModel(), _x()
  with recipes.linen_recipe([("head", None), ("moe", "fp8_delayed")]):
    variables = model.init(jax.random.key(0), x, SIZES)
  ovw = variables[recipes.OVERWRITE_WITH_GRADIENT]
  assert set(ovw) == {"moe"} and len(ovw["moe"]) == 12
  assert ovw["moe"]["ragged_dot_1_kernel_amax_history"].shape == (G, 16)
  assert ovw["moe"]["ragged_dot_0_input_scale"].shape == (G,)
  # Two steps' worth of recorded amaxes, so that the scales are not 1.
  ovw = jax.tree.map(lambda a: a * 0 + 2.0, ovw)
  params = variables["params"]

  def face(p, o):
    with recipes.linen_recipe([("head", None), ("moe", "fp8_delayed")]):
      return (model.apply({"params": p, recipes.OVERWRITE_WITH_GRADIENT: o},
                          x, SIZES) ** 2).sum()

  def by_hand(p, o):
    h = recipes.ragged_dot(x, p["moe"]["w1"], SIZES, recipe="fp8_delayed",
                           state=_states(o, 0))
    y = recipes.ragged_dot(jax.nn.relu(h), p["moe"]["w2"], SIZES,
                           recipe="fp8_delayed", state=_states(o, 1))
    y = y @ p["head"]["kernel"] + p["head"]["bias"]
    return (y ** 2).sum()

  got = jax.jit(jax.value_and_grad(face, (0, 1)))(params, ovw)
  want = jax.jit(jax.value_and_grad(by_hand, (0, 1)))(params, ovw)
  for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
  # The state's gradient is the next state: each expert's own amax.
  assert len(set(np.asarray(
      got[1][1]["moe"]["ragged_dot_0_kernel_amax_history"][:, 0]))) == G


def test_linen_rule_none_keeps_lax_and_the_name_is_restored():
  model, x = LinenModel(), _x()
  variables = model.init(jax.random.key(0), x, SIZES)
  plain = model.apply(variables, x, SIZES)
  with recipes.linen_recipe([("moe", None), (".*", "fp8_current")]):
    # The head runs its recipe; the experts run lax's own ragged_dot.
    y = model.apply(variables, x, SIZES)
  h = LinenMoE().apply({"params": variables["params"]["moe"]}, x, SIZES)
  head = recipes.dot_general(h, variables["params"]["head"]["kernel"],
                             (((1,), (0,)), ((), ())), recipe="fp8_current")
  np.testing.assert_allclose(y, head + variables["params"]["head"]["bias"],
                             rtol=1e-6, atol=1e-6)
  assert not np.allclose(y, plain)
  assert lax.ragged_dot is jax.lax.ragged_dot
  assert lax.ragged_dot.__module__.startswith("jax")


def test_linen_keys_come_from_the_recipe_stream():
  model, x = LinenModel(), _x()
  with recipes.linen_recipe("nvfp4"):
    variables = model.init(jax.random.key(0), x, SIZES)
    loss = lambda p, k: (model.apply(p, x, SIZES, rngs={"recipe": k})
                         ** 2).sum()
    g = jax.jit(jax.grad(loss))
    a, b = g(variables, jax.random.key(3)), g(variables, jax.random.key(4))
    again = g(variables, jax.random.key(3))
    with pytest.raises(ValueError, match="rngs={'recipe': key}"):
      model.apply(variables, x, SIZES)
  w1 = lambda t: np.asarray(t["params"]["moe"]["w1"])
  np.testing.assert_array_equal(w1(a), w1(again))
  assert not np.array_equal(w1(a), w1(b))


class NnxMoE(nnx.Module):

  def __init__(self, rngs):
    self.w1 = nnx.Param(jax.random.normal(rngs.params(), (G, D, H)))
    self.w2 = nnx.Param(jax.random.normal(rngs.params(), (G, H, D)))
    self.up = lax.ragged_dot
    self.down = lax.ragged_dot

  def __call__(self, x, sizes):
    return self.down(jax.nn.relu(self.up(x, self.w1[...], sizes)),
                     self.w2[...], sizes)


class NnxModel(nnx.Module):

  def __init__(self, rngs):
    self.moe = NnxMoE(rngs)
    self.head = nnx.Linear(D, 8, rngs=rngs)

  def __call__(self, x, sizes):
    return self.head(self.moe(x, sizes))


def test_nnx_recipe_gives_each_grouped_gemm_its_module():
  model, x = NnxModel(nnx.Rngs(0)), _x()
  recipes.nnx_recipe(model, [("moe/up", "nvfp4"), ("moe/down", "mxfp8"),
                             ("head", None)], rngs=nnx.Rngs(recipe=5))
  assert isinstance(model.moe.up, recipes.NnxRecipeRaggedDot)
  assert model.moe.down.recipe.name == "mxfp8"
  assert model.head.dot_general is lax.dot_general
  twin = nnx.Rngs(recipe=5)  # the same stream, drawn by hand
  for _ in range(2):  # a fresh key each call
    y = model(x, SIZES)
    h = recipes.ragged_dot(x, model.moe.w1[...], SIZES, recipe="nvfp4",
                           key=twin.recipe())
    want = model.head(recipes.ragged_dot(jax.nn.relu(h), model.moe.w2[...],
                                         SIZES, recipe="mxfp8"))
    np.testing.assert_array_equal(y, want)


def test_nnx_delayed_state_per_expert_is_the_gradient():
  model, x = NnxModel(nnx.Rngs(0)), _x()
  recipes.nnx_recipe(model, [("moe.*", "fp8_delayed"), ("head", None)],
                     experts=G)
  up = model.moe.up
  assert up.kernel_amax_history[...].shape == (G, 16)
  graphdef, params, state, rest = nnx.split(model, nnx.Param,
                                            recipes.NnxRecipeState, ...)

  def loss(p, s):
    return (nnx.merge(graphdef, p, s, rest)(x, SIZES) ** 2).sum()

  _, nxt = jax.grad(loss, (0, 1))(params, state)
  hist = nxt["moe"]["up"]["kernel_amax_history"][...]
  np.testing.assert_array_equal(
      hist[:, 0], np.abs(np.asarray(model.moe.w1[...])).max(axis=(1, 2)))
  np.testing.assert_array_equal(
      nxt["moe"]["up"]["input_amax_history"][...][:, 0],
      [np.abs(np.asarray(x[s:s + n])).max(initial=0.0) for s, n in
       ((0, 5), (5, 0), (5, 17), (22, 8))])


def test_nnx_refuses_what_it_cannot_size_or_key():
  with pytest.raises(ValueError, match="'moe/up' keeps a delayed state per "
                                       "expert; pass experts=G"):
    recipes.nnx_recipe(NnxModel(nnx.Rngs(0)), "fp8_delayed")
  with pytest.raises(ValueError, match="'moe/up' rounds stochastically"):
    recipes.nnx_recipe(NnxModel(nnx.Rngs(0)), "nvfp4")
  with pytest.raises(ValueError, match="pass experts=G"):
    recipes.NnxRecipeRaggedDot("fp8_delayed")
  with pytest.raises(TypeError, match="`rngs` argument to "
                                      "`NnxRecipeRaggedDot`"):
    recipes.NnxRecipeRaggedDot("nvfp4", rngs=3)
  with pytest.raises(ValueError, match="`experts`"):
    recipes.nnx_recipe(NnxModel(nnx.Rngs(0)), "fp8_current", experts=0)
