"""jaxfp8.es.OpenAIES and centered_rank: fitness shaping, the update, settings."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

import jaxfp8
from jaxfp8 import es


def _values(x) -> np.ndarray:
  """float64 values of a population (native narrow, CodeArray or wide)."""
  return np.asarray(jaxfp8.decode(x, jnp.float32), np.float64)


def test_centered_rank():
  x = np.array([0.5, -2.0, 7.0, 3.0, 3.0, -9.0])
  want = (stats.rankdata(x, method="ordinal") - 1) / 5 - 0.5
  np.testing.assert_allclose(np.asarray(es.centered_rank(jnp.asarray(x))),
                             want, rtol=0, atol=1e-7)
  np.testing.assert_array_equal(es.centered_rank(jnp.ones(1)), [0.0])
  # A diverged candidate (NaN fitness) ranks lowest, below -inf: it must not
  # pull the mean towards it.
  r = np.asarray(es.centered_rank(jnp.array([1.0, jnp.nan, -jnp.inf, 3.0])))
  np.testing.assert_allclose(r, [1 / 6, -0.5, -1 / 6, 0.5], atol=1e-7)


@pytest.mark.parametrize("antithetic", [True, False])
@pytest.mark.parametrize("fmt", ["float32", "float8_e4m3fn", "float6_e2m3fn"])
def test_tell_is_the_openai_es_gradient(fmt, antithetic):
  # sgd(1): the mean moves by exactly sum_i w_i eps_i / (n sigma), computed
  # here in float64 over the whole population (no antithetic shortcut).
  n, sigma = 16, 0.25
  opt = es.OpenAIES(n, optax.sgd(1.0), sigma=sigma, dtype=fmt,
                    antithetic=antithetic)
  state = opt.init(jnp.arange(30.0) / 10)
  eps = opt.ask(jax.random.key(9), state)
  fitness = np.sin(np.arange(n) * 1.7)  # a loss: lower is better
  new = opt.tell(state, eps, jnp.asarray(fitness, jnp.float32))
  w = (stats.rankdata(-fitness, method="ordinal") - 1) / (n - 1) - 0.5
  step = w @ _values(eps) / (n * sigma)
  np.testing.assert_allclose(np.asarray(new.mean) - np.asarray(state.mean),
                             step, rtol=1e-5, atol=1e-6)
  assert int(new.generation) == 1
  up = es.OpenAIES(n, optax.sgd(1.0), sigma=sigma, dtype=fmt,
                   antithetic=antithetic, maximize=True)
  negated = jax.device_put(np.asarray(-fitness, np.float32))
  np.testing.assert_array_equal(up.tell(state, eps, negated).mean, new.mean)


@pytest.mark.parametrize("fmt", ["float32", "float8_e4m3fn", "float8_e5m2",
                                 "float6_e2m3fn"])
def test_openai_es_minimizes_a_shifted_sphere(fmt):
  target = jnp.linspace(-2.0, 2.0, 20)
  opt = es.OpenAIES(64, optax.adam(0.05), sigma=0.1, dtype=fmt,
                    sigma_decay=0.995, sigma_min=0.02)

  def loss(x):
    return jnp.sum((x - target) ** 2, axis=-1)

  @jax.jit
  def run(state, key):
    def step(state, k):
      eps = opt.ask(k, state)
      return opt.tell(state, eps, loss(opt.candidates(state, eps))), None
    return jax.lax.scan(step, state, jax.random.split(key, 300))[0]

  state = run(opt.init(jnp.zeros(20)), jax.random.key(0))
  # The final losses in NumPy: no eager programs for the check itself.
  t = np.asarray(target, np.float64)
  end = np.sum((np.asarray(state.mean, np.float64) - t) ** 2)
  assert end < 0.01 * np.sum(t ** 2)
  assert float(state.sigma) == pytest.approx(max(0.1 * 0.995**300, 0.02),
                                             rel=1e-4)


def test_openai_es_errors():
  with pytest.raises(ValueError, match="even"):
    es.OpenAIES(9, optax.adam(0.1))
  with pytest.raises(ValueError, match="at least 2"):
    es.OpenAIES(1, optax.adam(0.1), antithetic=False)
  with pytest.raises(TypeError, match="`optimizer`.*GradientTransformation"):
    es.OpenAIES(8, 0.1)
  with pytest.raises(ValueError, match="signed"):
    es.OpenAIES(8, optax.adam(0.1), dtype="e8m0")
  with pytest.raises(ValueError, match="`sigma`"):
    es.OpenAIES(8, optax.adam(0.1), sigma=0.0)
  opt = es.OpenAIES(8, optax.adam(0.1))
  state = opt.init(jnp.zeros(3))
  with pytest.raises(ValueError, match=r"`fitness`.*\(8,\)"):
    opt.tell(state, opt.ask(jax.random.key(0), state), jnp.zeros(7))
  eps = opt.ask(jax.random.key(0), state)
  for bad in (eps[:4], jnp.zeros((8, 5), jnp.float8_e4m3fn)):
    with pytest.raises(ValueError, match=r"`population`.*\(8, 3\)"):
      opt.tell(state, bad, jnp.zeros(8))
  for kwargs, err, arg in (({"sigma_decay": 0.0}, ValueError, "sigma_decay"),
                           ({"sigma_min": -1.0}, ValueError, "sigma_min"),
                           ({"sigma": float("nan")}, ValueError, "sigma"),
                           ({"sigma": "0.1"}, TypeError, "sigma"),
                           ({"sigma": jnp.ones(2)}, TypeError, "sigma"),
                           ({"antithetic": "no"}, TypeError, "antithetic"),
                           ({"antithetic": None}, TypeError, "antithetic"),
                           ({"maximize": "no"}, TypeError, "maximize"),
                           ({"dtype": jnp.int8}, TypeError, "dtype")):
    with pytest.raises(err, match=f"`{arg}` argument to `OpenAIES`"):
      es.OpenAIES(8, optax.adam(0.1), **kwargs)
  assert es.OpenAIES(8, optax.adam(0.1), sigma=jnp.float32(0.5)).sigma == 0.5
  with pytest.raises(TypeError, match="`mean` argument to `OpenAIES.init`"):
    opt.init("mean")


def test_openai_es_settings_may_be_traced():
  def run(decay):
    opt = es.OpenAIES(8, optax.adam(0.1), sigma=0.1, dtype="e4m3",
                      sigma_decay=decay)
    state = opt.init(jnp.ones(4))
    eps = opt.ask(jax.random.key(0), state)
    return opt.tell(state, eps, jnp.arange(8.0)).sigma
  np.testing.assert_allclose(np.asarray(jax.vmap(run)(jnp.array([0.9, 0.5]))),
                             [0.09, 0.05], rtol=1e-6)


def test_centered_rank_refuses_a_scalar():
  for fitness in (jnp.float32(1.0), 3.0, jnp.ones((2, 3))):
    with pytest.raises(ValueError, match="`fitness` argument to `centered_r"):
      es.centered_rank(fitness)
  with pytest.raises(TypeError, match="`fitness`"):
    es.centered_rank("fitness")
