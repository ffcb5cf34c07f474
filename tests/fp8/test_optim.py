"""Narrow parameters updated with stochastic rounding through optax."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxfp8
from jaxfp8 import formats
from jaxfp8 import policy as P

# Formats parameters can be stored in with stochastic rounding.
STORAGE = ["float8_e4m3fn", "float8_e5m2", "float8_e3m4", "float4_e2m1fn",
           "bfloat16"]
N = 2**20


def _grid_neighbours(dtype, x: float) -> tuple[float, float]:
  if dtype == "bfloat16":
    lo = float(np.float32(x).astype(jnp.bfloat16))
    if lo > x:
      lo = float(np.nextafter(np.float32(lo).astype(jnp.bfloat16),
                              np.float32(-np.inf).astype(jnp.bfloat16)))
    hi = float(np.nextafter(np.float32(lo).astype(jnp.bfloat16),
                            np.float32(np.inf).astype(jnp.bfloat16)))
    return lo, hi
  vals = formats.get(dtype).values
  i = np.searchsorted(vals, x, side="right")
  return float(vals[i - 1]), float(vals[i])


@pytest.mark.parametrize("dtype", STORAGE)
def test_stochastic_round_exact_probabilities(dtype):
  # a point 0.3 of the way between two neighbours, and one at 0.9
  fmt_dtype = np.dtype(getattr(jnp, dtype))
  for base, frac in ((1.0, 0.3), (0.75, 0.9)):
    lo, hi = _grid_neighbours(dtype, base)
    x = lo + frac * (hi - lo)
    y = jax.jit(P.stochastic_round, static_argnums=1)(
        jnp.full((N,), x, jnp.float32), dtype, jax.random.key(7))
    assert y.dtype == fmt_dtype
    vals = np.asarray(y.astype(jnp.float32), np.float64)
    assert set(np.unique(vals)) <= {lo, hi}
    p_up = float(np.float32(x) - lo) / (hi - lo)
    k = int((vals == hi).sum())
    sd = math.sqrt(N * p_up * (1 - p_up))
    assert abs(k - N * p_up) < 5 * sd, (x, k / N, p_up)


def test_stochastic_round_saturates_and_keeps_specials():
  x = jnp.array([1e30, -1e30, 3.4028235e38, 0.0, -0.0, jnp.nan])
  y = P.stochastic_round(x, "e4m3", jax.random.key(0))
  assert np.asarray(y.astype(jnp.float32))[:3].tolist() == [448, -448, 448]
  b = P.stochastic_round(x, "bf16", jax.random.key(0))
  bmax = float(jnp.finfo(jnp.bfloat16).max)
  vals = np.asarray(b.astype(jnp.float32), np.float64)
  assert np.abs(np.abs(vals[:2]) - 1e30).max() <= 2.0**-7 * 1e30
  assert vals[2] == bmax and vals[3] == 0 and np.signbit(vals[4])
  assert np.isnan(vals[5])
  with pytest.raises(TypeError, match="key"):
    P.stochastic_round(x, "e4m3", 0)


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "bfloat16"])
def test_small_updates_accumulate(dtype):
  # Each step moves every parameter by 1/8 of a grid step at 1.0; round to
  # nearest never leaves 1.0, stochastic rounding gets there on average.
  dt = getattr(jnp, dtype)
  step = 2.0 ** -3 if dtype == "float8_e4m3fn" else 2.0 ** -7
  lr, steps, n = step / 8, 64, 4096
  params = {"w": jnp.ones((n,), dt), "f32": jnp.ones((n,)),
            "count": jnp.array(0)}
  grads = {"w": -jnp.ones((n,)), "f32": -jnp.ones((n,)), "count": None}
  tx = P.with_stochastic_rounding(optax.sgd(lr), key=jax.random.key(1))
  state = tx.init(params)

  @jax.jit
  def run(params, state):
    def body(carry, _):
      params, state = carry
      updates, state = tx.update(grads, state, params)
      return (P.apply_updates(params, updates), state), None
    return jax.lax.scan(body, (params, state), None, length=steps)[0]

  params, state = run(params, state)
  assert params["w"].dtype == dt and params["f32"].dtype == jnp.float32
  assert int(params["count"]) == 0
  mean = float(params["w"].astype(jnp.float32).mean())
  expected = 1.0 + steps * lr
  np.testing.assert_allclose(params["f32"], expected, rtol=1e-6)
  # each step adds a Bernoulli(1/8) * step: sd of the mean is tiny
  sd = step * math.sqrt(steps * (1 / 8) * (7 / 8) / n)
  assert abs(mean - expected) < 6 * sd, (mean, expected)
  # plain optax with round to nearest loses every update
  near = optax.apply_updates(
      {"w": jnp.ones((n,), jnp.bfloat16)},
      {"w": jnp.full((n,), 2.0 ** -10, jnp.bfloat16)})
  assert float(near["w"].astype(jnp.float32).max()) == 1.0


def test_updates_land_exactly_on_grid_values():
  params = {"w": jaxfp8.cast(jax.random.normal(jax.random.key(0), (512,)),
                             "e5m2")}
  tx = P.with_stochastic_rounding(optax.adam(1e-2), key=jax.random.key(2))
  state = tx.init(params)
  assert jax.tree.leaves(state.inner_state)[1].dtype == jnp.float32
  grads = {"w": jax.random.normal(jax.random.key(3), (512,))}
  updates, state = jax.jit(tx.update)(grads, state, params)
  new = P.apply_updates(params, updates)
  target = params["w"].astype(jnp.float32) + updates["w"]
  np.testing.assert_array_equal(new["w"].astype(jnp.float32), target)
  assert not np.array_equal(np.asarray(new["w"].astype(jnp.float32)),
                            np.asarray(params["w"].astype(jnp.float32)))


def test_argument_errors():
  with pytest.raises(TypeError, match="key"):
    P.with_stochastic_rounding(optax.sgd(0.1), key=1)
  with pytest.raises(TypeError, match="inner"):
    P.with_stochastic_rounding("adam", key=jax.random.key(0))
  tx = P.with_stochastic_rounding(optax.sgd(0.1), key=jax.random.key(0))
  with pytest.raises(NotImplementedError, match="float16"):
    tx.init({"w": jnp.ones(2, jnp.float16)})
  with pytest.raises(TypeError, match="e8m0"):
    tx.init({"w": jnp.ones(2, jnp.float8_e8m0fnu)})
  state = tx.init({"w": jnp.ones(2, jnp.float8_e4m3fn)})
  with pytest.raises(ValueError, match="params"):
    tx.update({"w": jnp.ones(2)}, state)


def _fit(dtype: str, rounding: str, steps: int = 300) -> float:
  """Least squares with weights stored in ``dtype``; returns the final loss."""
  k1, k2 = jax.random.split(jax.random.key(5))
  x = jax.random.normal(k1, (256, 16))
  w_true = jax.random.normal(k2, (16, 4))
  y = x @ w_true
  params = {"w": jnp.full((16, 4), 0.5, getattr(jnp, dtype))}
  loss = lambda w32: jnp.mean((x @ w32 - y) ** 2)
  inner = optax.sgd(3e-3)
  tx = (P.with_stochastic_rounding(inner, key=jax.random.key(6))
        if rounding == "stochastic" else inner)
  state = tx.init(params)

  def body(carry, _):
    params, state = carry
    w32 = params["w"].astype(jnp.float32)
    grads = {"w": jax.grad(loss)(w32)}
    updates, state = tx.update(grads, state, params)
    if rounding == "stochastic":
      return (P.apply_updates(params, updates), state), None
    new = (w32 + updates["w"]).astype(params["w"].dtype)  # round to nearest
    return ({"w": new}, state), None

  (params, _), _ = jax.jit(lambda c: jax.lax.scan(body, c, None,
                                                  length=steps))(
      (params, state))
  return float(loss(params["w"].astype(jnp.float32)))


def test_training_with_narrow_params_learns_only_with_stochastic_rounding():
  start = _fit("float8_e4m3fn", "nearest", steps=0)
  nearest = _fit("float8_e4m3fn", "nearest")
  stochastic = _fit("float8_e4m3fn", "stochastic")
  # lr * gradient is below half a grid step of e4m3 for most weights:
  # nearest rounding stalls, stochastic rounding keeps descending
  assert nearest > 0.95 * start and stochastic < 0.6 * start, (
      start, nearest, stochastic)


def test_stochastic_round_into_float6_gives_codes():
  x = jnp.full((4096,), 1.0 + 1 / 32)  # a quarter step above 1 in e2m3
  y = P.stochastic_round(x, "float6_e2m3fn", jax.random.key(3))
  assert isinstance(y, jaxfp8.CodeArray)
  v = np.asarray(jaxfp8.decode(y))
  assert set(np.unique(v)) <= {1.0, 1.125} and abs(v.mean() - x[0]) < 0.01


def test_stochastic_round_saturates_infinities():
  y = P.stochastic_round(jnp.array([jnp.inf, -jnp.inf, jnp.nan]), "bf16",
                         jax.random.key(0))
  bf_max = float(jnp.finfo(jnp.bfloat16).max)
  v = np.asarray(y.astype(jnp.float32))
  assert v[0] == bf_max and v[1] == -bf_max and np.isnan(v[2])


def test_codearray_params_are_refused_clearly():
  tx = P.with_stochastic_rounding(optax.sgd(0.1), key=jax.random.key(0))
  with pytest.raises(NotImplementedError, match="float6_e2m3fn.*CodeArray"):
    tx.init({"w": jaxfp8.cast(jnp.ones(3), "e2m3")})


def test_apply_updates_saturates_narrow_params():
  params = {"w": jnp.array([400.0, -440.0], jnp.float8_e4m3fn),
            "v": jnp.array([57344.0], jnp.float8_e5m2)}
  out = P.apply_updates(params, {"w": jnp.array([100.0, -100.0]),
                                 "v": jnp.array([1e5])})
  np.testing.assert_array_equal(np.asarray(out["w"].astype(jnp.float32)),
                                [448.0, -448.0])
  assert float(out["v"][0]) == 57344.0 and out["w"].dtype == jnp.float8_e4m3fn
