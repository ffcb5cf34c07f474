"""jaxfp8.es.NarrowPopulation: its arguments, checked by their public names.

Its members and evaluation are tested with the evosax wrapper that makes it
(tests/es/test_evosax_strategy.py); this file needs no evosax.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8 import es
from jaxfp8._src.numerics import formats

NOISE = jnp.array([[1.0, -1.0, 0.5], [0.5, 2.0, -1.0]], jnp.float8_e4m3fn)
MEAN, STD = jnp.zeros(3), jnp.float32(0.1)
# A signed narrow format this JAX can't hold in arrays (float6), if any.
NOT_NATIVE = next((f.name for f in map(formats.get, formats.names())
                   if f.narrow and f.signed and not f.native), None)


@pytest.mark.parametrize("dtype,error,words", [
    ("e8m0", ValueError, "`dtype` argument to `NarrowPopulation` must be a "
                         "signed format.*got float8_e8m0fnu"),
    ("bogus", ValueError, "'bogus' for argument `dtype` of `NarrowPopulation`"),
    (jnp.int8, TypeError, "`dtype` argument to `NarrowPopulation` must be a "
                          "floating format.*got int8"),
    (None, TypeError, "`dtype` argument to `NarrowPopulation`.*got None"),
    (NOT_NATIVE, ValueError, "`dtype` argument to `NarrowPopulation` must be "
                             "a format this JAX.*holds in arrays"),
], ids=["unsigned", "unknown", "int8", "None", "not-native"])
def test_dtype_errors_name_the_dtype_argument(dtype, error, words):
  # They named `population_dtype`, EvosaxStrategy's name for it.
  if words.endswith("holds in arrays") and NOT_NATIVE is None:
    pytest.skip("every signed narrow format is held in arrays by this JAX")
  with pytest.raises(error, match=words) as info:
    es.NarrowPopulation(NOISE, MEAN, STD, dtype=dtype)
  assert "population_dtype" not in str(info.value)


@pytest.mark.parametrize("change,error,words", [
    ({"noise": "z"}, TypeError, "`noise` argument.*array.*got str"),
    ({"noise": [[1.0, 2.0, 3.0]]}, TypeError, "`noise` argument.*got list"),
    ({"noise": jnp.zeros(3, jnp.float8_e4m3fn)}, ValueError,
     r"`noise` argument.*\(popsize, num_dims\), got shape \(3,\)"),
    ({"noise": jnp.zeros((2, 3), jnp.int32)}, TypeError,
     "`noise` argument.*floating format, got int32"),
    ({"noise": jnp.ones((2, 3), "float8_e8m0fnu")}, ValueError,
     "`noise` argument.*signed format.*got float8_e8m0fnu"),
    ({"mean": "m"}, TypeError, "`mean` argument.*array or a scalar, got str"),
    ({"mean": jnp.zeros(4)}, ValueError,
     r"`mean` argument.*broadcast to \(num_dims,\) = \(3,\).*got shape \(4,\)"),
    ({"std": jnp.ones((2, 3))}, ValueError,
     r"`std` argument.*\(3,\).*got shape \(2, 3\)"),
    ({"std": "s"}, TypeError, "`std` argument.*got str"),
    ({"d": jnp.ones(4)}, ValueError, r"`d` argument.*got shape \(4,\)"),
    ({"b": jnp.eye(3)}, ValueError, "`b` argument.*needs.*`d`.*without d"),
    ({"d": jnp.ones(3), "b": jnp.eye(4)}, ValueError,
     r"`b` argument.*\(3, 3\), got shape \(4, 4\)"),
    ({"unravel": 3}, TypeError, "`unravel` argument.*callable, got int"),
], ids=["noise-str", "noise-list", "noise-1d", "noise-int", "noise-unsigned",
        "mean-str", "mean-shape", "std-shape", "std-str", "d-shape",
        "b-without-d", "b-shape", "unravel"])
def test_part_errors_name_the_argument(change, error, words):
  parts = {"noise": NOISE, "mean": MEAN, "std": STD, **change}
  with pytest.raises(error, match=words) as info:
    es.NarrowPopulation(**parts)
  assert "to `NarrowPopulation`" in str(info.value), info.value


def test_parts_that_fit_are_taken():
  # The vectors of every evosax layout, float32 and float6 noise, and
  # traced parts (EvosaxStrategy builds populations under jit).
  for d, b in ((None, None), (jnp.ones(3), None), (jnp.ones(3), jnp.eye(3))):
    for std in (0.1, jnp.full(3, 0.1), jnp.ones(1)):
      pop = es.NarrowPopulation(NOISE, MEAN, std, d, b)
      assert pop.members().shape == (2, 3)
  wide = es.NarrowPopulation(NOISE.astype(jnp.float32), MEAN, STD)
  codes = jaxfp8.cast(np.asarray(NOISE, np.float32), "float6_e2m3fn")
  assert es.NarrowPopulation(codes, MEAN, STD).shape == (2, 3)
  traced = jax.jit(lambda z, m: es.NarrowPopulation(z, m, STD).members())(
      NOISE, MEAN)
  np.testing.assert_array_equal(traced, wide.members())


@pytest.mark.parametrize("population", ["x", {}, 3, jnp.float32(1)])
def test_evaluate_names_a_population_it_cannot_map(population):
  with pytest.raises(TypeError, match="`population` argument to `evaluate`"):
    es.evaluate(lambda m: m, population)


def test_evaluate_maps_stacked_members_as_they_are():
  got = es.evaluate(lambda m: m["a"].sum(), {"a": jnp.ones((2, 3))})
  np.testing.assert_array_equal(got, [3.0, 3.0])
