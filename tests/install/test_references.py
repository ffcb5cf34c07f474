"""Where JAX, Flax and Haiku hold what install() replaces: the places
jaxfp8._src.install.references looks in.

Each test checks one place references.py names, so that an upgrade that
moves it fails here by name, instead of install() silently missing it.
"""
import inspect

import haiku as hk
import jax

from jaxfp8._src.install import references


def test_references_find_jax_and_flax_copies():
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  from flax import nnx  # pylint: disable=g-import-not-at-top
  targets = [jax.random.normal, jax.nn.initializers.lecun_normal]
  found = {(m.__name__, a)
           for m, a, _ in references.references(map(id, targets))}
  assert ("jax.random", "normal") in found
  # The module JAX's initializers draw through.
  random_module = jax.nn.initializers.normal.__globals__["random"]
  assert (random_module.__name__, "normal") in found
  assert ("jax.nn.initializers", "lecun_normal") in found
  assert (nn.initializers.__name__, "lecun_normal") in found
  assert (nnx.initializers.__name__, "lecun_normal") in found


def test_float_samplers():
  found = references.float_samplers(["normal"])
  for name in ("normal", "uniform", "truncated_normal", "gamma",
               "orthogonal", "exponential"):
    assert found[name] is getattr(jax.random, name), name
  for name in ("randint", "bits", "poisson", "key"):
    assert name not in found


def test_haiku_initializer_classes_are_found():
  classes = {c.__name__: c for c in references.haiku_initializer_classes()}
  assert set(classes) >= {"Constant", "RandomNormal", "TruncatedNormal",
                          "RandomUniform", "VarianceScaling",
                          "UniformScaling", "Orthogonal", "Identity"}
  for name, cls in classes.items():
    assert getattr(hk.initializers, name) is cls
    assert list(inspect.signature(vars(cls)["__call__"]).parameters) == [
        "self", "shape", "dtype"], name
