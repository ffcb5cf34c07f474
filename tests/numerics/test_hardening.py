"""Regressions of issue 15: no silent wrong result, and clear errors.

One test (or a few) per class the fuzz run found: laws that left float64's
range, the cast method's float32 parameters, 64-bit integers wrapping through
int32, subnormal amaxes, bad values passed through, and unclear errors. Each
was checked to fail on the tree before its fix.
"""
from __future__ import annotations

import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8 import es
from jaxfp8 import mx
from jaxfp8 import ops
from jaxfp8 import policy as P
from jaxfp8 import random as jr
from jaxfp8._src.numerics import rounding
from jaxfp8._src.random import distributions
from jaxfp8._src.random import laws
from jaxfp8.nn import initializers as inits

KEY = jax.random.key(0)


def _values(x):
  return np.asarray(jaxfp8.decode(x) if isinstance(x, jaxfp8.CodeArray)
                    else jnp.asarray(x).astype(jnp.float32), np.float64)


# -- laws beyond float64's range ----------------------------------------------

@pytest.mark.parametrize("method", ["exact", "table"])
def test_uniform_over_most_of_float64_saturates_both_ways(method):
  v = _values(jr.uniform(KEY, (1024,), "e4m3", -1e308, 1e308, method=method))
  assert set(np.unique(v)) == {-448.0, 448.0}
  assert 400 < (v > 0).sum() < 624


@pytest.mark.parametrize("method", ["exact", "table"])
def test_triangular_over_a_huge_span(method):
  v = _values(jr.triangular(KEY, -1e300, 0.0, 1e300, (1024,), "e4m3",
                            method=method))
  assert set(np.unique(v)) == {-448.0, 448.0}
  assert 400 < (v > 0).sum() < 624


@pytest.mark.parametrize("dist, params", [
    ("uniform", {"minval": -1e308, "maxval": 1e308}),
    ("uniform", {"minval": -1.7e308, "maxval": 1.7e308}),
    ("triangular", {"left": -1e300, "mode": 0.0, "right": 1e300}),
    ("triangular", {"left": -1.7e308, "mode": 1e308, "right": 1.7e308}),
    ("double_sided_maxwell", {"loc": 1e308, "scale": 1.0}),
])
def test_huge_laws_are_probabilities_and_saturate(dist, params):
  v, p = laws.rounded_law(dist, "e4m3", **params)
  assert np.all(np.isfinite(p)) and p.sum() == pytest.approx(1.0)
  assert p[0] + p[-1] == pytest.approx(1.0)


def test_uniform_law_is_scale_free():
  # Scaling the interval by 2^k far beyond float64 changes nothing relative.
  base = distributions.cdf("uniform", [-0.5, 0.25, 0.75], minval=-1.0,
                           maxval=1.0)
  for k in (1000, -1060):
    got = distributions.cdf("uniform", np.ldexp([-0.5, 0.25, 0.75], k),
                            minval=np.ldexp(-1.0, k), maxval=np.ldexp(1.0, k))
    np.testing.assert_array_equal(got, base)


def test_tiny_and_subnormal_spans():
  # A span of subnormal float64s: the whole mass in the zero bucket.
  v, p = laws.rounded_law("uniform", "e4m3", minval=1e-320, maxval=3e-320)
  assert p[v == 0][0] == 1.0
  v, p = laws.rounded_law("rayleigh", "e4m3", scale=1e-200)
  assert p[v == 0][0] == 1.0
  v, p = laws.rounded_law("weibull_min", "e4m3", scale=1e-300,
                          concentration=50.0)
  assert p[v == 0][0] == 1.0
  v, p = laws.rounded_law("weibull_min", "e4m3", scale=1e300,
                          concentration=1e-3)
  assert np.all(np.isfinite(p)) and p.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("b", [1e-3, 1e-4, 1e-12])
def test_pareto_with_a_small_b(b):
  v, p = laws.rounded_law("pareto", "e4m3", b=b)
  assert np.all(np.isfinite(p)) and p[-1] > 0.99
  x = _values(jr.pareto(KEY, b, (64,), "e4m3"))
  assert np.all((x >= 1) & (x <= 448))


def test_truncated_normal_beyond_float64_is_refused_by_name():
  with pytest.raises(ValueError, match="truncated_normal.*lower=40.0"):
    laws.rounded_law("truncated_normal", "e4m3", lower=40.0, upper=np.inf)
  with pytest.raises(ValueError, match="truncated_normal"):
    jr.truncated_normal(KEY, 40.0, np.inf, (4,), "e4m3")


# -- the cast method and float32 ------------------------------------------------

def test_cast_method_refuses_parameters_beyond_float32():
  with pytest.raises(ValueError, match="`minval` argument to `uniform`.*"
                     "float32"):
    jr.uniform(KEY, (8,), "e4m3", -1e300, 1e300, method="cast")
  with pytest.raises(ValueError, match="maxval - minval.*uniform"):
    jr.uniform(KEY, (8,), "e4m3", -3e38, 3e38, method="cast")
  with pytest.raises(ValueError, match="`scale` argument to `rayleigh`.*"
                     "float32"):
    jr.rayleigh(KEY, 1e-50, (8,), "e4m3", method="cast")
  # Stochastic rounding picks cast by default: the same rule.
  with pytest.raises(ValueError, match="`right` argument to `triangular`"):
    jr.triangular(KEY, 0.0, 1.0, 1e40, (8,), "e4m3", rounding="stochastic")


def test_cast_method_within_float32_has_no_nan():
  x = _values(jr.uniform(KEY, (256,), "e4m3", -1e38, 1e38, method="cast"))
  assert not np.isnan(x).any() and set(np.unique(x)) <= {-448.0, 448.0}


# -- 64-bit integers -------------------------------------------------------------

def test_int64_casts_do_not_wrap():
  np.testing.assert_array_equal(
      _values(jaxfp8.cast(np.array([2**40, 2**31], np.int64), "e5m2")),
      [57344.0, 57344.0])
  assert _values(jaxfp8.cast(np.int64(-2**40), "e4m3")) == -448.0
  assert _values(jaxfp8.cast(10**30, "e4m3")) == 448.0
  assert _values(jaxfp8.cast(np.array([2**63 - 1], np.uint64), "e5m2")) == (
      57344.0)


def test_integers_round_once_to_float32():
  # Through float64 first, 2^62 + 2^38 + 1 would round to 2^62 + 2^38, a tie
  # in float32 that goes to even (2^62): one rounding gives 2^62 + 2^39.
  n = 2**62 + 2**38 + 1
  want = float(2**62 + 2**39)
  for x in (n, np.int64(n), np.array([n], np.int64)):
    got = rounding.to_float32(x, fn="t")
    assert got.dtype == jnp.float32 and float(got.reshape(-1)[0]) == want
  assert float(rounding.to_float32(2**200, fn="t")) == np.inf
  assert float(rounding.to_float32(-(2**200), fn="t")) == -np.inf


def test_int64_in_amax_mx_and_sampler_parameters():
  assert float(P.amax(np.array([2**40, -3], np.int64))) == 2.0**40
  q = mx.quantize(np.full((32,), 2**31, np.int64), "mxfp8")
  assert np.all(np.asarray(q.dequantize()) == 2.0**31)
  x = _values(jr.uniform(KEY, (256,), "e4m3", np.int64(0),
                         np.array(2**31, np.int64), method="cast"))
  assert np.all(x >= 0) and x.max() == 448.0


# -- subnormal amax ----------------------------------------------------------------

def test_subnormal_amax_is_an_amax():
  x = jnp.array([1e-38, -5e-39], jnp.bfloat16)
  a = P.amax(x)
  assert float(a) == float(np.float32(jnp.float32(x[0])))
  assert float(jax.jit(P.amax)(x)) == float(a)
  for fn in (lambda x: P.CurrentScaling("e4m3").quantize(x),
             jax.jit(lambda x: P.CurrentScaling("e4m3").quantize(x))):
    q, scale = fn(x)
    assert float(scale) == np.finfo(np.float32).tiny
    np.testing.assert_array_equal(_values(q), [0.875, -0.4375])
  s = P.DelayedScaling.create("e4m3").update(a)
  assert float(s.scale) == np.finfo(np.float32).tiny
  assert np.all(_values(s.quantize(x)[0]) != 0)


def test_subnormal_amax_scale_is_exact_with_a_margin():
  a = np.float32(1e-39)
  s = float(P.compute_scale(jnp.float32(a), "e4m3", margin=126))
  assert s == pytest.approx(float(a) * 2.0**126 / 448, rel=1e-6)


# -- bad values passed through -------------------------------------------------

def test_bad_values_are_refused():
  with pytest.raises(ValueError, match="`previous` argument to "
                     "`compute_scale`"):
    P.compute_scale(jnp.float32(1.0), "e4m3", previous=np.nan)
  with pytest.raises(ValueError, match="`sigma` argument to "
                     "`sample_population`"):
    es.sample_population(KEY, jnp.ones(4), np.nan, 8, "e4m3")
  with pytest.raises(TypeError, match="`saturate` argument to `cast`"):
    jaxfp8.cast(jnp.array([1000.0]), "e4m3", saturate="no")
  with pytest.raises(TypeError, match="`saturate` argument to `encode`"):
    jaxfp8.encode(jnp.array([1000.0]), "e4m3", saturate=1)
  with pytest.raises(TypeError, match="`saturate` argument to `cast`.*traced"):
    jax.jit(lambda x, s: jaxfp8.cast(x, "e4m3", saturate=s))(
        jnp.ones(2), True)
  with pytest.raises(TypeError, match="`d` argument to `ball`"):
    jr.ball(KEY, 2.5, dtype="e4m3")
  with pytest.raises(TypeError, match="`n` argument to `orthogonal`"):
    jr.orthogonal(KEY, 1.5, dtype="e4m3")
  with pytest.raises(ValueError, match="`d` argument to `ball`"):
    jr.ball(KEY, -1, dtype="e4m3")
  with pytest.raises(ValueError, match="`n` argument to `orthogonal`"):
    jr.orthogonal(KEY, -2, dtype="e4m3")


# -- unclear errors --------------------------------------------------------------

@pytest.mark.parametrize("name", ["he_normal", "glorot_uniform",
                                  "lecun_normal", "orthogonal", "normal"])
@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0,), (3, 0, 2)])
def test_zero_size_initializers_are_empty(name, shape):
  init = getattr(inits, name)()
  for dtype in ("e4m3", "e2m3", jnp.float32):
    out = init(KEY, shape, dtype)
    assert tuple(out.shape) == shape


def test_float6_codearray_into_jnp_asarray_is_a_clear_type_error():
  code = ("import jax.numpy as jnp, jaxfp8\n"
          "y = jaxfp8.encode(jnp.ones(3), 'e2m3')\n"
          "try:\n  jnp.asarray(y)\nexcept TypeError as e:\n  print(e)\n"
          "print(jnp.asarray(jaxfp8.encode(jnp.ones(3) * 3, 'e4m3')))\n")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=300, check=True).stdout
  assert "jaxfp8.decode" in out and "float6_e2m3fn" in out
  assert "[3 3 3]" in out


@pytest.mark.parametrize("interpret", [True, None])
def test_dot_general_is_validated_on_every_path(interpret):
  x = jnp.ones((3, 32), jnp.float8_e4m3fn)
  w = jnp.ones((16, 5), jnp.float8_e4m3fn)
  with pytest.raises(TypeError, match="dot_general.*contracting"):
    ops.dot_general(x, w, (((1,), (0,)), ((), ())), interpret=interpret)
  with pytest.raises(TypeError, match="`dimension_numbers` argument to "
                     "`dot_general`"):
    ops.dot_general(x, jnp.ones((32, 5), jnp.float8_e4m3fn),
                    (((5,), (0,)), ((), ())), interpret=interpret)


def test_internal_errors_became_named_ones():
  with pytest.raises(ValueError, match="`fitness` argument to "
                     "`centered_rank`"):
    es.centered_rank(jnp.float32(1.0))
  with pytest.raises(ValueError, match="`amax_value` argument to "
                     "`DelayedScaling.update`"):
    P.DelayedScaling.create("e4m3").update(jnp.ones(3))
  with pytest.raises(ValueError, match="`x` argument to `amax`"):
    P.amax(jnp.zeros((0, 3)))
  for bad in (np.array(["a"]), np.array([object()]), np.array([1j])):
    with pytest.raises(TypeError, match="`x` argument to `cast`"):
      jaxfp8.cast(bad, "e4m3")


@pytest.mark.filterwarnings("ignore:jaxfp8.* is deprecated:DeprecationWarning")
def test_fp8_dot_general_checks_formats_when_built():
  with pytest.raises(ValueError, match="fwd_format.*Fp8DotGeneral"):
    P.Fp8DotGeneral(fwd_format="e4m2")
  with pytest.raises(ValueError, match="Fp8DotGeneral"):
    P.Fp8DotGeneral(scaling="sometimes")
  # An MX block format is a different op: the error points to it.
  with pytest.raises(ValueError, match="MX block format.*jaxfp8.recipes.RecipeDotGeneral"):
    P.Fp8DotGeneral(fwd_format="mxfp8_e4m3")
  with pytest.raises(ValueError, match="bwd_format.*NnxFp8DotGeneral.*MX block"):
    P.NnxFp8DotGeneral(bwd_format="mxfp8_e5m2")


def test_report_ops_did_you_mean():
  from jaxfp8.tools.report import command as report_command  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match="unknown nrmal; did you mean 'normal'"):
    report_command._select_ops("nrmal", 64)  # pylint: disable=protected-access


# -- issue 29: inner errors that reached the user -------------------------

@pytest.mark.parametrize("bad", [np.array(["a", "b"]), np.array([1.0, None]),
                                 np.array([1.0, 2.0], object),
                                 np.array(["2026-01-01"], "datetime64[D]"),
                                 np.array([1j])])
def test_decode_of_arrays_of_no_real_number_is_a_type_error(bad):
  with pytest.raises(TypeError, match="`x` argument to `decode` must be an "
                     "array of real numbers.*dtype "
                     + re.escape(str(bad.dtype))):
    jaxfp8.decode(bad)


def test_decode_still_takes_every_real_dtype():
  for x in (np.array([1, 2]), np.array([True]), jnp.ones(2, jnp.bfloat16),
            np.ones(2, jnp.float8_e4m3fn), np.float32(3.0)):
    assert jaxfp8.decode(x).dtype == jnp.float32


@pytest.mark.parametrize("name", ["variance_scaling", "lecun_normal",
                                  "he_uniform"])
@pytest.mark.parametrize("arg,value,shape", [
    ("in_axis", 5, (4, 4)), ("out_axis", -7, (4, 4)),
    ("in_axis", (0, 9), (4, 4, 2)), ("batch_axis", 4, (4, 4)),
    ("in_axis", -3, (4, 4))])
@pytest.mark.parametrize("dtype", ["e4m3", jnp.float32])
def test_initializer_axes_out_of_range_name_the_argument(name, arg, value,
                                                         shape, dtype):
  make = getattr(inits, name)
  args = (1.0, "fan_in", "normal") if name == "variance_scaling" else ()
  init = make(*args, **{arg: value})
  with pytest.raises(ValueError, match=f"`{arg}` argument to `{name}` is "
                     rf"{re.escape(repr(value))}, out of range for shape "
                     rf"{re.escape(str(shape))}"):
    init(KEY, shape, dtype)
  with pytest.raises(IndexError):  # what JAX's raised, still caught
    init(KEY, shape, dtype)


def test_initializer_axes_take_what_jax_takes():
  # An int, a tuple, a list or a NumPy array of axes, as JAX's own.
  for axes in (0, (0,), [0], np.array([0])):
    for dtype in ("e4m3", jnp.float32):
      init = inits.variance_scaling(1.0, "fan_in", "normal", in_axis=axes)
      assert init(KEY, (4, 4), dtype).shape == (4, 4)


def test_initializer_axes_of_another_type_are_a_type_error():
  with pytest.raises(TypeError, match="`in_axis` argument to `lecun_normal` "
                     "must be an int or a sequence of ints, got 'a'"):
    inits.lecun_normal(in_axis="a")(KEY, (4, 4), "e4m3")
  # JAX takes a Python int alone, not a NumPy scalar.
  with pytest.raises(TypeError, match="`out_axis` argument to `he_normal`"):
    inits.he_normal(out_axis=np.int64(1))(KEY, (4, 4), jnp.float32)


@pytest.mark.parametrize("fn", ["mx.matmul", "mx.dot_general",
                                "fp8_dot_general", "ops.dot_general",
                                "recipes.dot_general"])
@pytest.mark.filterwarnings("ignore:jaxfp8.* is deprecated:DeprecationWarning")
def test_preferred_element_type_is_checked_by_name(fn):
  a = jnp.ones((4, 64))
  dims = (((1,), (0,)), ((), ()))
  call = {
      "mx.matmul": lambda p: mx.matmul(
          mx.quantize(a, "mxfp8_e4m3"), mx.quantize(a.T, "mxfp8_e4m3",
                                                    axis=0),
          preferred_element_type=p),
      "mx.dot_general": lambda p: mx.dot_general(
          a, a.T, dims, preferred_element_type=p),
      "fp8_dot_general": lambda p: P.fp8_dot_general(
          a, a.T, dims, preferred_element_type=p),
      "recipes.dot_general": lambda p: jaxfp8.recipes.dot_general(
          a, a.T, dims, preferred_element_type=p),
      "ops.dot_general": lambda p: ops.dot_general(
          a.astype(jnp.float8_e4m3fn), a.T.astype(jnp.float8_e4m3fn), dims,
          preferred_element_type=p),
  }[fn]
  name = fn.split(".")[-1]
  with pytest.raises(ValueError, match="Unknown format 'bogus' for argument "
                     f"`preferred_element_type` of `{name}`"):
    call("bogus")
  with pytest.raises(TypeError, match="`preferred_element_type` argument to "
                     f"`{name}` is float6_e2m3fn, which XLA can't hold"):
    call("e2m3")
  assert call("bf16").dtype == jnp.bfloat16
  assert call(jnp.float32).dtype == jnp.float32
