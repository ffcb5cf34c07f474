"""The layout of JAX's initializer closures and factories that
jaxfp8._src.install.routing relies on, and its routing of them.

Each test checks one fact routing.py writes down, so that an upgrade that
changes it fails here by name, instead of install() silently doing nothing.
"""
import inspect
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8._src.install import routing
from jaxfp8._src.nn import initializers as ours

KEY = jax.random.key(0)
# Every jax.nn.initializers factory whose closures install() routes, with
# the arguments routing expects its closures to hold.
CLOSURES = {
    "constant": ("value",),
    "uniform": ("scale",),
    "normal": ("stddev",),
    "truncated_normal": ("lower", "stddev", "upper"),
    "variance_scaling": ("batch_axis", "distribution", "in_axis", "mode",
                         "out_axis", "scale"),
    "orthogonal": ("column_axis", "scale"),
    "delta_orthogonal": ("column_axis", "scale"),
}


@pytest.fixture(autouse=True)
def _always_uninstall():
  yield
  jaxfp8.uninstall()


def jax_factories():
  return {name: getattr(jax.nn.initializers, name) for name in CLOSURES}


def test_every_factory_closure_has_the_layout_routing_routes():
  kinds, unknown = routing.learn_init_closures(jax_factories())
  assert unknown == ()
  assert {k.factory: k.arguments for k in kinds} == CLOSURES
  for k in kinds:
    assert k.code.co_varnames[:k.code.co_argcount] == routing.INIT_PARAMETERS
    assert k.router.co_freevars == k.code.co_freevars
    assert k.router.co_name == k.code.co_name
    assert k.namespace is jax.nn.initializers.normal.__globals__


def test_a_closure_with_other_parameters_is_reported_not_routed():
  def normal(stddev=1e-2, dtype=None):  # a closure taking more
    def init(key, shape, dtype=dtype, out_sharding=None, mean=0.0):
      return (mean, stddev, dtype, key, shape, out_sharding)
    return init
  kinds, unknown = routing.learn_init_closures({**jax_factories(),
                                                "normal": normal})
  assert unknown == ("normal",)
  assert "normal" not in {k.factory for k in kinds}


def test_a_closure_holding_other_cells_gets_a_router_of_its_own():
  """The router is made from the closure's free variables, whatever they
  are: a JAX that adds or renames one is still routed, cell for cell."""
  def normal(stddev=1e-2, dtype=None, mean=0.0, zeta=None):
    def init(key, shape, dtype=dtype, out_sharding=None):
      return (zeta, mean, stddev, dtype, key, shape, out_sharding)
    return init
  kinds, unknown = routing.learn_init_closures({**jax_factories(),
                                                "normal": normal})
  assert unknown == ()
  kind = {k.factory: k for k in kinds}["normal"]
  assert kind.arguments == ("mean", "stddev", "zeta")
  assert kind.router.co_freevars == kind.code.co_freevars
  closure = normal(0.5, mean=2.0, zeta="z")
  values = tuple(c.cell_contents for c in closure.__closure__)
  assert dict(zip(kind.arguments, values)) == {
      "mean": 2.0, "stddev": 0.5, "zeta": "z"}
  seen = []
  try:
    routing.route_init_closures(kinds, lambda *a: seen.append(a) or a[3]())
    out = closure(KEY, (3,), jnp.float32)
  finally:
    routing.unroute_init_closures()
  assert out == ("z", 2.0, 0.5, jnp.float32, KEY, (3,), None)
  assert [s[:2] for s in seen] == [
      ("normal", {"mean": 2.0, "stddev": 0.5, "zeta": "z"})]


def test_named_factories_make_variance_scaling_closures():
  vs = jax.nn.initializers.variance_scaling(1.0, "fan_in", "normal").__code__
  for name in ("glorot_uniform", "glorot_normal", "lecun_uniform",
               "lecun_normal", "he_uniform", "he_normal"):
    assert getattr(jax.nn.initializers, name)().__code__ is vs, name
  # ... and every closure of one factory shares its code object.
  assert (jax.nn.initializers.normal(0.1).__code__
          is jax.nn.initializers.normal(0.2).__code__)


def test_every_routed_factory_is_one_jaxfp8_has():
  assert set(CLOSURES) <= set(ours.FACTORIES)
  for name, arguments in CLOSURES.items():
    assert set(arguments) <= set(inspect.signature(getattr(ours, name))
                                 .parameters), name


def test_router_and_original_read_the_same_cells():
  kinds, _ = routing.learn_init_closures(jax_factories())
  kind = {k.factory: k for k in kinds}["truncated_normal"]
  closure = jax.nn.initializers.truncated_normal(0.5, lower=-1.0, upper=3.0)
  values = tuple(c.cell_contents for c in closure.__closure__)
  assert dict(zip(kind.arguments, values)) == {
      "lower": -1.0, "stddev": 0.5, "upper": 3.0}
  args = (KEY, (8,), jnp.float32, None)
  np.testing.assert_array_equal(kind.run_original(values, args),
                                closure(*args))


def test_route_swaps_code_and_unroute_restores_it():
  closure = jax.nn.initializers.normal(0.5)
  original = closure.__code__
  two = closure(KEY, (2,), jnp.float32)
  calls = []

  def answer(factory, arguments, args, run_jax):
    calls.append((factory, arguments, args[1:]))
    # JAX's closure, as called and with other arguments.
    np.testing.assert_array_equal(run_jax(KEY, (2,), jnp.float32, None),
                                  two)
    return run_jax()

  kinds, _ = routing.learn_init_closures(jax_factories())
  try:
    assert routing.route_init_closures(kinds, answer) >= 1
    assert closure.__code__ is not original
    out = closure(KEY, (3,), jnp.float32)
  finally:
    routing.unroute_init_closures()
  assert closure.__code__ is original
  assert calls == [("normal", {"stddev": 0.5}, ((3,), jnp.float32, None))]
  np.testing.assert_array_equal(out, closure(KEY, (3,), jnp.float32))


def test_every_factory_is_a_plain_function_routing_can_swap():
  """route_factories skips what it can't swap (a closure, a non-function):
  every factory install() routes is a plain function of JAX's, without
  keyword-only defaults (the router's name slot is its own)."""
  for name in ours.FACTORIES:
    fn = getattr(jax.nn.initializers, name)
    assert isinstance(fn, types.FunctionType), name
    assert fn.__code__.co_freevars == () and fn.__kwdefaults__ is None, name
