"""jaxfp8.es.EvosaxStrategy: evosax's update on fp8 noise, its law, its memory.

The reference for "evosax's own update" is evosax itself: its ``ask`` run
with ``jax.random.normal`` replaced by the same float32 draw rounded once to
the noise format, then its ``tell``.
"""
from __future__ import annotations

import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
import xla_flags
from jaxfp8 import es
from jaxfp8._src.es import population as es_lib
from jaxfp8._src.random import laws
from stats import chi_square

algorithms = pytest.importorskip("evosax.algorithms")

WRAPPED = ["Open_ES", "SNES", "PGPE", "ARS", "Sep_CMA_ES", "CMA_ES"]
SOLUTION = {"w": jnp.zeros((3, 4)), "b": jnp.zeros(5)}  # 17 parameters
START = {"w": jnp.full((3, 4), 0.5), "b": jnp.linspace(-1.0, 1.0, 5)}


def _loss(member):
  return sum(jnp.sum((x - 0.25) ** 2) for x in jax.tree_util.tree_leaves(
      member)).astype(jnp.float32)


def _strategy(name, popsize=16, solution=SOLUTION, **kw):
  return getattr(algorithms, name)(popsize, solution, **kw)


def _bits(tree):
  """Every leaf's bytes (NaN-aware bit equality via the raw bits)."""
  return [np.asarray(x).tobytes() for x in jax.tree_util.tree_leaves(tree)]


def _evosax_on_rounded_noise(strategy, fmt, monkeypatch, keys, state, params):
  """Two generations of evosax's own ask/tell on its noise rounded once."""
  normal = jax.random.normal

  def rounded(key, shape=(), dtype=jnp.float32):
    return jaxfp8.decode(jaxfp8.cast(normal(key, shape, dtype), fmt))
  monkeypatch.setattr(jax.random, "normal", rounded)
  out = []
  for k_ask, k_tell in keys:
    population, state = strategy.ask(k_ask, state, params)
    fitness = jax.vmap(_loss)(population)
    state, metrics = strategy.tell(k_tell, population, fitness, state, params)
    out.append((population, fitness, state, metrics))
  monkeypatch.setattr(jax.random, "normal", normal)
  return out


@pytest.mark.parametrize("name", WRAPPED + ["Open_ES plain"])
def test_update_is_evosaxs_on_the_rounded_noise(name, monkeypatch):
  # A fresh evosax instance per run: its jitted ask traces (and so draws
  # through the patched normal) anew.
  kw = {"use_antithetic_sampling": False} if name.endswith("plain") else {}
  make = lambda: _strategy(name.split()[0], **kw)
  wrapped = es.EvosaxStrategy(make(), noise_dtype="e4m3", method="cast")
  params = wrapped.default_params
  keys = [(jax.random.key(2 * g + 1), jax.random.key(2 * g + 2))
          for g in range(2)]
  state = wrapped.init(jax.random.key(0), START, params)
  want = _evosax_on_rounded_noise(make(), "e4m3", monkeypatch, keys, state,
                                  params)
  for (k_ask, k_tell), (ref_pop, ref_fit, ref_state, ref_metrics) in zip(
      keys, want):
    population, state = wrapped.ask(k_ask, state, params)
    # The members (float32) are evosax's candidates: bit for bit, but for
    # CMA-ES's rotation, a matmul whose float32 sums XLA may order otherwise
    # in another program (a few ulps).
    if name == "CMA_ES":
      for got, ref in zip(jax.tree_util.tree_leaves(population.members()),
                          jax.tree_util.tree_leaves(ref_pop)):
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    else:
      assert _bits(population.members()) == _bits(ref_pop), name
      np.testing.assert_array_equal(es.evaluate(_loss, population), ref_fit)
    fitness = ref_fit
    state, metrics = wrapped.tell(k_tell, population, fitness, state, params)
    assert _bits(state) == _bits(ref_state), name
    assert _bits(metrics) == _bits(ref_metrics), name
  assert not np.array_equal(state.mean, wrapped.init(
      jax.random.key(0), START, params).mean)  # it moved


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float6_e2m3fn"])
def test_noise_follows_the_exact_law(fmt):
  # Open_ES (antithetic): the first half's 2^19 entries are independent.
  n = 1 << 14
  wrapped = es.EvosaxStrategy(_strategy("Open_ES", 64, jnp.zeros(n)),
                              noise_dtype=fmt, method="exact")
  params = wrapped.default_params
  state = wrapped.init(jax.random.key(0), jnp.zeros(n), params)
  population, _ = wrapped.ask(jax.random.key(5), state, params)
  values = np.asarray(jaxfp8.decode(population.noise, jnp.float32))
  grid, probs = laws.rounded_law("normal", fmt)
  counts = np.bincount(np.searchsorted(grid, values[:32].ravel()),
                       minlength=len(grid))
  stat, dof, p = chi_square(counts, probs)
  assert p > 1e-4, (fmt, stat, dof)
  # Antithetic rows are exact mirrors: the codes differ by the sign bit.
  noise = population.noise
  codes = np.asarray(noise.codes if isinstance(noise, jaxfp8.CodeArray)
                     else noise).view(np.uint8)
  sign = 1 << (jaxfp8.formats.get(fmt).bits - 1)
  np.testing.assert_array_equal(codes[32:], codes[:32] ^ sign)


@pytest.mark.parametrize("name", ["SNES", "CMA_ES"])
def test_plain_strategies_draw_independent_rows(name):
  wrapped = es.EvosaxStrategy(_strategy(name, 8), method="cast")
  params = wrapped.default_params
  state = wrapped.init(jax.random.key(0), START, params)
  population, _ = wrapped.ask(jax.random.key(1), state, params)
  want = jaxfp8.cast(jax.random.normal(jax.random.key(1), (8, 17)), "e4m3")
  np.testing.assert_array_equal(np.asarray(population.noise), np.asarray(want))


def _program_bytes(fn, *args):
  m = jax.jit(fn).lower(*args).compile().memory_analysis()
  return m.output_size_in_bytes + m.temp_size_in_bytes


@pytest.mark.parametrize("name,method", [("Open_ES", "exact"),
                                         ("Open_ES", "cast"),
                                         ("SNES", "exact")])
def test_population_held_at_most_0_3x_evosax(name, method, monkeypatch):
  # Compiled, not run: output + temporaries of ask, evosax's float32
  # population against the wrapper's fp8 noise. bench es --evosax measures
  # 4096 x 100,000, whose noise is drawn in 49 blocks of 2^22 entries; here
  # 512 x 8192 compiles in a moment, drawn in 32 blocks of 2^16.
  monkeypatch.setattr(es_lib, "BLOCK_ENTRIES", 1 << 16)
  pop, n = 512, 8192
  strategy = _strategy(name, pop, jnp.zeros(n))
  wrapped = es.EvosaxStrategy(strategy, noise_dtype="e4m3", method=method)
  params = strategy.default_params
  key = jax.random.key(0)
  state = jax.eval_shape(lambda k: strategy.init(k, jnp.zeros(n), params), key)
  evosax_bytes = _program_bytes(strategy.ask, key, state, params)
  ours = _program_bytes(wrapped.ask, key, state, params)
  assert evosax_bytes >= pop * n * 4
  assert ours <= 0.3 * evosax_bytes, (ours, evosax_bytes)


def test_members_in_the_population_dtype():
  wrapped = es.EvosaxStrategy(_strategy("SNES"), noise_dtype="e5m2",
                              method="exact", population_dtype="e4m3")
  params = wrapped.default_params
  state = wrapped.init(jax.random.key(0), START, params)
  population, state = wrapped.ask(jax.random.key(3), state, params)
  members = population.members()
  assert jax.tree_util.tree_structure(members) == (
      jax.tree_util.tree_structure(SOLUTION))
  assert members["w"].shape == (16, 3, 4)
  assert members["w"].dtype == jnp.float8_e4m3fn
  # Rounded once from the float32 candidates.
  wide = es.NarrowPopulation(population.noise, population.mean,
                             population.std, unravel=population.unravel)
  for got, f32 in zip(jax.tree_util.tree_leaves(members),
                      jax.tree_util.tree_leaves(wide.members())):
    np.testing.assert_array_equal(np.asarray(got),
                                  np.asarray(jaxfp8.cast(f32, "e4m3")))
  # evaluate builds the same members, in one map or in chunks.
  fit = jax.jit(lambda p: es.evaluate(_loss, p))(population)
  chunks = es.evaluate(_loss, population, batch_size=5)
  np.testing.assert_array_equal(fit, jax.vmap(_loss)(members))
  np.testing.assert_array_equal(chunks, fit)
  scaled = es.evaluate(lambda m, s: _loss(m) * s, population, jnp.arange(16.0))
  np.testing.assert_array_equal(scaled, fit * jnp.arange(16.0))
  state, _ = wrapped.tell(jax.random.key(4), population, fit, state, params)
  assert np.isfinite(np.asarray(state.mean)).all()


# Strategies drawing no Gaussian mean + std * z population (evolutionary
# operators, a user's sampling function), a subclass of a wrapped one
# (SV_Open_ES: several populations), and one whose rotation isn't wrapped.
REFUSED = {
    "DifferentialEvolution": {}, "PSO": {}, "SimpleGA": {},
    "RandomSearch": {"sampling_fn": lambda key: jnp.zeros(4)},
    "SV_Open_ES": {"num_populations": 2}, "xNES": {},
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refuses_strategies_without_wrappable_noise(name):
  strategy = getattr(algorithms, name)(population_size=16,
                                       solution=jnp.zeros(4), **REFUSED[name])
  with pytest.raises(TypeError, match=f"EvosaxStrategy.*{name}"):
    es.EvosaxStrategy(strategy)
  with pytest.raises(TypeError, match="EvosaxStrategy.*not an evosax"):
    es.EvosaxStrategy(object())


@pytest.mark.parametrize("kw,error,words", [
    ({"noise_dtype": "e8m0"}, ValueError, "noise_dtype.*signed"),
    ({"noise_dtype": "bogus"}, ValueError, "bogus"),
    ({"method": "nope"}, ValueError, "method.*nope"),
    ({"noise_dtype": "float32", "method": "exact"}, ValueError, "method"),
    ({"population_dtype": "e8m0"}, ValueError, "population_dtype.*signed"),
    ({"population_dtype": "bogus"}, ValueError, "bogus.*`population_dtype`"),
    ({"population_dtype": jnp.int8}, TypeError,
     "`population_dtype`.*floating format.*got int8"),
    ({"noise_dtype": None}, TypeError, "`noise_dtype`.*got None"),
])
def test_bad_options(kw, error, words):
  with pytest.raises(error, match=words) as info:
    es.EvosaxStrategy(_strategy("Open_ES"), **kw)
  assert "`EvosaxStrategy`" in str(info.value), info.value


def test_bad_tell_arguments():
  wrapped = es.EvosaxStrategy(_strategy("PGPE"))
  params = wrapped.default_params
  state = wrapped.init(jax.random.key(0), START, params)
  population, state = wrapped.ask(jax.random.key(1), state, params)
  with pytest.raises(TypeError, match="EvosaxStrategy.tell.*NarrowPopulation"):
    wrapped.tell(jax.random.key(2), population.members(), jnp.zeros(16),
                 state, params)
  with pytest.raises(ValueError, match="fitness.*\\(16,\\)"):
    wrapped.tell(jax.random.key(2), population, jnp.zeros(15), state, params)
  with pytest.raises(TypeError, match="EvosaxStrategy.ask.*key"):
    wrapped.ask(0, state, params)
  with pytest.raises(ValueError, match="xs\\[0\\].*16"):
    es.evaluate(_loss, population, jnp.zeros(3))


_SHARDED = textwrap.dedent(r"""
    import json, sys
    # First, jaxfp8.es without evosax: it imports, and only the wrapper's
    # name needs evosax.
    sys.modules["evosax"] = None
    import jaxfp8.es
    assert jaxfp8.es.perturbations and jaxfp8.es.NarrowPopulation
    try:
      jaxfp8.es.EvosaxStrategy
      without_evosax = "EvosaxStrategy loaded"
    except ImportError:
      without_evosax = "ImportError"
    del sys.modules["evosax"]

    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from evosax.algorithms import Open_ES
    from jaxfp8 import es

    assert jax.device_count() == 4
    rows = NamedSharding(Mesh(np.array(jax.devices()), ("pop",)), P("pop"))
    POP, N = 16, 4096
    wrapped = es.EvosaxStrategy(Open_ES(POP, jnp.zeros(N)), method="exact")
    params = wrapped.default_params
    state = wrapped.init(jax.random.key(0), jnp.linspace(-1, 1, N), params)

    def generation(state, key, shard):
      population, state = wrapped.ask(key, state, params)
      if shard:
        population.noise = jax.lax.with_sharding_constraint(
            population.noise, rows)
      fitness = es.evaluate(lambda x: jnp.sum((x - 0.5) ** 2), population)
      new, _ = wrapped.tell(key, population, fitness, state, params)
      return population.noise, new.mean

    key = jax.random.key(7)
    noise, mean = jax.jit(lambda s, k: generation(s, k, True))(state, key)
    ref_noise, ref_mean = jax.jit(lambda s, k: generation(s, k, False))(
        state, key)
    print("RESULT " + json.dumps({
        "without_evosax": without_evosax,
        "equal": bool(np.array_equal(np.asarray(noise).view(np.uint8),
                                     np.asarray(ref_noise).view(np.uint8))),
        "shards": sorted({tuple(s.data.shape)
                          for s in noise.addressable_shards}),
        "max_abs_diff": float(jnp.max(jnp.abs(mean - ref_mean))),
        "moved": float(jnp.max(jnp.abs(ref_mean - state.mean)))}))
""")


@pytest.fixture(scope="module")
def sharded():
  # One subprocess: 4 simulated devices must be set before JAX starts.
  env = xla_flags.default_codegen_env(JAX_PLATFORMS="cpu")
  env["XLA_FLAGS"] += " --xla_force_host_platform_device_count=4"
  return xla_flags.child_result(_SHARDED, env)


def test_jaxfp8_es_imports_without_evosax(sharded):
  assert sharded["without_evosax"] == "ImportError", sharded


def test_sharded_population_matches_one_device(sharded):
  r = sharded
  assert r["equal"] and r["shards"] == [[4, 4096]], r
  assert r["moved"] > 0, r
  assert r["max_abs_diff"] <= 1e-6 * r["moved"] + 1e-7, r


def test_bench_es_evosax_quick_runs(capsys):
  from jaxfp8.tools import cli  # pylint: disable=g-import-not-at-top
  assert cli.main(["bench", "es", "--evosax", "--quick", "--methods",
                   "exact"]) == 0
  out = capsys.readouterr().out
  for row in ("| Open_ES evosax ask (float32) |",
              "| SNES EvosaxStrategy.ask exact |",
              "| Open_ES | EvosaxStrategy float8_e4m3fn exact |"):
    assert row in out, out
  assert "target <= 0.3x evosax's ask" in out, out
