"""Regressions of the recipe core under adversarial input (issue #43): each
class of failure a demanding user found, held at its root.

The property-based sweep over every recipe is test_recipe_properties.py;
these are the named cases, one per root cause.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.linalg import hadamard as scipy_hadamard

from jaxfp8 import mx
from jaxfp8 import recipes
from jaxfp8._src.mx import hadamard
from jaxfp8._src.recipes import gemm

DIMS = (((1,), (0,)), ((), ()))
KEY = jax.random.key(0)
F32_MAX = float(np.finfo(np.float32).max)


# -- scale arithmetic that can't overflow where the result is finite ---------

def test_per_tensor_product_of_huge_and_tiny_operands_is_finite():
  # x = 3e38, w = 1e-30, K = 32: each scale alone is extreme (s_x ~ 6.7e35),
  # the product is 9.6e9.
  x = np.full((2, 32), 3e38, np.float32)
  w = np.full((32, 2), 1e-30, np.float32)
  # One jitted program for both (op by op, each operation compiled alone).
  y, ref = jax.jit(lambda x, w: (
      recipes.dot_general(x, w, DIMS, recipe="fp8_current"),
      recipes.dot_general_reference(x, w, DIMS, recipe="fp8_current")))(x, w)
  np.testing.assert_allclose(np.asarray(y), 9.6e9, rtol=1e-6)
  # The reference multiplies the dequantized operands (another rounding).
  np.testing.assert_allclose(np.asarray(y), np.asarray(ref), rtol=2**-20)


@pytest.mark.parametrize("sa,sb,p", [
    (2.0**127, 2.0**-126, 3.0), (2.0**-126, 2.0**-126, 2.0**40),
    (1.7e38, 1e-30, 448.0 * 448 * 32), (1.5, 2.5, 7.0),
    (2.0**120, 2.0**10, 1.0), (3.3e-38, 5e-10, 1e5)])
def test_rescale_matches_float64_where_representable(sa, sb, p):
  sa, sb, p = (np.float32(v) for v in (sa, sb, p))
  got = float(gemm.rescale(jnp.float32(p), jnp.float32(sa), jnp.float32(sb)))
  exact = float(p) * float(sa) * float(sb)
  if abs(exact) > F32_MAX * (1 + 2**-24):
    assert got == np.inf
  elif abs(exact) >= np.finfo(np.float32).tiny:
    assert got == pytest.approx(exact, rel=2**-22)


def test_rescale_keeps_the_bits_of_scaling_one_after_the_other():
  rng = np.random.default_rng(0)
  p = rng.uniform(-1e6, 1e6, 4096).astype(np.float32)
  sa = np.exp2(rng.uniform(-50, 50, 4096)).astype(np.float32)
  sb = np.exp2(rng.uniform(-50, 50, 4096)).astype(np.float32)
  got = np.asarray(jax.jit(gemm.rescale)(p, sa, sb))
  want = (p * sa) * sb  # NumPy float32, no overflow in this range
  np.testing.assert_array_equal(got, want)


def test_hadamard_transform_of_values_near_float32_max_is_finite():
  rng = np.random.default_rng(1)
  x = (rng.uniform(-1, 1, (16, 32)) * 3e38).astype(np.float32)
  signs = np.asarray(hadamard.random_signs(KEY))
  exact = ((x.astype(np.float64).reshape(16, 2, 16) * signs)
           @ scipy_hadamard(16).T / 4).reshape(16, 32)
  got = np.asarray(hadamard.rht(x, signs))
  representable = np.abs(exact) <= F32_MAX
  assert representable.sum() > 400 and (~representable).any()
  np.testing.assert_array_equal(np.isfinite(got), representable)
  # A few float32 roundings of sums of 16 terms up to 3e38.
  np.testing.assert_allclose(got[representable], exact[representable],
                             rtol=0, atol=2**-21 * np.abs(exact).max())
  inv_exact = (signs * (x.astype(np.float64).reshape(16, 2, 16)
                        @ scipy_hadamard(16).T) / 4).reshape(16, 32)
  inv = np.asarray(hadamard.rht(x, signs, inverse=True))
  np.testing.assert_array_equal(np.isfinite(inv),
                                np.abs(inv_exact) <= F32_MAX)


@pytest.mark.parametrize("recipe", ["nvfp4", "nvfp4_no_rht"])
def test_nvfp4_weight_gradient_of_huge_activations_is_finite(recipe):
  rng = np.random.default_rng(0)
  x = jnp.asarray((rng.uniform(-1, 1, (16, 32)) * 1e38).astype(np.float32))
  w = jnp.asarray(rng.uniform(-1, 1, (32, 16)).astype(np.float32))
  # Jitted: op by op, the gradient compiled a program per operation.
  dw = jax.jit(jax.grad(lambda w, x: (recipes.dot_general(
      x, w, DIMS, recipe=recipe, key=KEY) * 1e-3).sum()))(w, x)
  assert np.isfinite(np.asarray(dw)).all()


# -- bf16: lax.dot_general on bf16-rounded operands --------------------------

@pytest.mark.parametrize("v", [np.inf, -np.inf, np.nan, 3.4e38, 3.39e38,
                               1e-40, 1.0])
def test_bf16_recipe_is_dot_general_on_bf16_operands(v):
  x = np.array([[v, 1.0]], np.float32)
  w = np.array([[2.0], [0.5]], np.float32)
  got, want = _bf16_and_lax(x, w)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


@jax.jit
def _bf16_and_lax(x, w):
  # One program for every value (the value is an argument, not a constant).
  return (recipes.dot_general(x, w, DIMS, recipe="bf16"),
          jax.lax.dot_general(
              x.astype(jnp.bfloat16).astype(jnp.float32),
              w.astype(jnp.bfloat16).astype(jnp.float32), DIMS,
              precision=jax.lax.Precision.HIGHEST))


def test_bf16_recipe_gradient_keeps_inf():
  x = np.array([[np.inf, 1.0]], np.float32)
  w = np.array([[2.0], [0.5]], np.float32)
  # Jitted: op by op, the gradient compiled a program per operation.
  dw = jax.jit(jax.grad(lambda w, x: recipes.dot_general(
      x, w, DIMS, recipe="bf16").sum()))(w, x)
  assert np.asarray(dw)[0, 0] == np.inf


# -- dimension numbers validated as lax validates them -----------------------

@pytest.mark.parametrize("dims,err", [
    ((((5,), (0,)), ((), ())), ValueError),
    ((((-3,), (0,)), ((), ())), ValueError),
    ((((-1,), (0,)), ((), ())), ValueError),
    ((((1.7,), (0,)), ((), ())), TypeError),
    ((((True,), (0,)), ((), ())), TypeError),
    ((((1,), (0,)), ((0,), ())), ValueError),
    ((((1, 1), (0, 0)), ((), ())), ValueError),
    ((((0,), (0,)), ((), ())), ValueError),   # 2 against 3
    (((1,), (0,)), ValueError),
    ("1,0", ValueError),
])
@pytest.mark.parametrize("recipe", ["fp8_current", "mxfp8", "bf16"])
def test_bad_dimension_numbers_are_refused(dims, err, recipe):
  x, w = jnp.ones((2, 3)), jnp.ones((3, 4))
  with pytest.raises(err, match="`dimension_numbers` argument to "
                     "`dot_general`"):
    recipes.dot_general(x, w, dims, recipe=recipe)


def test_dims_on_a_scalar_operand_are_refused():
  with pytest.raises(ValueError, match="`dimension_numbers`.*in \\[0, 0\\)"):
    recipes.dot_general(jnp.float32(2), jnp.ones(3), (((0,), (0,)), ((), ())))


def test_scalar_operands_multiply():
  got = jax.jit(lambda a, b: recipes.dot_general(
      a, b, (((), ()), ((), ())), recipe="mxfp8"))(np.float32(2),
                                                   np.float32(3))
  assert float(got) == 6.0


def test_packed_weight_of_another_contracting_length_is_refused():
  w = mx.quantize(jnp.ones((64, 4)), "mxfp8", axis=0)
  with pytest.raises(ValueError, match="`dimension_numbers`.*does not fit"):
    recipes.dot_general(jnp.ones((2, 32)), w, DIMS, recipe="mxfp8")


# -- state, fields and keys checked at the public entry ----------------------

@pytest.mark.parametrize("scale", [0.0, -1.0, np.nan, np.inf, 1e-40, 1e39])
def test_init_state_refuses_a_bad_initial_scale(scale):
  with pytest.raises(ValueError, match="`initial_scale` argument to "
                     "`init_state`"):
    recipes.init_state("fp8_delayed", initial_scale=scale)


def test_init_state_refuses_a_bad_history_length():
  with pytest.raises((TypeError, ValueError), match="`history_length`"):
    recipes.init_state("fp8_delayed", history_length=2.5)


@pytest.mark.parametrize("field,value,err,match", [
    ("scale", jnp.ones((3,)), ValueError, "scale of shape"),
    ("scale", jnp.float32(0.0), ValueError, "state of x has a scale"),
    ("scale", jnp.float32(np.nan), ValueError, "state of x has a scale"),
    ("scale", jnp.ones((), jnp.int32), TypeError, "not a float32"),
    ("amax_history", jnp.ones((2, 2)), ValueError, "amax_history of shape"),
    ("amax_history", "no", TypeError, "not a float32"),
])
def test_a_bad_state_array_is_refused_naming_state(field, value, err, match):
  state = recipes.init_state("fp8_delayed")
  state["x"] = dataclasses.replace(state["x"], **{field: value})
  with pytest.raises(err, match=match) as info:
    recipes.dot_general(jnp.ones((2, 3)), jnp.ones((3, 2)), DIMS,
                        recipe="fp8_delayed", state=state)
  assert "`state` argument to `dot_general`" in str(info.value)


def test_a_traced_state_of_the_wrong_shape_is_refused():
  state = recipes.init_state("fp8_delayed")
  state["w"] = dataclasses.replace(state["w"], scale=jnp.ones((1,)))
  f = jax.jit(lambda s: recipes.dot_general(
      jnp.ones((2, 3)), jnp.ones((3, 2)), DIMS, recipe="fp8_delayed",
      state=s))
  with pytest.raises(ValueError, match="the state of w has a scale of shape"):
    f(state)


@pytest.mark.parametrize("block", [(1, 2.5), (1.0, 128), "ab", (True, 16),
                                   (1, 2, 3), (0, 128)])
def test_quantizer_block_must_be_a_pair_of_ints(block):
  with pytest.raises(ValueError, match="`block` argument to `Quantizer`"):
    recipes.Quantizer("block", "e4m3", block=block)


@pytest.mark.parametrize("name,overrides,arg", [
    ("nvfp4", {"weight_block": "ab"}, "weight_block"),
    ("nvfp4", {"weight_block": (8, 8)}, "weight_block"),
    ("nvfp4", {"tensor_scale": "zz"}, "tensor_scale"),
    ("nvfp4", {"rht": "no"}, "rht"),
    ("nvfp4", {"stochastic": 1}, "stochastic"),
    ("fp8_blockwise", {"format": "e2m1"}, "format"),
    ("fp8_blockwise", {"block": 2.5}, "block"),
    ("fp8_blockwise", {"block": 0}, "block"),
    ("fp8_blockwise", {"pow2_scales": "yes"}, "pow2_scales"),
    ("fp8_current", {"margin": 1.5}, "margin"),
    ("fp8_current", {"margin": 400}, "margin"),
    ("fp8_current", {"grad_format": "bf16"}, "grad_format"),
    ("fp8_delayed", {"format": "int8"}, "format"),
    ("mxfp8", {"block_size": 2.5}, "block_size"),
    ("mxfp8", {"scale_mode": "zz"}, "scale_mode"),
    ("mxfp8", {"stochastic_grad": "yes"}, "stochastic_grad"),
    ("mxfp4", {"fwd": "e4m3"}, "fwd"),
])
def test_get_recipe_overrides_are_checked_naming_them(name, overrides, arg):
  with pytest.raises((TypeError, ValueError),
                     match=f"`{arg}` argument to `get_recipe`"):
    recipes.get_recipe(name, **overrides)


def test_block_quantizer_takes_the_blockwise_formats_only():
  with pytest.raises(ValueError, match="`format` argument to `Quantizer`"):
    recipes.Quantizer("block", "e2m1", block=(1, 32))


def test_a_batch_of_keys_is_refused_at_the_entry():
  keys = jax.random.split(KEY, 2)
  with pytest.raises(ValueError, match="`key` argument to `dot_general` must "
                     "be a single PRNG key"):
    recipes.dot_general(jnp.ones((16, 32)), jnp.ones((32, 16)), DIMS,
                        recipe="nvfp4", key=keys)


# -- zero-size operands -------------------------------------------------------

ZERO_SIZE_SHAPES = [((0, 32), (32, 16)), ((16, 0), (0, 16)),
                    ((16, 32), (32, 0))]


@functools.lru_cache(maxsize=None)
def _zero_size_results(recipe):
  """(product, gradient of x, gradient of w) of every shape pair of
  :data:`ZERO_SIZE_SHAPES`: one jitted program per recipe, shared by its
  three cases (op by op, each case compiled a program per operation)."""
  state = recipes.init_state(recipe)
  f = lambda x, w, s: recipes.dot_general(x, w, DIMS, recipe=recipe,
                                          key=KEY, state=s)

  @jax.jit
  def run(operands, s):
    return [(f(x, w, s),) + jax.grad(lambda x, w, s: f(x, w, s).sum(),
                                     (0, 1))(x, w, s)
            for x, w in operands]

  return run([(np.ones(xs, np.float32), np.ones(ws, np.float32))
              for xs, ws in ZERO_SIZE_SHAPES], state)


@pytest.mark.parametrize("recipe", ["fp8_current", "fp8_delayed", "bf16",
                                    "mxfp8", "fp8_blockwise", "nvfp4"])
@pytest.mark.parametrize("xs,ws", ZERO_SIZE_SHAPES)
def test_zero_size_operands_give_the_empty_or_zero_product(recipe, xs, ws):
  y, gx, gw = _zero_size_results(recipe)[ZERO_SIZE_SHAPES.index((xs, ws))]
  assert y.shape == (xs[0], ws[1])
  np.testing.assert_array_equal(np.asarray(y), 0)
  assert gx.shape == xs and gw.shape == ws
  np.testing.assert_array_equal(np.asarray(gx), 0)
  np.testing.assert_array_equal(np.asarray(gw), 0)


def test_delayed_state_records_amax_zero_for_an_empty_operand():
  state = recipes.init_state("fp8_delayed", history_length=2)
  # Jitted: op by op, the gradient compiled a program per operation.
  _, nxt = jax.jit(jax.grad(lambda w, s: recipes.dot_general(
      jnp.ones((0, 4)), w, DIMS, recipe="fp8_delayed", state=s).sum(),
                            (0, 1)))(np.full((4, 3), 2.0, np.float32), state)
  np.testing.assert_array_equal(np.asarray(nxt["x"].amax_history), [0, 0])
  np.testing.assert_array_equal(np.asarray(nxt["w"].amax_history), [2, 0])
  assert float(nxt["x"].scale) == 1.0
