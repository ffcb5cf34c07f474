"""jaxfp8.es across two processes equals one process of the same devices.

Two local processes of two CPU devices each, joined by JAX's runtime
(``jax.distributed``, gloo collectives), and one process of four devices
(tests/multiprocess.py) run, with the population split by rows over the
four devices: ``es.perturbations`` (fp8 and float6 codes), one OpenAI-ES
generation (ask, evaluate, tell) and one generation of evosax's OpenES
through ``EvosaxStrategy``. Populations are equal bit for bit; the new means
are sums over members across devices, so equal within float32 rounding of
the sum.
"""
from __future__ import annotations

import numpy as np
import pytest

import multiprocess

pytest.importorskip("evosax")

_CHILD = r"""
import numpy as np
import jax, jax.numpy as jnp, optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jax.experimental import multihost_utils
from evosax.algorithms import Open_ES
import jaxfp8
from jaxfp8 import es

rows = NamedSharding(Mesh(np.array(jax.devices()), ("pop",)), P("pop"))
POP, N = 16, 1024
out = {}

def gathered(x):
  x = x.codes if isinstance(x, jaxfp8.CodeArray) else x
  return np.asarray(multihost_utils.process_allgather(x, tiled=True))

for fmt in ("float8_e4m3fn", "float6_e2m3fn"):
  draw = jax.jit(lambda: es.perturbations(jax.random.key(42), POP, (N,), fmt),
                 out_shardings=rows)
  x = draw()
  out[f"perturbations/{fmt}"] = gathered(x)
  out[f"perturbations/{fmt}/local_rows"] = np.asarray(
      [s.data.shape[0] for s in jax.tree_util.tree_leaves(x)[0].addressable_shards])

opt = es.OpenAIES(POP, optax.sgd(1.0), sigma=0.1, dtype="e4m3")

@jax.jit
def openai_generation():
  state = opt.init(jnp.zeros(N))
  eps = jax.lax.with_sharding_constraint(opt.ask(jax.random.key(7), state),
                                         rows)
  loss = jnp.sum((opt.candidates(state, eps) - 0.5) ** 2, axis=1)
  return eps, opt.tell(state, eps, loss).mean

out["OpenAIES/eps"], out["OpenAIES/mean"] = map(gathered, openai_generation())

wrapped = es.EvosaxStrategy(Open_ES(POP, jnp.zeros(N)), method="exact")

@jax.jit
def evosax_generation():
  params = wrapped.default_params
  state = wrapped.init(jax.random.key(0), jnp.linspace(-1, 1, N), params)
  population, state = wrapped.ask(jax.random.key(7), state, params)
  population.noise = jax.lax.with_sharding_constraint(population.noise, rows)
  fitness = es.evaluate(lambda x: jnp.sum((x - 0.5) ** 2), population)
  new, _ = wrapped.tell(jax.random.key(7), population, fitness, state, params)
  return population.noise, new.mean

out["evosax/noise"], out["evosax/mean"] = map(gathered, evosax_generation())
if jax.process_index() == 0:
  np.savez(os.environ["JAXFP8_TEST_OUT"], **out)
emit({"process": jax.process_index()})
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  d = tmp_path_factory.mktemp("es_across_processes")
  two = multiprocess.run(_CHILD, env={"JAXFP8_TEST_OUT": str(d / "two.npz")})
  multiprocess.run_one(_CHILD, env={"JAXFP8_TEST_OUT": str(d / "one.npz")})
  assert [r["process"] for r in two] == [0, 1]
  return np.load(d / "two.npz"), np.load(d / "one.npz")


@pytest.mark.parametrize("name", ["perturbations/float8_e4m3fn",
                                  "perturbations/float6_e2m3fn",
                                  "OpenAIES/eps", "evosax/noise"])
def test_populations_are_equal_bit_for_bit(runs, name):
  two, one = runs
  assert two[name].shape == (16, 1024) and two[name].itemsize == 1
  np.testing.assert_array_equal(two[name].view(np.uint8),
                                one[name].view(np.uint8))
  assert len(np.unique(two[name].view(np.uint8))) > 16  # a real draw


def test_each_process_holds_its_rows(runs):
  two, one = runs
  for fmt in ("float8_e4m3fn", "float6_e2m3fn"):
    # 16 members over 4 devices: 4 rows a device, 2 devices a process.
    np.testing.assert_array_equal(two[f"perturbations/{fmt}/local_rows"],
                                  [4, 4])
    np.testing.assert_array_equal(one[f"perturbations/{fmt}/local_rows"],
                                  [4, 4, 4, 4])


@pytest.mark.parametrize("name", ["OpenAIES/mean", "evosax/mean"])
def test_the_update_is_the_one_process_update(runs, name):
  two, one = runs
  moved = float(np.max(np.abs(one[name])))
  assert moved > 0
  np.testing.assert_allclose(two[name], one[name], rtol=0,
                             atol=1e-6 * moved + 1e-7)
