"""Every deprecated training name warns, naming its replacement, and gives the
same bits as that replacement on the same inputs and keys.

The replacements are the one training API: ``jaxfp8.recipes.dot_general``,
``get_recipe``, the linen face (``RecipeDotGeneral``, ``linen_recipe``) and
the nnx face (``NnxRecipeDotGeneral``, ``nnx_recipe``,
``nnx_apply_recipe_state``). Values and gradients are compared as bits.
"""
from __future__ import annotations

import functools
import importlib
import re

from flax import linen as nn
from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8 import recipes

DIMS = (((1,), (0,)), ((), ()))
MODULES = {"jaxfp8.mx": jaxfp8.mx, "jaxfp8.policy": jaxfp8.policy}
ALIASES = [(m, n) for m, mod in MODULES.items() for n in mod._DEPRECATED]  # pylint: disable=protected-access


def old(module: str, name: str):
  """The deprecated object, checking the warning names its replacement."""
  new = MODULES[module]._DEPRECATED[name][2]  # pylint: disable=protected-access
  with pytest.warns(DeprecationWarning,
                    match=re.escape(f"{module}.{name} is deprecated; use "
                                    f"{new}")):
    return getattr(MODULES[module], name)


def same_bits(a, b):
  """Equal pytrees, leaf by leaf, bit for bit (NaNs included)."""
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  assert len(la) == len(lb)
  for x, y in zip(la, lb):
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    np.testing.assert_array_equal(x.reshape(-1).view(np.uint8),
                                  y.reshape(-1).view(np.uint8))


def operands(k=64, n=48, seed=0):
  kx, kw = jax.random.split(jax.random.key(seed))
  x = jax.random.normal(kx, (8, k)) * 3.0
  w = jax.random.normal(kw, (k, n)) * 0.2
  return x, w


def value_and_grads(dot, x, w, *args):
  """The product, and the gradients of a weighted sum of it with respect to
  ``x``, ``w`` and every further argument."""
  ct = jnp.cos(jnp.arange(x.shape[0] * w.shape[1], dtype=jnp.float32)
               ).reshape(x.shape[0], w.shape[1])
  f = lambda x, w, *a: jnp.sum(dot(x, w, *a) * ct)
  return dot(x, w, *args), jax.grad(f, tuple(range(2 + len(args))))(
      x, w, *args)


@pytest.mark.parametrize("module, name", ALIASES)
def test_alias_warns_and_its_replacement_exists(module, name):
  obj = old(module, name)
  source, attr, new = MODULES[module]._DEPRECATED[name]  # pylint: disable=protected-access
  assert obj is getattr(importlib.import_module(source), attr)
  replacement = re.match(r"(jaxfp8\.[\w.]+)", new).group(1)
  mod, _, leaf = replacement.rpartition(".")
  assert hasattr(importlib.import_module(mod), leaf), replacement
  assert name in MODULES[module].__all__ and name in dir(MODULES[module])


def test_kept_names_do_not_warn():
  import warnings  # pylint: disable=g-import-not-at-top
  with warnings.catch_warnings():
    warnings.simplefilter("error", DeprecationWarning)
    for mod in MODULES.values():
      for n in set(mod.__all__) - set(mod._DEPRECATED):  # pylint: disable=protected-access
        getattr(mod, n)
    for n in recipes.__all__:
      getattr(recipes, n)


# -- plain functions -----------------------------------------------------------

MX_CASES = [
    ("mxfp8", "mxfp8", {}),
    ("mxfp8_hp_wgrad", "mxfp8_hp_wgrad", {}),
    ("mxfp4", "mxfp4", {}),
    ("f=mxfp6_e2m3,w=none,scale=floor", "f=mxfp6_e2m3,w=none,scale=floor", {}),
    # "nvfp4" was the format in every GEMM here; the recipe of that name is
    # the NVFP4 training recipe, so the format is spelled out.
    ("nvfp4", "f=nvfp4,d=nvfp4,w=nvfp4", {}),
]


@pytest.mark.parametrize("old_recipe, new_recipe, _", MX_CASES)
def test_mx_get_recipe_reads_as_recipes_get_recipe(old_recipe, new_recipe, _):
  mx_recipe = old("jaxfp8.mx", "get_recipe")(old_recipe)
  a, b = recipes.get_recipe(mx_recipe), recipes.get_recipe(new_recipe)
  assert (a.fwd, a.dgrad, a.wgrad) == (b.fwd, b.dgrad, b.wgrad)


@pytest.mark.parametrize("old_recipe, new_recipe, _", MX_CASES)
def test_mx_dot_general_same_bits(old_recipe, new_recipe, _):
  x, w = operands()
  dot_old = functools.partial(old("jaxfp8.mx", "dot_general"),
                              dimension_numbers=DIMS, recipe=old_recipe)
  dot_new = functools.partial(recipes.dot_general, dimension_numbers=DIMS,
                              recipe=new_recipe)
  same_bits(value_and_grads(dot_old, x, w), value_and_grads(dot_new, x, w))


def test_mx_recipe_class_same_bits_with_stochastic_gradients():
  x, w = operands()
  key = jax.random.key(7)
  fields = {"wgrad": None, "stochastic_grad": True, "scale_mode": "floor"}
  mx_recipe = old("jaxfp8.mx", "MXRecipe")(**fields)
  dot_old = functools.partial(old("jaxfp8.mx", "dot_general"),
                              dimension_numbers=DIMS, recipe=mx_recipe,
                              key=key)
  dot_new = functools.partial(recipes.dot_general, dimension_numbers=DIMS,
                              recipe=recipes.get_recipe("mxfp8", **fields),
                              key=key)
  same_bits(value_and_grads(dot_old, x, w), value_and_grads(dot_new, x, w))


def test_fp8_dot_general_same_bits_current():
  x, w = operands()
  dot_old = functools.partial(old("jaxfp8.policy", "fp8_dot_general"),
                              dimension_numbers=DIMS)
  dot_new = functools.partial(recipes.dot_general, dimension_numbers=DIMS,
                              recipe="fp8_current")
  same_bits(value_and_grads(dot_old, x, w), value_and_grads(dot_new, x, w))


def test_fp8_dot_general_same_bits_delayed_states():
  x, w = operands()
  state = recipes.init_state("fp8_delayed", history_length=4,
                             initial_scale=0.25)
  fp8_dot = old("jaxfp8.policy", "fp8_dot_general")

  def dot_old(x, w, s):
    return fp8_dot(x, w, DIMS, lhs_scaling=s["x"], rhs_scaling=s["w"],
                   grad_scaling=s["dy"])

  def dot_new(x, w, s):
    return recipes.dot_general(x, w, DIMS, recipe="fp8_delayed", state=s)

  got, want = (value_and_grads(d, x, w, state) for d in (dot_old, dot_new))
  same_bits(got, want)
  # The gradient of the state is the next state, in both.
  assert float(got[1][2]["w"].amax_history[0]) == float(jnp.abs(w).max())


def test_fp8_dot_general_reference_same_bits():
  x, w = operands()
  got = old("jaxfp8.policy", "fp8_dot_general_reference")(x, w, DIMS)
  same_bits(got, recipes.dot_general_reference(x, w, DIMS,
                                               recipe="fp8_current"))


def test_overwrite_with_gradient_names_are_the_recipes():
  assert (old("jaxfp8.policy", "OVERWRITE_WITH_GRADIENT")
          == recipes.OVERWRITE_WITH_GRADIENT)
  assert (old("jaxfp8.policy", "split_overwrite_with_gradient")
          is recipes.split_overwrite_with_gradient)


# -- linen ---------------------------------------------------------------------

def linen_step(model, x, rngs=None):
  """init, then the output and the gradients of every collection."""
  variables = model.init(jax.random.key(1), x)
  def loss(v):
    return jnp.sum(jnp.sin(model.apply(v, x, rngs=rngs)))
  return variables, model.apply(variables, x, rngs=rngs), jax.grad(loss)(
      variables)


def collections_bits(tree):
  """Leaves of each collection, module names aside (the layer's dot_general
  module is named after its class)."""
  return {c: sorted((str(p[-1]), np.asarray(v).tobytes()) for p, v in
                    jax.tree_util.tree_flatten_with_path(sub)[0])
          for c, sub in tree.items()}


@pytest.mark.parametrize("old_name, old_kwargs, recipe", [
    ("MXDotGeneral", {"recipe": "mxfp8_hp_wgrad"}, "mxfp8_hp_wgrad"),
    ("MXDotGeneral", {"recipe": "sr=1"}, recipes.get_recipe(
        "mxfp8", stochastic_grad=True)),
])
def test_mx_linen_module_same_bits(old_name, old_kwargs, recipe):
  x, _ = operands()
  cls = old("jaxfp8.mx", old_name)
  key = jax.random.key(3)
  a = linen_step(nn.Dense(16, dot_general_cls=functools.partial(
      cls, **old_kwargs)), x, {"mx": key})
  # Linen folds a module's name into its keys: the replacement is given the
  # old module's name so that both draw the same key.
  b = linen_step(nn.Dense(16, dot_general_cls=functools.partial(
      recipes.RecipeDotGeneral, recipe=recipe, name=f"{old_name}_0")), x,
                 {"recipe": key})
  assert collections_bits(a[0]) == collections_bits(b[0])
  same_bits(a[1:], b[1:])


def test_fp8_linen_module_same_bits():
  x, _ = operands()
  a = linen_step(nn.Dense(16, dot_general_cls=functools.partial(
      old("jaxfp8.policy", "Fp8DotGeneral"), history_length=4)), x)
  b = linen_step(nn.Dense(16, dot_general_cls=functools.partial(
      recipes.RecipeDotGeneral, recipe="fp8_delayed", history_length=4)), x)
  for va, vb in ((a[0], b[0]), (a[2], b[2])):
    assert collections_bits(va) == collections_bits(vb)
  same_bits(a[1], b[1])


def test_linen_mx_same_bits_as_linen_recipe():
  x, _ = operands()
  model = nn.Sequential([nn.Dense(32), nn.relu, nn.Dense(16)])
  rules = [("layers_0", "mxfp4"), (".*", "mxfp8")]
  with old("jaxfp8.mx", "linen_mx")(rules):
    a = linen_step(model, x)
  with recipes.linen_recipe(rules):
    b = linen_step(model, x)
  same_bits(a, b)


# -- nnx -----------------------------------------------------------------------

def nnx_step(dot, x):
  layer = nnx.Linear(x.shape[1], 16, dot_general=dot, rngs=nnx.Rngs(0))
  graphdef, state = nnx.split(layer)

  def loss(state):
    return jnp.sum(jnp.sin(nnx.merge(graphdef, state, copy=True)(x)))
  return layer(x), jax.grad(loss)(state)


def test_nnx_mx_dot_generals_same_bits():
  x, _ = operands()
  same_bits(nnx_step(old("jaxfp8.mx", "NnxMXDotGeneral")("mxfp6_e3m2"), x),
            nnx_step(recipes.NnxRecipeDotGeneral("mxfp6_e3m2"), x))
  stochastic = old("jaxfp8.mx", "NnxStochasticMXDotGeneral")
  a = stochastic("sr=1", rngs=nnx.Rngs(mx=5))
  b = recipes.NnxRecipeDotGeneral(recipes.get_recipe(
      "mxfp8", stochastic_grad=True), rngs=nnx.Rngs(recipe=5))
  for _ in range(2):  # successive calls draw successive keys in both
    same_bits(a(x, operands()[1][:, :16], DIMS),
              b(x, operands()[1][:, :16], DIMS))


def test_nnx_mx_same_bits_as_nnx_recipe():
  x, _ = operands()

  class Model(nnx.Module):
    def __init__(self):
      self.a = nnx.Linear(64, 32, rngs=nnx.Rngs(0))
      self.b = nnx.Linear(32, 16, rngs=nnx.Rngs(1))

    def __call__(self, x):
      return self.b(jax.nn.relu(self.a(x)))

  rules = [("a", "mxfp4"), (".*", "mxfp8_hp_wgrad")]
  ma = old("jaxfp8.mx", "nnx_mx")(Model(), rules)
  mb = recipes.nnx_recipe(Model(), rules)
  grads = [nnx.grad(lambda m: jnp.sum(jnp.sin(m(x))))(m) for m in (ma, mb)]
  same_bits((ma(x), nnx.state(grads[0])), (mb(x), nnx.state(grads[1])))


def test_nnx_fp8_dot_general_and_state_same_bits():
  x, _ = operands()
  state_type = old("jaxfp8.policy", "Fp8State")
  assert issubclass(state_type, recipes.NnxRecipeState)
  apply_old = old("jaxfp8.policy", "nnx_apply_fp8_state")
  out = []
  for dot, st, apply in (
      (old("jaxfp8.policy", "NnxFp8DotGeneral")(history_length=4),
       state_type, apply_old),
      (recipes.NnxRecipeDotGeneral("fp8_delayed", history_length=4),
       recipes.NnxRecipeState, recipes.nnx_apply_recipe_state)):
    layer = nnx.Linear(64, 16, dot_general=dot, rngs=nnx.Rngs(0))
    diff = nnx.DiffState(0, (nnx.Param, st))
    grads = nnx.grad(lambda m: jnp.sum(jnp.sin(m(x))), argnums=diff)(layer)
    rest = apply(layer, grads)
    out.append((layer(x), nnx.state(rest),
                jax.tree.leaves(nnx.state(layer, st))))
  same_bits(out[0], out[1])
