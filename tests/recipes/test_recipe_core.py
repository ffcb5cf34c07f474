"""The recipe core: every GEMM of every named recipe, gradients, state, errors.

Each GEMM (forward, input gradient, weight gradient) of ``dot_general`` is
checked against the float64 product of its own operands, quantized by the
quantizers themselves along that GEMM's contracting axes and brought back
to the operand's layout in float64 (quantized_reference.py), so the
reference is an ``einsum`` of the original layouts that shares no layout
code with the core.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dot_reference import subscripts
from jaxfp8 import policy
from jaxfp8 import recipes
from jaxfp8._src.mx import hadamard
from quantized_reference import delayed_state
from quantized_reference import free_dims
from quantized_reference import gemm_keys
from quantized_reference import quantized64
from quantized_reference import rel

KEY = jax.random.key(11)
D2 = (((2,), (0,)), ((), ()))
# x (2, 80, 160) . w (160, 144): every GEMM's contracting length (160, 144,
# 160) holds one full 128 block and a ragged one, and is a multiple of 16.
SHAPES = {"dense": ((2, 80, 160), (160, 144), D2),
          # attention-like: batch dims 0 and 2, two free dims on each side
          "batched": ((2, 32, 3, 48), (2, 48, 3, 16),
                      (((3,), (1,)), ((0, 2), (0, 2))))}
# Every named recipe once (full nvfp4 on the batched case: each NVFP4
# program takes seconds to compile), and four on the batched case too.
PAIRS = ([("dense", n) for n in recipes.RECIPES if n != "nvfp4"]
         + [("batched", n) for n in ("fp8_delayed", "nvfp4", "mxfp8_e5m2_grad",
                                     "fp8_blockwise")])


@pytest.mark.parametrize("case,name", PAIRS)
def test_each_gemm_is_the_product_of_its_own_quantized_operands(case, name):
  ls, rs, dims = SHAPES[case]
  rng = np.random.default_rng(list(SHAPES).index(case))
  x = (rng.standard_normal(ls) * 3).astype(np.float32)
  w = (rng.standard_normal(rs) * 0.1).astype(np.float32)
  recipe = recipes.get_recipe(name)
  state = delayed_state(recipe)
  f = lambda a, b, s: recipes.dot_general(a, b, dims, recipe=name, key=KEY,
                                          state=s)
  # lax's shape (tracing the core for it cost a trace of its own); the core
  # must give it (checked below, and by its VJP taking g).
  y_shape = jax.eval_shape(lambda a, b: jax.lax.dot_general(a, b, dims),
                           x, w).shape
  g = rng.standard_normal(y_shape).astype(np.float32)

  @jax.jit
  def gemms(a, b, s, g):
    y, vjp = jax.vjp(f, a, b, s)
    return (y,) + vjp(g)

  y, dx, dw, _ = gemms(x, w, state, g)
  (lc, rc), (lb, rb) = dims
  nb = len(lb)
  lf, rf = free_dims(len(ls), lc, lb), free_dims(len(rs), rc, rb)
  g_b = list(range(nb))
  g_lf = list(range(nb, nb + len(lf)))
  g_rf = list(range(nb + len(lf), len(y_shape)))
  keys = gemm_keys(recipe, KEY) if recipe.needs_key else {}
  signs = {gm: hadamard.random_signs(k["rht"]) for gm, k in keys.items()
           if "rht" in k}
  st = state or {}

  def q(t, batch, contract, gemm, i, role):
    return quantized64(t, batch, contract, getattr(recipe, gemm)[i],
                       key=keys.get(gemm, {}).get(role),
                       signs=signs.get(gemm), state=st.get(role))

  sl, sr, so = subscripts(len(ls), len(rs), dims)
  fwd = np.einsum(f"{sl},{sr}->{so}", q(x, lb, lc, "fwd", 0, "x"),
                  q(w, rb, rc, "fwd", 1, "w"))
  w_d = q(w, rb, rf, "dgrad", 1, "w")
  dgrad = np.einsum(f"{so},{sr}->{sl}", q(g, g_b, g_rf, "dgrad", 0, "dy"), w_d)
  wgrad = np.einsum(f"{sl},{so}->{sr}", q(x, lb, lf, "wgrad", 0, "x"),
                    q(g, g_b, g_lf, "wgrad", 1, "dy"))
  assert y.shape == y_shape
  assert y.dtype == dx.dtype == dw.dtype == jnp.float32
  for got, want in ((y, fwd), (dx, dgrad), (dw, wgrad)):
    assert np.abs(want).sum() > 0 and np.abs(np.asarray(got)).sum() > 0
    assert rel(got, want) < 1e-6
  if recipe.fwd[1] is not None and recipe.fwd[1].block not in (None, (1, 16),
                                                                (1, 32)):
    # 2-D weight blocks: the square blocks of w and w^T coincide, so the
    # forward and input-gradient GEMMs multiply the same weight values.
    np.testing.assert_array_equal(q(w, rb, rc, "fwd", 1, "w"), w_d)


def test_high_precision_recipe_is_the_exact_product_and_its_gradients():
  x = np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)
  w = np.random.default_rng(1).standard_normal((32, 4)).astype(np.float32)
  dims = (((1,), (0,)), ((), ()))
  loss = lambda a, b, dot: (dot(a, b, dims) ** 2).sum()
  hp = lambda a, b, d: recipes.dot_general(a, b, d, recipe=None)
  exact = lambda a, b, d: jax.lax.dot_general(
      a, b, d, precision=jax.lax.Precision.HIGHEST)
  got = jax.grad(loss, (0, 1))(x, w, hp)
  want = jax.grad(loss, (0, 1))(x, w, exact)
  for a, b in zip(got, want):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["fp8_blockwise", "mxfp8"])
def test_gradient_passes_elements_the_forward_rounded_to_zero(name):
  # Straight through: dx = Q(dy) . Q(w) whatever x quantized to, so elements
  # of x that round to zero next to a large one still get their gradient.
  x = np.full((16, 128), 1e-6, np.float32)
  x[:, 0] = 1e4
  w = np.random.default_rng(2).standard_normal((128, 16)).astype(np.float32)
  dims = (((1,), (0,)), ((), ()))

  @jax.jit  # op by op, the VJP compiled a program per operation
  def grad(a, w):
    y, vjp = jax.vjp(lambda a: recipes.dot_general(
        a, w, dims, recipe=name, key=KEY), a)
    return vjp(jnp.ones_like(y))[0]

  dx = np.asarray(grad(x, w))
  assert (dx[:, 1:] != 0).all()


def test_delayed_state_gradient_is_the_next_state():
  x = np.random.default_rng(0).standard_normal((8, 32)).astype(np.float32)
  w = np.random.default_rng(1).standard_normal((32, 4)).astype(np.float32)
  dims = (((1,), (0,)), ((), ()))
  state = recipes.init_state("fp8_delayed", history_length=3)
  step = jax.jit(jax.grad(lambda w, s: (recipes.dot_general(
      x, w, dims, recipe="fp8_delayed", state=s) ** 2).sum(), (0, 1)))
  gw, new = step(w, state)
  y = np.asarray(jax.jit(lambda w, s: recipes.dot_general(
      x, w, dims, recipe="fp8_delayed", state=s))(w, state), np.float64)
  amaxes = {"x": np.abs(x).max(), "w": np.abs(w).max(),
            "dy": np.abs(2 * y).max()}
  assert sorted(new) == ["dy", "w", "x"]
  for role, fmt_max in (("x", 448.0), ("w", 448.0), ("dy", 57344.0)):
    assert isinstance(new[role], policy.DelayedScaling)
    np.testing.assert_allclose(new[role].amax_history,
                               [amaxes[role], 0, 0], rtol=1e-6)
    assert float(new[role].scale) == pytest.approx(amaxes[role] / fmt_max,
                                                   rel=1e-6)
  assert np.abs(np.asarray(gw)).sum() > 0
  _, newer = step(w, new)
  np.testing.assert_allclose(newer["x"].amax_history[:2], [amaxes["x"]] * 2,
                             rtol=1e-6)


def test_stochastic_recipe_needs_a_key_and_is_deterministic_per_key():
  x = np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32)
  w = np.random.default_rng(1).standard_normal((32, 16)).astype(np.float32)
  dims = (((1,), (0,)), ((), ()))
  with pytest.raises(ValueError, match=(
      r"needs a `key`.* for stochastic rounding of dgrad dy, wgrad dy; a "
      r"random Hadamard transform in wgrad")):
    recipes.dot_general(x, w, dims, recipe="nvfp4")
  with pytest.raises(ValueError, match=(
      r"needs a `key`.* for a random Hadamard transform in wgrad$")):
    recipes.dot_general(x, w, dims, recipe="nvfp4_no_sr")
  sr = recipes.get_recipe("mxfp4", stochastic_grad=True)
  c = np.random.default_rng(2).standard_normal((16, 16)).astype(np.float32)
  grad = jax.jit(jax.grad(lambda a, k: (recipes.dot_general(
      a, w, dims, recipe=sr, key=k) * c).sum()))
  a, b = grad(x, jax.random.key(1)), grad(x, jax.random.key(2))
  assert not np.array_equal(a, b)
  np.testing.assert_array_equal(a, grad(x, jax.random.key(1)))
  # recipes without randomness ignore a key
  # (one jitted program for both: op by op, each operation compiled alone)
  np.testing.assert_array_equal(*jax.jit(lambda x, w, k: (
      recipes.dot_general(x, w, dims, recipe="mxfp8", key=k),
      recipes.dot_general(x, w, dims, recipe="mxfp8")))(
          x, w, jax.random.key(1)))


def test_bad_inputs_raise_clear_errors():
  x, w = np.ones((4, 32), np.float32), np.ones((32, 8), np.float32)
  dims = (((1,), (0,)), ((), ()))
  dot = recipes.dot_general
  with pytest.raises(ValueError, match="must be one of bf16, fp8_current"):
    dot(x, w, dims, recipe="fp9_magic")
  with pytest.raises(ValueError, match="needs a state; make one"):
    dot(x, w, dims, recipe="fp8_delayed")
  with pytest.raises(ValueError, match=r"needs a state for no role"):
    dot(x, w, dims, recipe="fp8_current",
        state=recipes.init_state("fp8_delayed"))
  bad = dict(recipes.init_state("fp8_delayed"))
  bad["dy"] = policy.DelayedScaling.create("e4m3")
  with pytest.raises(ValueError, match="the state of dy has"):
    dot(x, w, dims, recipe="fp8_delayed", state=bad)
  with pytest.raises(ValueError, match=r"needs a state for \['dy', 'w', 'x'\]"):
    dot(x, w, dims, recipe="fp8_delayed",
        state={"x": recipes.init_state("fp8_delayed")["x"]})
  with pytest.raises(TypeError, match="must be a DelayedScaling"):
    dot(x, w, dims, recipe="fp8_delayed",
        state={"x": 1.0, "w": 1.0, "dy": 1.0})
  with pytest.raises(ValueError, match="multiple of 16, got 4"):
    dot(x, w, dims, recipe="nvfp4", key=KEY)  # wgrad contracts x's 4 rows
  with pytest.raises(ValueError, match="does not fit"):
    dot(x, w.T, dims, recipe="bf16")
  with pytest.raises(TypeError, match="`lhs` argument to `dot_general`"):
    dot("x", w, dims)
  with pytest.raises(NotImplementedError, match="backend='pallas'"):
    dot(x, w, dims, recipe="mxfp4", backend="pallas")


def test_dtypes_narrow_results_saturate_and_bf16_operands():
  x = np.full((16, 32), 100.0, np.float32)
  w = np.full((32, 8), 100.0, np.float32)
  dims = (((1,), (0,)), ((), ()))
  # Jitted: op by op, these two GEMMs and their gradients compiled a program
  # per operation.
  y = jax.jit(lambda a, b: recipes.dot_general(
      a, b, dims, preferred_element_type="e4m3", recipe="fp8_blockwise"))(x, w)
  assert y.dtype == jnp.float8_e4m3fn
  assert float(np.asarray(y, np.float32)[0, 0]) == 448

  @jax.jit
  def bf16_gemms(a, b):
    yb, vjp = jax.vjp(lambda a, b: recipes.dot_general(
        a, b, dims, recipe="fp8_current"), a, b)
    return yb, vjp(yb)

  # Cast in NumPy (ml_dtypes): an eager cast compiles.
  yb, grads = bf16_gemms(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16))
  assert yb.dtype == jnp.bfloat16
  assert [t.dtype for t in grads] == [jnp.bfloat16, jnp.bfloat16]
