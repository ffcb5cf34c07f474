"""The JAX, Flax and Haiku internals jaxfp8._src.compat relies on.

Each test checks one fact compat.py writes down (its layout, its place), so
that an upgrade that moves it fails here by name, instead of install() or
the constant guard silently doing nothing.
"""
import inspect

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8._src import compat
from jaxfp8._src.nn import initializers as ours

KEY = jax.random.key(0)
# Every jax.nn.initializers factory whose closures install() routes, with
# the arguments compat expects its closures to hold.
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


# --- the constant handlers (constant_guard) ----------------------------------


def test_constant_handlers_exist_and_are_guarded():
  from jax._src.interpreters import mlir  # pylint: disable=g-import-not-at-top
  assert callable(mlir.get_constant_handler)
  types_ = compat.ndarray_constant_types()
  from jax._src import literals  # pylint: disable=g-import-not-at-top
  assert types_ == (np.ndarray, literals.TypedNdArray)
  for t in types_:
    handler = compat.get_constant_handler(t)
    assert handler is not None, t
    assert getattr(handler, "jaxfp8_guard", False), t  # import jaxfp8 did it
  assert compat.get_constant_handler(type("NotAnArray", (), {})) is None


def test_tracer_is_jax_tracer():
  seen = []
  jax.jit(lambda x: seen.append(isinstance(x, compat.Tracer)) or x)(1.0)
  assert seen == [True]


# --- the closures of jax.nn.initializers ----------------------------------------


def test_every_factory_closure_has_the_layout_compat_routes():
  kinds, unknown = compat.learn_init_closures(jax_factories())
  assert unknown == ()
  assert {k.factory: k.arguments for k in kinds} == CLOSURES
  for k in kinds:
    assert k.code.co_varnames[:k.code.co_argcount] == compat.INIT_PARAMETERS
    assert k.router.co_freevars == k.code.co_freevars
    assert k.router.co_name == k.code.co_name
    assert k.namespace is jax.nn.initializers.normal.__globals__


def test_a_closure_laid_out_otherwise_is_reported_not_routed():
  def normal(stddev=1e-2, dtype=None, mean=0.0):  # a closure holding more
    def init(key, shape, dtype=dtype, out_sharding=None):
      return (mean, stddev, dtype, key, shape, out_sharding)
    return init
  kinds, unknown = compat.learn_init_closures({**jax_factories(),
                                               "normal": normal})
  assert unknown == ("normal",)
  assert "normal" not in {k.factory for k in kinds}


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
  kinds, _ = compat.learn_init_closures(jax_factories())
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
  calls = []

  def answer(factory, arguments, args, run_jax):
    calls.append((factory, arguments, args[1:]))
    return run_jax()

  kinds, _ = compat.learn_init_closures(jax_factories())
  try:
    assert compat.route_init_closures(kinds, answer) >= 1
    assert closure.__code__ is not original
    out = closure(KEY, (3,), jnp.float32)
  finally:
    compat.unroute_init_closures()
  assert closure.__code__ is original
  assert calls == [("normal", {"stddev": 0.5}, ((3,), jnp.float32, None))]
  np.testing.assert_array_equal(out, closure(KEY, (3,), jnp.float32))


# --- where JAX, Flax and Haiku hold what install() replaces -----------------------


def test_references_find_jax_and_flax_copies():
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  targets = [jax.random.normal, jax.nn.initializers.lecun_normal]
  found = {(m.__name__, a) for m, a, _ in compat.references(map(id, targets))}
  assert ("jax.random", "normal") in found
  # The module JAX's initializers draw through.
  random_module = jax.nn.initializers.normal.__globals__["random"]
  assert (random_module.__name__, "normal") in found
  assert ("jax.nn.initializers", "lecun_normal") in found
  assert (nn.initializers.__name__, "lecun_normal") in found
  assert (nnx.initializers.__name__, "lecun_normal") in found


def test_float_samplers():
  found = compat.float_samplers(["normal"])
  for name in ("normal", "uniform", "truncated_normal", "gamma",
               "orthogonal", "exponential"):
    assert found[name] is getattr(jax.random, name), name
  for name in ("randint", "bits", "poisson", "key"):
    assert name not in found


def test_haiku_initializer_classes_are_found():
  classes = {c.__name__: c for c in compat.haiku_initializer_classes()}
  assert set(classes) >= {"Constant", "RandomNormal", "TruncatedNormal",
                          "RandomUniform", "VarianceScaling",
                          "UniformScaling", "Orthogonal", "Identity"}
  for name, cls in classes.items():
    assert getattr(hk.initializers, name) is cls
    assert list(inspect.signature(vars(cls)["__call__"]).parameters) == [
        "self", "shape", "dtype"], name



def test_gpu_lowering_target_lowers_for_cuda_without_a_gpu():
  """JAX >= 0.11 refuses to lower for CUDA without a GPU unless an abstract
  device is in scope; the context must provide one (or JAX must need none)."""
  if jax.default_backend() == "cpu":
    assert hasattr(jax.sharding, "AbstractDevice")
    assert hasattr(jax.sharding, "use_abstract_mesh")
  with compat.gpu_lowering_target():
    text = jax.jit(lambda x: x * 2).trace(
        jax.ShapeDtypeStruct((8,), jax.numpy.float32)).lower(
            lowering_platforms=("cuda",)).as_text()
  assert "multiply" in text
