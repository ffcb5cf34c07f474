"""jaxfp8.random: signatures, keys, transformations, methods, bad inputs."""
import inspect
import os
import subprocess
import sys
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8 import formats
from jaxfp8._src import compat
from jaxfp8._src.random import distributions

R = jaxfp8.random
FMTS = ("float8_e4m3fn", "float8_e5m2", "float4_e2m1fn", "float6_e2m3fn")
K = jax.random.key(0)

SAMPLERS = [n for n in R.__all__ if hasattr(jax.random, n)]
WITH_CDF = ("uniform", "normal", "truncated_normal", "laplace", "logistic",
            "exponential", "gumbel", "cauchy", "lognormal", "rayleigh",
            "maxwell", "double_sided_maxwell", "weibull_min", "pareto",
            "triangular", "generalized_normal", "gamma", "beta", "chisquare",
            "t")


def codes(x):
  """uint8 bit patterns of a narrow result (native array or CodeArray)."""
  if isinstance(x, jaxfp8.CodeArray):
    return np.asarray(x.codes)
  return np.asarray(x).view(np.uint8)


@pytest.mark.parametrize("name", SAMPLERS)
def test_signature_mirrors_jax_random(name):
  ours = inspect.signature(getattr(R, name)).parameters
  theirs = inspect.signature(getattr(jax.random, name)).parameters
  for p in theirs.values():
    assert p.name in ours, p.name
    q = ours[p.name]
    assert q.kind == p.kind, (p.name, q.kind, p.kind)
    if p.name == "method" and compat.jax_sampler_methods(name):
      # jax.random's own method (JAX >= 0.11) is a value of ours, whose
      # None draws as its default does (test_jax_random_own_method).
      assert q.default is None, q.default
    elif p.default is not inspect.Parameter.empty:
      assert q.default == p.default, (p.name, q.default, p.default)
  positional = [p for p in theirs if theirs[p].kind != inspect.Parameter.KEYWORD_ONLY]
  assert list(ours)[:len(positional)] == positional
  for extra in set(ours) - set(theirs):
    assert ours[extra].kind == inspect.Parameter.KEYWORD_ONLY, extra


@pytest.mark.parametrize("name, args", [("normal", ()),
                                        ("truncated_normal", (-1.0, 2.0))])
def test_mode_is_jax_randoms_where_it_has_one(name, args):
  """``mode`` (JAX >= 0.12.1's "low", "high", "highest"): for float32 ours
  is jax.random's draw with it; a narrow draw with "high" is the same
  exact law's (the exact sampler ignores it). Without it in JAX, "high" is
  a TypeError naming the argument; a bad value is a ValueError everywhere."""
  ours, theirs = getattr(R, name), getattr(jax.random, name)
  key = jax.random.key(5)
  with pytest.raises(ValueError, match=f"`mode` argument to `{name}`"):
    ours(key, *args, (4,), "float32", mode="medium")
  if "mode" not in inspect.signature(theirs).parameters:
    with pytest.raises(TypeError, match="JAX >= 0.12.1"):
      ours(key, *args, (4,), "float32", mode="high")
    return
  for mode in compat.RANDOM_MODES[name]:
    np.testing.assert_array_equal(ours(key, *args, (64,), "float32", mode=mode),
                                  theirs(key, *args, (64,), mode=mode))
  np.testing.assert_array_equal(
      codes(ours(key, *args, (64,), "e4m3", mode="high")),
      codes(ours(key, *args, (64,), "e4m3", mode="low")))


_OWN_METHOD_ARGS = {"gamma": (2.0,), "beta": (2.0, 3.0), "chisquare": (3.0,),
                    "loggamma": (2.0,)}


@pytest.mark.parametrize("name", sorted(_OWN_METHOD_ARGS))
def test_jax_random_own_method(name):
  """Where jax.random's sampler has a method of its own (JAX >= 0.11:
  "exact", "approximate"), ours takes each value: jax.random's result for a
  wide dtype, its float32 draw rounded for a narrow one. Without it (JAX
  0.10), "approximate" is refused by name."""
  ours, theirs = getattr(R, name), getattr(jax.random, name)
  args = _OWN_METHOD_ARGS[name]
  np.testing.assert_array_equal(ours(K, *args, (64,), jnp.float32),
                                theirs(K, *args, (64,), jnp.float32))
  for m in compat.jax_sampler_methods(name):
    want = theirs(K, *args, (64,), jnp.float32, method=m)
    np.testing.assert_array_equal(ours(K, *args, (64,), jnp.float32, method=m),
                                  want)
    if m == "approximate":
      for fmt in ("e4m3", "e2m3"):
        np.testing.assert_array_equal(
            codes(ours(K, *args, (64,), fmt, method=m)),
            codes(jaxfp8.cast(want, fmt)))
  if "approximate" not in compat.jax_sampler_methods(name):
    with pytest.raises(ValueError, match=f"`method` argument to `{name}`"):
      ours(K, *args, (64,), "e4m3", method="approximate")


def test_install_leaves_jax_random_own_method_to_ours():
  """Under install(), a narrow call of jax.random's gamma family that leaves
  its own method (JAX >= 0.11) at its default "exact" draws as ours with
  method=None: loggamma (no CDF here) and traced parameters take cast."""
  jaxfp8.install()
  try:
    np.testing.assert_array_equal(
        codes(jax.random.loggamma(K, 2.0, (64,), jnp.float8_e4m3fn)),
        codes(R.loggamma(K, 2.0, (64,), "e4m3")))
    np.testing.assert_array_equal(
        codes(jax.random.gamma(K, 2.0, (64,), jnp.float8_e4m3fn)),
        codes(R.gamma(K, 2.0, (64,), "e4m3")))
    traced = jax.jit(
        lambda a: jax.random.gamma(K, a, (64,), jnp.float8_e4m3fn))(2.0)
    np.testing.assert_array_equal(
        codes(traced), codes(R.gamma(K, 2.0, (64,), "e4m3", method="cast")))
    for m in compat.jax_sampler_methods("beta"):
      np.testing.assert_array_equal(
          codes(jax.random.beta(K, 2.0, 3.0, (64,), jnp.float8_e4m3fn,
                                method=m)),
          codes(R.beta(K, 2.0, 3.0, (64,), "e4m3", method=m)))
  finally:
    jaxfp8.uninstall()


def test_all_jax_float_samplers_are_covered():
  wanted = {"uniform", "normal", "truncated_normal", "bernoulli",
            "rademacher", "laplace", "logistic", "exponential", "gumbel",
            "cauchy", "lognormal", "rayleigh", "maxwell",
            "double_sided_maxwell", "weibull_min", "pareto", "triangular",
            "generalized_normal", "gamma", "beta", "dirichlet", "chisquare",
            "t", "multivariate_normal", "ball", "orthogonal", "categorical",
            "loggamma", "f", "binomial", "wald", "multinomial"}
  assert wanted <= set(R.__all__)
  # Every jax.random function with a floating dtype argument is here.
  for name in dir(jax.random):
    fn = getattr(jax.random, name)
    if name.startswith("_") or not inspect.isfunction(fn):
      continue
    dtype = inspect.signature(fn).parameters.get("dtype")
    if dtype is not None and "Float" in str(dtype.annotation):
      assert name in R.__all__, name


@pytest.mark.parametrize("fmt", FMTS)
def test_output_types(fmt):
  x = R.normal(K, (3, 5), fmt)
  f = formats.get(fmt)
  if f.native:
    assert isinstance(x, jax.Array) and x.dtype == f.dtype
  else:
    assert isinstance(x, jaxfp8.CodeArray) and x.format is f
  assert x.shape == (3, 5)


@pytest.mark.parametrize("dtype", [None, jnp.float32, jnp.bfloat16,
                                   jnp.float16, jnp.float64, "float64"])
@pytest.mark.filterwarnings("ignore:Explicitly requested dtype")
def test_wide_dtypes_are_jax_random(dtype):
  np.testing.assert_array_equal(R.normal(K, (5,), dtype),
                                jax.random.normal(K, (5,), dtype))
  np.testing.assert_array_equal(
      R.truncated_normal(K, -1.0, 2.0, (5,), dtype),
      jax.random.truncated_normal(K, -1.0, 2.0, (5,), dtype))
  np.testing.assert_array_equal(R.uniform(K, (5,), dtype, -1.0, 2.0),
                                jax.random.uniform(K, (5,), dtype, -1.0, 2.0))


CAST_CALLS = {
    "uniform": (lambda k, d, **o: R.uniform(k, (64,), d, -1.0, 2.0, **o),
                lambda k: jax.random.uniform(k, (64,), jnp.float32, -1.0, 2.0)),
    "normal": (lambda k, d, **o: R.normal(k, (64,), d, **o),
               lambda k: jax.random.normal(k, (64,), jnp.float32)),
    "gumbel": (lambda k, d, **o: R.gumbel(k, (64,), d, **o),
               lambda k: jax.random.gumbel(k, (64,), jnp.float32)),
    "gamma": (lambda k, d, **o: R.gamma(k, 2.0, (64,), d, **o),
              lambda k: jax.random.gamma(k, 2.0, (64,), jnp.float32)),
    "loggamma": (lambda k, d, **o: R.loggamma(k, 2.0, (64,), d, **o),
                 lambda k: jax.random.loggamma(k, 2.0, (64,), jnp.float32)),
    "beta": (lambda k, d, **o: R.beta(k, 2.0, 3.0, (64,), d, **o),
             lambda k: jax.random.beta(k, 2.0, 3.0, (64,), jnp.float32)),
    "chisquare": (lambda k, d, **o: R.chisquare(k, 3.0, (64,), d, **o),
                  lambda k: jax.random.chisquare(k, 3.0, (64,), jnp.float32)),
    "t": (lambda k, d, **o: R.t(k, 3.0, (64,), d, **o),
          lambda k: jax.random.t(k, 3.0, (64,), jnp.float32)),
    "generalized_normal": (
        lambda k, d, **o: R.generalized_normal(k, 1.5, (64,), d, **o),
        lambda k: jax.random.generalized_normal(k, 1.5, (64,), jnp.float32)),
    "f": (lambda k, d, **o: R.f(k, 3.0, 5.0, (64,), d, **o),
          lambda k: jax.random.f(k, 3.0, 5.0, (64,), jnp.float32)),
    "binomial": (lambda k, d, **o: R.binomial(k, 10.0, 0.3, (64,), d, **o),
                 lambda k: jax.random.binomial(k, 10.0, 0.3, (64,),
                                               jnp.float32)),
    "dirichlet": (
        lambda k, d, **o: R.dirichlet(k, jnp.ones(3), (8,), d, **o),
        lambda k: jax.random.dirichlet(k, jnp.ones(3), (8,), jnp.float32)),
    "multivariate_normal": (
        lambda k, d, **o: R.multivariate_normal(
            k, jnp.zeros(2), jnp.array([[2.0, 0.5], [0.5, 1.0]]), (8,), d,
            **o),
        lambda k: jax.random.multivariate_normal(
            k, jnp.zeros(2), jnp.array([[2.0, 0.5], [0.5, 1.0]]), (8,),
            jnp.float32)),
    "ball": (lambda k, d, **o: R.ball(k, 3, 2, (8,), d, **o),
             lambda k: jax.random.ball(k, 3, 2, (8,), jnp.float32)),
    "orthogonal": (lambda k, d, **o: R.orthogonal(k, 4, (2,), d, **o),
                   lambda k: jax.random.orthogonal(k, 4, (2,), jnp.float32)),
    "rademacher": (lambda k, d, **o: R.rademacher(k, (64,), d, **o),
                   lambda k: jax.random.rademacher(k, (64,), jnp.float32)),
    "wald": (lambda k, d, **o: R.wald(k, 1.5, (64,), d, **o),
             lambda k: jax.random.wald(k, 1.5, (64,), jnp.float32)),
    "multinomial": (
        lambda k, d, **o: R.multinomial(k, 12.0, jnp.array([0.2, 0.3, 0.5]),
                                        shape=(8, 3), dtype=d, **o),
        lambda k: jax.random.multinomial(k, 12.0, jnp.array([0.2, 0.3, 0.5]),
                                         shape=(8, 3), dtype=jnp.float32)),
}


@pytest.mark.parametrize("name,fmt", [(n, "float8_e4m3fn") for n in sorted(
    CAST_CALLS)] + [("normal", "float6_e2m3fn"), ("gamma", "float6_e2m3fn")])
def test_cast_is_float32_draw_then_exact_cast(name, fmt):
  ours, theirs = CAST_CALLS[name]
  opts = {} if name == "multivariate_normal" else {"method": "cast"}
  want = jaxfp8.cast(theirs(K), fmt)
  got = ours(K, fmt, **opts)
  np.testing.assert_array_equal(codes(got), codes(want))


def test_orthogonal_in_fp8_is_orthogonal_up_to_rounding():
  q = np.asarray(R.orthogonal(K, 8, dtype="e4m3").astype(jnp.float32))
  np.testing.assert_allclose(q @ q.T, np.eye(8), atol=0.1)


def test_stochastic_rounding_is_unbiased():
  # U[0, 1) in float4: nearest has mean 0.5 too, so use U[0, 0.5): nearest
  # rounds to {0, 0.5} with mean 0.25; stochastic keeps the mean exactly.
  n = 2**18
  x = R.uniform(K, (n,), "e2m1", 0.1, 0.2, rounding="stochastic")
  vals = np.asarray(x.astype(jnp.float32), np.float64)
  assert set(np.unique(vals)) <= {0.0, 0.5}
  assert abs(vals.mean() - 0.15) < 5 * 0.5 * np.sqrt(0.3 * 0.7 / n)
  near = R.uniform(K, (n,), "e2m1", 0.1, 0.2)
  assert np.all(np.asarray(near.astype(jnp.float32)) == 0)


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg", "unsafe_rbg"])
def test_typed_keys_of_every_impl(impl):
  key = jax.random.key(5, impl=impl)
  for method in ("exact", "table", "cast"):
    a = R.normal(key, (100,), "e4m3", method=method)
    b = R.normal(key, (100,), "e4m3", method=method)
    np.testing.assert_array_equal(codes(a), codes(b))
    assert len(np.unique(codes(a))) > 20


def test_raw_uint32_key_equals_typed_key():
  raw = jax.random.PRNGKey(9)
  typed = jax.random.wrap_key_data(raw)
  for method in ("exact", "cast"):
    np.testing.assert_array_equal(
        codes(R.laplace(raw, (50,), "e5m2", method=method)),
        codes(R.laplace(typed, (50,), "e5m2", method=method)))


@pytest.mark.parametrize("method", ["exact", "table", "cast"])
def test_vmap_over_keys(method):
  keys = jax.random.split(K, 3)
  f = lambda k: R.normal(k, (65,), "e4m3", method=method)
  batched = jax.vmap(f)(keys)
  for i in range(3):
    np.testing.assert_array_equal(codes(batched[i]), codes(f(keys[i])))
  g = lambda k: R.normal(k, (65,), "e2m3", method=method).codes
  np.testing.assert_array_equal(jax.vmap(g)(keys)[1], g(keys[1]))
  h = lambda k: R.uniform(k, (65,), "e5m2", method=method)  # two-level plan
  np.testing.assert_array_equal(codes(jax.vmap(h)(keys)[2]), codes(h(keys[2])))


def test_default_method_setting_and_context():
  assert R.get_default_method() == "exact"
  exact = codes(R.normal(K, (100,), "e4m3"))
  np.testing.assert_array_equal(
      exact, codes(R.normal(K, (100,), "e4m3", method="exact")))
  with R.default_method("cast"):
    np.testing.assert_array_equal(
        codes(R.normal(K, (100,), "e4m3")),
        codes(jaxfp8.cast(jax.random.normal(K, (100,)), "e4m3")))
    with R.default_method("table"):
      np.testing.assert_array_equal(
          codes(R.normal(K, (100,), "e4m3")),
          codes(R.normal(K, (100,), "e4m3", method="table")))
  try:
    R.set_default_method("table")
    np.testing.assert_array_equal(
        codes(R.normal(K, (100,), "e4m3")),
        codes(R.normal(K, (100,), "e4m3", method="table")))
  finally:
    R.set_default_method("exact")
  with pytest.raises(ValueError, match="method"):
    R.set_default_method("fast")


def test_traced_and_per_element_parameters_use_cast():
  want = codes(R.uniform(K, (100,), "e4m3", 0.25, 1.0, method="cast"))
  traced = jax.jit(lambda lo: R.uniform(K, (100,), "e4m3", lo, 1.0))(0.25)
  np.testing.assert_array_equal(codes(traced), want)
  lo = jnp.full((100,), 0.25)
  np.testing.assert_array_equal(codes(R.uniform(K, (100,), "e4m3", lo, 1.0)),
                                want)
  with pytest.raises(NotImplementedError, match="per-element"):
    R.uniform(K, (100,), "e4m3", lo, 1.0, method="exact")
  with pytest.raises(NotImplementedError, match="traced"):
    jax.jit(lambda lo: R.uniform(K, (4,), "e4m3", lo, 1.0,
                                 method="table"))(0.25)


def test_narrow_parameters_are_decoded_exactly():
  lo = jaxfp8.encode(jnp.array(-1.5), "e2m3")
  a = R.uniform(K, (100,), "e4m3", lo, 1.0)
  b = R.uniform(K, (100,), "e4m3", -1.5, 1.0)
  np.testing.assert_array_equal(codes(a), codes(b))
  s = jnp.array(0.5, jnp.float8_e4m3fn)
  np.testing.assert_array_equal(codes(R.lognormal(K, s, (9,), "e4m3")),
                                codes(R.lognormal(K, 0.5, (9,), "e4m3")))


def test_no_cdf_means_cast_by_default_and_error_when_asked():
  np.testing.assert_array_equal(
      codes(R.loggamma(K, 2.0, (10,), "e4m3")),
      codes(R.loggamma(K, 2.0, (10,), "e4m3", method="cast")))
  with pytest.raises(NotImplementedError, match="no closed-form CDF"):
    R.loggamma(K, 2.0, (10,), "e4m3", method="exact")
  with pytest.raises(NotImplementedError, match="unsigned"):
    R.exponential(K, (10,), "e8m0", method="table")
  assert R.exponential(K, (10,), "e8m0").dtype == jnp.float8_e8m0fnu


def test_bernoulli_exact_for_traced_per_element_p():
  p = jnp.array([0.0, 2.0**-9, 0.5, 1.0], jnp.float8_e4m3fn)
  f = lambda p: R.bernoulli(K, p, (2**16, 4))
  np.testing.assert_array_equal(f(p), jax.jit(f)(p))
  b = np.asarray(f(p))
  assert b[:, 0].sum() == 0 and b[:, 3].all()
  assert abs(b[:, 2].mean() - 0.5) < 0.01
  assert R.bernoulli(K, 0.5, (10,), method="cast").dtype == jnp.bool_


def test_categorical_with_narrow_logits():
  logits = jaxfp8.encode(jnp.array([0.0, 1.0, -7.5]), "e2m3")
  x = R.categorical(K, logits, shape=(4000,))
  frac = np.bincount(np.asarray(x), minlength=3) / 4000
  want = np.exp([0.0, 1.0, -7.5]) / np.exp([0.0, 1.0, -7.5]).sum()
  np.testing.assert_allclose(frac, want, atol=0.03)


def test_out_sharding_single_device():
  mesh = jax.make_mesh((1,), ("x",))
  s = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
  for method in ("exact", "table", "cast"):
    a = R.normal(K, (64,), "e4m3", out_sharding=s, method=method)
    b = R.normal(K, (64,), "e4m3", method=method)
    np.testing.assert_array_equal(codes(a), codes(b))
    assert a.sharding == s


def test_out_sharding_same_samples_on_four_devices():
  code = textwrap.dedent("""
      import os
      os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                              + " --xla_force_host_platform_device_count=4")
      import jax, numpy as np, jaxfp8
      mesh = jax.make_mesh((4,), ("x",))
      s = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x"))
      k = jax.random.key(0)
      for m in ("exact", "table", "cast"):
        a = jaxfp8.random.normal(k, (256,), "e4m3", out_sharding=s, method=m)
        assert len(a.sharding.device_set) == 4, a.sharding
        np.save(f"{m}.npy", np.asarray(a).view(np.uint8))
      """)
  import tempfile
  with tempfile.TemporaryDirectory() as d:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    subprocess.run([sys.executable, "-c", code], cwd=d, env=env, check=True,
                   timeout=120)
    for m in ("exact", "table", "cast"):
      np.testing.assert_array_equal(
          np.load(os.path.join(d, f"{m}.npy")),
          codes(R.normal(K, (256,), "e4m3", method=m)))


# -- bad input: clear errors naming the argument --------------------------------

@pytest.mark.parametrize("alias,dtype", [
    ("bf16", jnp.bfloat16), ("f16", jnp.float16), ("half", jnp.float16),
    ("float32", jnp.float32), ("f32", jnp.float32), ("f64", jnp.float64)])
def test_wide_dtype_names_go_to_jax_random(alias, dtype):
  """Every name of a wide float means jax.random with that dtype, as
  jaxfp8.cast reads it (f64: float32 unless x64 is on, as in jax.random)."""
  for ours, theirs in (
      (lambda d: R.normal(K, (5,), d), lambda d: jax.random.normal(K, (5,), d)),
      (lambda d: R.uniform(K, (5,), d, 1.0, 2.0),
       lambda d: jax.random.uniform(K, (5,), d, 1.0, 2.0)),
      (lambda d: R.gamma(K, 2.0, (5,), d),
       lambda d: jax.random.gamma(K, 2.0, (5,), d)),
      (lambda d: R.rademacher(K, (5,), d),
       lambda d: jax.random.rademacher(K, (5,), d)),
      (lambda d: R.dirichlet(K, jnp.ones(3), (2,), d),
       lambda d: jax.random.dirichlet(K, jnp.ones(3), (2,), d))):
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", UserWarning)  # float64 without x64
      got, want = ours(alias), theirs(dtype)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_every_sampler_has_an_entry_in_the_distribution_table():
  table = distributions.DISTRIBUTIONS
  assert {n for n in SAMPLERS if n != "categorical"} <= set(table)
  assert {n for n, d in table.items() if d.has_cdf} == set(WITH_CDF)
  for d in table.values():  # the domain names only the law's parameters
    named = (d.positive + d.nonnegative + d.probabilities + d.infinite
             + tuple(a for pair in d.ordered for a in pair[:2])
             + tuple(d.defaults) + ((d.positive_if,) if d.positive_if else ()))
    assert set(named) <= set(d.params), d.name


@pytest.mark.parametrize("name", ["uniform", "normal", "laplace", "gamma"])
@pytest.mark.parametrize("dtype", [jnp.int8, jnp.int32, jnp.uint8, bool])
def test_integer_dtype_is_refused(name, dtype):
  args = {"gamma": (2.0,)}.get(name, ())
  with pytest.raises(TypeError, match=f"`dtype` argument to `{name}`"):
    getattr(R, name)(K, *args, (3,), dtype) if args else getattr(R, name)(
        K, (3,), dtype)


@pytest.mark.parametrize("bad", [(1.0, 1.0), (2.0, -1.0), (jnp.array([0., 2.]),
                                                          jnp.array([1., 1.]))])
def test_bounds_in_order(bad):
  with pytest.raises(ValueError, match="`minval` argument to `uniform`"):
    R.uniform(K, (2,), "e4m3", *bad)
  with pytest.raises(ValueError,
                     match="`lower` argument to `truncated_normal`"):
    R.truncated_normal(K, *bad, (2,), "e4m3")


@pytest.mark.parametrize("call,arg", [
    (lambda: R.rayleigh(K, -1.0, (2,), "e4m3"), "scale"),
    (lambda: R.lognormal(K, 0.0, (2,), "e4m3"), "sigma"),
    (lambda: R.pareto(K, -2.0, (2,), "e4m3"), "b"),
    (lambda: R.weibull_min(K, 1.0, -2.0, (2,), "e4m3"), "concentration"),
    (lambda: R.weibull_min(K, -1.0, 2.0, (2,), "e4m3"), "scale"),
    (lambda: R.double_sided_maxwell(K, 0.0, -1.0, (2,), "e4m3"), "scale"),
    (lambda: R.gamma(K, jnp.array([1.0, -1.0]), None, "e4m3"), "a"),
    (lambda: R.beta(K, 1.0, 0.0, (2,), "e4m3"), "b"),
    (lambda: R.chisquare(K, -3.0, (2,), "e4m3"), "df"),
    (lambda: R.t(K, 0.0, (2,), "e4m3"), "df"),
    (lambda: R.generalized_normal(K, -1.0, (2,), "e4m3"), "p"),
    (lambda: R.dirichlet(K, jnp.array([1.0, -1.0]), None, "e4m3"), "alpha"),
    (lambda: R.triangular(K, 0.0, 3.0, 2.0, (2,), "e4m3"), "mode"),
    (lambda: R.bernoulli(K, 1.5, (2,)), "p"),
    (lambda: R.binomial(K, 5.0, -0.5, (2,), "e4m3"), "p"),
    (lambda: R.binomial(K, -5.0, 0.5, (2,), "e4m3"), "n"),
    (lambda: R.f(K, 3.0, -1.0, (2,), "e4m3"), "dfden"),
])
def test_bad_parameters(call, arg):
  with pytest.raises(ValueError, match=f"`{arg}` argument"):
    call()


@pytest.mark.parametrize("key", [0, 1.5, np.zeros(2, np.float32), "key",
                                 [0, 1]])
def test_non_key_is_refused(key):
  with pytest.raises(TypeError, match="`key` argument to `normal`"):
    R.normal(key, (3,), "e4m3")
  with pytest.raises(TypeError, match="`key` argument to `bernoulli`"):
    R.bernoulli(key, 0.5, (3,))


def test_unknown_options():
  with pytest.raises(ValueError, match="`method` argument to `normal`"):
    R.normal(K, (3,), "e4m3", method="fast")
  with pytest.raises(ValueError, match="`rounding` argument to `uniform`"):
    R.uniform(K, (3,), "e4m3", rounding="up")
  with pytest.raises(ValueError, match="rounding='stochastic'"):
    R.normal(K, (3,), "e4m3", method="exact", rounding="stochastic")
  with pytest.raises(ValueError, match="`table_bits` argument to `normal`"):
    R.normal(K, (3,), "e4m3", method="table", table_bits=20)
  with pytest.raises(ValueError, match="Unknown format"):
    R.normal(K, (3,), "e4m2")
  with pytest.raises(ValueError, match="`shape` argument to `normal`"):
    R.normal(K, (-1,), "e4m3")


@pytest.mark.parametrize("call,arg", [
    (lambda m: R.uniform(K, (8,), "e4m3", -np.inf, np.inf, method=m),
     "minval"),
    (lambda m: R.uniform(K, (8,), "e4m3", 0.0, np.inf, method=m), "maxval"),
    (lambda m: R.double_sided_maxwell(K, np.nan, 1.0, (8,), "e4m3",
                                      method=m), "loc"),
    (lambda m: R.triangular(K, 0.0, 0.0, np.inf, (8,), "e4m3", method=m),
     "right"),
    (lambda m: R.weibull_min(K, np.inf, 2.0, (8,), "e4m3", method=m),
     "scale"),
    (lambda m: R.uniform(K, (2,), "e4m3", 0.0, np.array([1.0, np.inf]),
                         method=m), "maxval"),
])
@pytest.mark.parametrize("method", [None, "exact", "table", "cast"])
def test_non_finite_parameters_are_refused(call, arg, method):
  if method in ("exact", "table") and "jnp.array" in inspect.getsource(call):
    pytest.skip("per-element parameters are cast-only")
  with pytest.raises(ValueError, match=f"`{arg}` argument to"):
    call(method)


def test_infinite_truncation_bounds_are_allowed():
  for m in ("exact", "table", "cast"):
    x = np.asarray(R.truncated_normal(K, -np.inf, 0.5, (4096,), "e4m3",
                                      method=m).astype(np.float32))
    assert np.isfinite(x).all() and x.max() <= 0.5 and x.min() < -2, m


def test_law_functions_check_their_arguments():
  with pytest.raises(ValueError, match="`minval` argument to `uniform`"):
    R.rounded_law("uniform", "e4m3", minval=1.0, maxval=0.0)
  with pytest.raises(ValueError, match="`sigma` argument to `lognormal`"):
    R.rounded_law("lognormal", "e4m3", sigma=-1.0)
  with pytest.raises(ValueError, match="`table_bits` argument to `table_law`"):
    R.table_law("normal", "e2m1", table_bits=0)


def test_unsigned_format_only_for_positive_draws():
  e8m0 = "float8_e8m0fnu"
  for call in (lambda: R.normal(K, (4,), e8m0),
               lambda: R.rademacher(K, (4,), e8m0),
               lambda: R.uniform(K, (4,), e8m0, -1.0, 1.0),
               lambda: R.laplace(K, (4,), e8m0)):
    with pytest.raises(ValueError, match="`dtype` argument.*unsigned"):
      call()
  # Positive draws work, with no NaN even where float32 draws exactly 0
  # (u = 0 has probability 2^-23 in jax.random.uniform's float32).
  u = np.asarray(R.uniform(K, (1 << 20,), e8m0).astype(np.float32))
  e = np.asarray(R.exponential(K, (1 << 16,), e8m0).astype(np.float32))
  assert not np.isnan(u).any() and not np.isnan(e).any()
  assert u.max() <= 1.0 and abs(np.median(u) - 0.5) <= 0.25


def test_batch_of_keys_is_refused_by_name():
  keys = jax.random.split(K, 3)
  with pytest.raises(ValueError, match="`key` argument to `normal`.*single"):
    R.normal(keys, (2,), "e4m3")
  with pytest.raises(ValueError, match="`key` argument to `bernoulli`"):
    R.bernoulli(keys, 0.5, (2,))
  out = jax.vmap(lambda k: R.normal(k, (2,), "e4m3"))(keys)
  assert out.shape == (3, 2)


def test_ball_with_traced_p_and_bernoulli_mode():
  f = jax.jit(lambda p: R.ball(K, 3, p, (2,), "e4m3"))
  np.testing.assert_array_equal(
      np.asarray(f(2.0).astype(np.float32)),
      np.asarray(R.ball(K, 3, 2.0, (2,), "e4m3").astype(np.float32)))
  with pytest.raises(ValueError, match="`mode` argument to `bernoulli`"):
    R.bernoulli(K, 0.5, (3,), mode="bogus")


def test_unsigned_format_with_traced_or_array_lower_bound():
  e8m0 = "float8_e8m0fnu"
  want = np.asarray(R.uniform(K, (3,), e8m0, 0.5, 2.0).astype(np.float32))
  got = jax.jit(lambda m: R.uniform(K, (3,), e8m0, m, 2.0))(0.5)
  np.testing.assert_array_equal(np.asarray(got.astype(np.float32)), want)
  R.uniform(K, (3,), e8m0, jnp.full((3,), 0.5), 2.0)  # all >= 0: fine
  with pytest.raises(ValueError, match="unsigned"):
    R.uniform(K, (3,), e8m0, jnp.array([0.5, -1.0, 0.5]), 2.0)
