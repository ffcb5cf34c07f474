"""jaxfp8.install(): unchanged Flax and Haiku code initializes fp8 right.

Under install() a narrow-dtype model's parameters must be its float32
parameters (same key) rounded once, bit for bit; float32 models must not
change at all; and uninstall() must leave every module as it found it.
"""
import inspect
import math
import re
import sys
import types
import warnings

from flax import nnx
import flax.linen as nn
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8._src.install import api as install_lib
from jaxfp8._src.install import routing
from jaxfp8.nn.initializers import FormatRangeWarning

FP8 = ["float8_e4m3fn", "float8_e5m2"]
KEY = jax.random.key(7)


@pytest.fixture(autouse=True)
def _always_uninstall():
  yield
  jaxfp8.uninstall()


def snapshot():
  """Every attribute of every JAX/Flax/Haiku module, and Haiku's __call__s."""
  snap = {}
  for name, mod in list(sys.modules.items()):
    if name.split(".")[0] in ("jax", "flax", "haiku") and isinstance(
        getattr(mod, "__dict__", None), dict):
      snap[name] = dict(vars(mod))
  hk_init = sys.modules["haiku._src.initializers"]
  snap["haiku classes"] = {
      c.__name__: vars(c).get("__call__") for c in vars(hk_init).values()
      if isinstance(c, type)}
  return snap


def assert_same(before, after):
  for mod, attrs in before.items():
    for attr, value in attrs.items():
      assert after[mod].get(attr) is value, (mod, attr)


def codes():
  """The code of every function held by a JAX/Flax/Haiku module (Flax's
  ``default_kernel_init`` closures among them)."""
  return {(name, attr): fn.__code__
          for name, attrs in snapshot().items() for attr, fn in attrs.items()
          if isinstance(fn, types.FunctionType)}


def as_f64(x):
  return np.asarray(jaxfp8.decode(x), np.float64)


# --- installing and uninstalling -------------------------------------------


def test_uninstall_leaves_every_module_as_found():
  before, code_before = snapshot(), codes()
  normal, lecun = jax.random.normal, jax.nn.initializers.lecun_normal
  flax_default = nn.linear.default_kernel_init
  flax_code = flax_default.__code__
  jaxfp8.install()
  assert jax.random.normal is not normal
  assert jax.nn.initializers.lecun_normal is not lecun
  assert nn.initializers.lecun_normal is not lecun  # Flax's re-export too
  assert flax_default.__code__ is not flax_code  # routed in place
  jaxfp8.uninstall()
  assert jax.random.normal is normal
  assert jax.nn.initializers.lecun_normal is lecun
  assert flax_default.__code__ is flax_code
  assert_same(before, snapshot())
  after = codes()
  for where, code in code_before.items():
    assert after[where] is code, where


def test_closure_holding_cells_jaxfp8_lacks_is_computed_in_float32(
    monkeypatch):
  """A JAX whose closures hold an argument jaxfp8's factory lacks (simulated
  by making jaxfp8's normal take none): the closure runs JAX's own code in
  float32 and the result is rounded once, as jaxfp8's factories do. (The
  fallback this replaces ran JAX's arithmetic in the format on jaxfp8's
  samples: NaN on JAX 0.12, whose normal closure takes erf_inv of a
  uniform.)"""
  before = jax.nn.initializers.normal(1.0)  # built before installing
  want = jaxfp8.cast(before(KEY, (64,), jnp.float32), "e4m3")
  wide = before(KEY, (8,), jnp.float32)
  monkeypatch.setattr(install_lib, "_factory_parameters",
                      lambda name: frozenset())
  with warnings.catch_warnings():
    warnings.simplefilter("error")  # nothing to warn of: the weights are right
    jaxfp8.install()
  for init in (before, jax.nn.initializers.normal(1.0)):
    w = init(KEY, (64,), jnp.float8_e4m3fn)
    assert not np.isnan(as_f64(w)).any()
    np.testing.assert_array_equal(as_f64(w), as_f64(want))
  # Wide dtypes: JAX's own, bit for bit.
  np.testing.assert_array_equal(before(KEY, (8,), jnp.float32), wide)


def test_closure_taking_other_parameters_warns_and_still_installs(
    monkeypatch):
  """A JAX whose closures take other parameters (simulated): install()
  names them in a warning and routes everything else."""
  monkeypatch.setattr(routing, "INIT_PARAMETERS",
                      ("key", "shape", "dtype", "sharding"))
  monkeypatch.setattr(install_lib, "_LEARNED", [])  # learned once per process
  with pytest.warns(RuntimeWarning, match="normal, truncated_normal"):
    jaxfp8.install()
  assert install_lib.is_installed()
  np.testing.assert_array_equal(
      as_f64(jax.random.normal(KEY, (64,), jnp.float8_e4m3fn)),
      as_f64(jaxfp8.random.normal(KEY, (64,), jnp.float8_e4m3fn)))
  w = jax.nn.initializers.zeros(KEY, (4,), jnp.float8_e4m3fn)
  assert w.dtype == jnp.float8_e4m3fn and not as_f64(w).any()


def _takes_a_key(obj):
  return (inspect.isfunction(obj)
          and next(iter(inspect.signature(obj).parameters), None) == "key")


def test_samplers_are_every_sampler_of_jaxfp8_random():
  """SAMPLERS comes from the modules' ``__all__``: a sampler jaxfp8.random
  exports (a function taking ``key`` first) that no module declares fails."""
  samplers = install_lib.SAMPLERS
  assert list(samplers) == sorted(set(samplers))  # sorted, no name twice
  assert set(samplers) == {n for n in jaxfp8.random.__all__
                           if _takes_a_key(getattr(jaxfp8.random, n))}


@pytest.mark.parametrize("name", install_lib.SAMPLERS)
def test_each_sampler_takes_its_jax_random_namesakes_arguments(name):
  theirs = getattr(jax.random, name, None)
  if theirs is None:
    pytest.skip(f"this JAX's jax.random has no {name}: install() leaves "
                f"nothing to route")
  assert inspect.isfunction(theirs), name
  ours = install_lib._our_samplers()[name]  # pylint: disable=protected-access
  assert ours is getattr(jaxfp8.random, name)
  assert (set(inspect.signature(theirs).parameters)
          <= set(inspect.signature(ours).parameters))


def test_install_routes_every_float_sampler_of_jax_random():
  """Each of SAMPLERS that jax.random has with a dtype is replaced; the
  others (bernoulli, categorical: no dtype) are left as they are."""
  before = {n: getattr(jax.random, n) for n in install_lib.SAMPLERS
            if hasattr(jax.random, n)}
  with jaxfp8.installed():
    for name, original in before.items():
      takes_dtype = "dtype" in inspect.signature(original).parameters
      now = getattr(jax.random, name)
      assert (now is not original) == takes_dtype, name
      if takes_dtype:
        assert now.jaxfp8_original is original, name


def test_a_sampler_lacking_jax_arguments_is_a_clear_error(monkeypatch):
  from jaxfp8._src.random import continuous  # pylint: disable=g-import-not-at-top

  def normal(key, shape=(), dtype=None, *, mode=None):  # lacks out_sharding
    return (key, shape, dtype, mode)

  monkeypatch.setattr(continuous, "normal", normal)
  install_lib._our_samplers.cache_clear()  # pylint: disable=protected-access
  try:
    with pytest.raises(RuntimeError, match=(
        r"`normal` of jaxfp8\._src\.random\.continuous must take "
        r"jax\.random\.normal's arguments, but lacks \['out_sharding'\]")):
      install_lib._our_samplers()  # pylint: disable=protected-access
  finally:
    install_lib._our_samplers.cache_clear()  # pylint: disable=protected-access


def test_install_is_idempotent_and_installed_nests():
  before = snapshot()
  jaxfp8.install()
  once = snapshot()
  jaxfp8.install()
  assert_same(once, snapshot())
  with jaxfp8.installed():  # already installed: stays installed after
    pass
  assert install_lib.is_installed()
  jaxfp8.uninstall()
  jaxfp8.uninstall()
  assert_same(before, snapshot())
  with jaxfp8.installed():
    assert install_lib.is_installed()
    assert jax.random.normal is not before["jax.random"]["normal"]
  assert not install_lib.is_installed()
  assert_same(before, snapshot())


def test_every_replacement_keeps_name_signature_and_doc():
  jaxfp8.install()
  assert install_lib._PATCHES  # pylint: disable=protected-access
  for owner, attr, original in install_lib._PATCHES:  # pylint: disable=protected-access
    shim = getattr(owner, attr)
    assert shim is not original
    assert inspect.signature(shim) == inspect.signature(original), attr
    assert shim.__name__ == original.__name__
    assert shim.__doc__ == original.__doc__
  init = jax.nn.initializers.variance_scaling(1.0, "fan_in", "uniform")
  assert inspect.signature(init) == inspect.signature(
      jax.nn.initializers.variance_scaling.jaxfp8_original(
          1.0, "fan_in", "uniform"))


# --- wide dtypes: nothing changes --------------------------------------------

SAMPLERS = {
    "uniform": ((3, 5), {"minval": -2.0, "maxval": 3.0}),
    "normal": ((4, 4), {}),
    "truncated_normal": ((), {"lower": -1.0, "upper": 2.0,
                              "shape": (4, 4)}),
    "exponential": ((7,), {}), "laplace": ((7,), {}),
    "logistic": ((7,), {}), "cauchy": ((7,), {}), "gumbel": ((7,), {}),
}


# Float32 only: JAX's QR has no 16-bit kernels; gamma compiles slowly.
WIDE_ONLY_F32 = {"orthogonal": ((), {"n": 5}),
                 "gamma": ((), {"a": 2.0, "shape": (7,)})}


def _draw(name, dtype):
  shape, kw = {**SAMPLERS, **WIDE_ONLY_F32}[name]
  args = (KEY, shape) if shape else (KEY,)
  return getattr(jax.random, name)(*args, dtype=dtype, **kw)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_wide_samples_bit_identical(dtype):
  names = list(SAMPLERS) + (list(WIDE_ONLY_F32) if dtype == jnp.float32
                            else [])
  want = {n: _draw(n, dtype) for n in names}
  with jaxfp8.installed():
    got = {n: _draw(n, dtype) for n in names}
  for n in names:
    assert got[n].dtype == want[n].dtype
    np.testing.assert_array_equal(np.asarray(got[n], np.float32),
                                  np.asarray(want[n], np.float32), err_msg=n)


def _error(fn):
  try:
    fn()
  except Exception as e:  # pylint: disable=broad-except
    return type(e), str(e)
  return None


BAD_CALLS = [
    lambda: jax.random.uniform(KEY, (2,), jnp.int32),
    lambda: jax.random.normal(KEY, (2,), "not a dtype"),
    lambda: jax.random.truncated_normal(KEY, -1.0, 1.0, (2,), jnp.int8),
    lambda: jax.random.uniform(KEY, (2,), jnp.float32, unknown=1),
    lambda: jax.random.normal(),
    lambda: jax.nn.initializers.orthogonal()(KEY, (4,), jnp.float32),
    lambda: jax.nn.initializers.variance_scaling(1.0, "fan_x", "normal")(
        KEY, (4, 4), jnp.float32),
]


@pytest.mark.parametrize("call", BAD_CALLS, ids=range(len(BAD_CALLS)))
def test_wide_errors_identical(call):
  want = _error(call)
  assert want is not None
  with jaxfp8.installed():
    assert _error(call) == want


# --- narrow dtypes: routed to jaxfp8 -------------------------------------------


@pytest.mark.parametrize("fmt", FP8 + ["float4_e2m1fn"])
def test_jax_random_routes_to_jaxfp8_random(fmt):
  with jaxfp8.installed():
    u = jax.random.uniform(KEY, (1000,), fmt, -0.5, 0.5)
    z = jax.random.normal(KEY, (1000,), fmt)
    t = jax.random.truncated_normal(KEY, -2.0, 2.0, (1000,), fmt)
    q = jax.random.orthogonal(KEY, 16, (), fmt)
  np.testing.assert_array_equal(
      as_f64(u), as_f64(jaxfp8.random.uniform(KEY, (1000,), fmt, -0.5, 0.5)))
  np.testing.assert_array_equal(
      as_f64(z), as_f64(jaxfp8.random.normal(KEY, (1000,), fmt)))
  np.testing.assert_array_equal(
      as_f64(t), as_f64(jaxfp8.random.truncated_normal(KEY, -2.0, 2.0,
                                                        (1000,), fmt)))
  np.testing.assert_array_equal(as_f64(q), as_f64(jaxfp8.cast(
      jax.random.orthogonal(KEY, 16, (), jnp.float32), fmt)))
  assert not np.isnan(as_f64(t)).any()


PREBUILT = [
    ("lecun_uniform", ()), ("he_uniform", ()), ("glorot_uniform", ()),
    ("lecun_normal", ()), ("he_normal", ()), ("glorot_normal", ()),
    ("variance_scaling", (0.7, "fan_avg", "uniform")),
    ("variance_scaling", (2.0, "fan_out", "truncated_normal")),
    ("variance_scaling", (1.3, "fan_in", "normal")),
    ("normal", (0.3,)), ("uniform", (0.3,)), ("truncated_normal", (0.3,)),
]


@pytest.mark.parametrize("name,args", PREBUILT,
                         ids=[f"{n}{a}" for n, a in PREBUILT])
def test_every_prebuilt_closure_is_the_float32_one_rounded_once(name, args):
  # Built before install, as Flax builds its defaults at import. The uniform
  # closures scale by ``jnp.sqrt(3 * variance)``: an expression with its own
  # product, which must not stop them being answered whole.
  prebuilt = getattr(jax.nn.initializers, name)(*args)
  shape = (150, 256)
  for fmt in ("float8_e5m2", "float8_e4m3fn"):
    want = jaxfp8.cast(prebuilt(KEY, shape, jnp.float32), fmt)
    with jaxfp8.installed():
      got = prebuilt(KEY, shape, fmt)
    np.testing.assert_array_equal(as_f64(got), as_f64(want), err_msg=fmt)


@pytest.mark.parametrize("fmt", FP8)
def test_prebuilt_and_new_initializers_agree(fmt):
  prebuilt = jax.nn.initializers.lecun_normal()  # like Flax's defaults
  want = jaxfp8.cast(prebuilt(KEY, (64, 32), jnp.float32), fmt)
  with jaxfp8.installed():
    fresh = jax.nn.initializers.lecun_normal()
    a, b = prebuilt(KEY, (64, 32), fmt), fresh(KEY, (64, 32), fmt)
    orth = jax.nn.initializers.orthogonal(0.7)(KEY, (16, 16), fmt)
    with pytest.warns(FormatRangeWarning, match="saturate") as record:
      const = jax.nn.initializers.constant(1e6)(KEY, (2,), fmt)
    assert record[0].filename == __file__  # points at the caller
  np.testing.assert_array_equal(as_f64(a), as_f64(want))
  np.testing.assert_array_equal(as_f64(b), as_f64(want))
  np.testing.assert_array_equal(as_f64(orth), as_f64(jaxfp8.cast(
      jax.nn.initializers.orthogonal(0.7)(KEY, (16, 16), jnp.float32), fmt)))
  assert (as_f64(const) == jaxfp8.formats.get(fmt).max).all()
  # After uninstall an initializer made while installed is JAX's again.
  np.testing.assert_array_equal(
      as_f64(fresh(KEY, (64, 32), jnp.float32)),
      as_f64(prebuilt(KEY, (64, 32), jnp.float32)))


# --- unchanged Flax and Haiku code -------------------------------------------


def linen_params(dtype):
  # (linen.LayerNorm's forward pass can't mix fp8 scales with float32 inputs:
  # init runs it, so the LayerNorm scale is checked in the nnx model.)
  class Model(nn.Module):
    @nn.compact
    def __call__(self, x):
      kw = dict(param_dtype=dtype, dtype=jnp.float32)
      x = nn.Conv(64, (3, 3), **kw)(x)
      x = nn.Dense(256, **kw)(x.reshape(x.shape[0], -1))
      ids = jnp.zeros(x.shape[:1], jnp.int32)
      return x + nn.Embed(512, 256, **kw)(ids).astype(jnp.float32)
  return Model().init(KEY, jnp.ones((1, 8, 8, 16)))["params"]


def nnx_params(dtype):
  kw = dict(param_dtype=dtype, dtype=jnp.float32, rngs=nnx.Rngs(3))
  layers = {"linear": nnx.Linear(512, 256, **kw),
            "conv": nnx.Conv(16, 64, (3, 3), **kw),
            "embed": nnx.Embed(512, 256, **kw),
            "norm": nnx.LayerNorm(256, **kw)}
  return {k: nnx.state(v, nnx.Param) for k, v in layers.items()}


def haiku_params(dtype):
  def f(x):
    w = hk.get_parameter("w", (256, 512), dtype,
                         init=hk.initializers.TruncatedNormal(0.25, 0.5))
    v = hk.get_parameter("v", (256, 512), dtype,
                         init=hk.initializers.VarianceScaling(
                             2.0, "fan_avg", "uniform"))
    u = hk.get_parameter("u", (256, 512), dtype,
                         init=hk.initializers.RandomUniform(-0.1, 0.3))
    return hk.Linear(256)(x) + w.sum() + v.sum() + u.sum()
  return hk.transform(f).init(KEY, jnp.ones((1, 512), dtype))


MODELS = {"linen": linen_params, "nnx": nnx_params, "haiku": haiku_params}


def leaves(params):
  return jax.tree_util.tree_leaves_with_path(params)


@pytest.mark.parametrize("model", MODELS)
def test_float32_models_unchanged_bit_for_bit(model):
  want = MODELS[model](jnp.float32)
  with jaxfp8.installed():
    got = MODELS[model](jnp.float32)
  for (path, a), (_, b) in zip(leaves(got), leaves(want), strict=True):
    assert a.dtype == b.dtype == jnp.float32, path
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b),
                                  err_msg=str(path))


@pytest.mark.parametrize("fmt", FP8)
@pytest.mark.parametrize("model", MODELS)
def test_fp8_models_are_float32_models_rounded_once(model, fmt):
  wide = MODELS[model](jnp.float32)
  with jaxfp8.installed():
    narrow = MODELS[model](jnp.dtype(fmt))
  for (path, a), (_, w) in zip(leaves(narrow), leaves(wide), strict=True):
    name = jax.tree_util.keystr(path)
    assert a.dtype == jnp.dtype(fmt), name
    x, w32 = as_f64(a), np.asarray(w, np.float64)
    assert not np.isnan(x).any(), name
    np.testing.assert_array_equal(x, as_f64(jaxfp8.cast(w, fmt)),
                                  err_msg=name)
    if w32.std() > 0 and w32.size >= 4096:  # random weights: their spread
      assert abs(x.std() / w32.std() - 1) < 0.02, name
      assert abs(x.mean() - w32.mean()) < 5 * w32.std() / math.sqrt(x.size)


def test_under_jit_same_as_eager():
  def init(key):
    return nn.Dense(64, param_dtype=jnp.float8_e5m2, dtype=jnp.float32).init(
        key, jnp.ones((1, 128)))["params"]["kernel"]
  with jaxfp8.installed():
    eager, jitted = init(KEY), jax.jit(init)(KEY)
  assert jitted.dtype == jnp.float8_e5m2
  np.testing.assert_array_equal(as_f64(eager), as_f64(jitted))


@pytest.mark.parametrize("fmt", FP8)
def test_without_install_jax_gets_fp8_wrong(fmt):
  """What install() fixes (if JAX fixes it, this test says so)."""
  k = np.asarray(linen_params(jnp.dtype(fmt))["Dense_0"]["kernel"],
                 np.float64)
  assert np.isnan(k).all() or len(np.unique(k)) <= 8
  w = haiku_params(jnp.dtype(fmt))["~"]["w"]
  w = np.asarray(w, np.float64)
  assert np.isnan(w).all() or len(np.unique(w)) <= 8


def test_haiku_truncated_normal_mean_std():
  with jaxfp8.installed():
    w = haiku_params(jnp.float8_e4m3fn)["~"]["w"]
  x = as_f64(w)
  # Truncated to mean +- 2 std: std 0.25 * 0.8796, mean 0.5.
  assert abs(x.std() / (0.25 * .87962566103423978) - 1) < 0.02
  assert abs(x.mean() - 0.5) < 5 * 0.25 / math.sqrt(x.size)


def test_float6_inside_flax_or_haiku_is_refused_clearly():
  msg = re.escape("can't compute with")
  with jaxfp8.installed():
    with pytest.raises(TypeError, match=msg):
      nn.Dense(4, kernel_init=nn.initializers.normal(0.02),
               param_dtype=jnp.float6_e2m3fn).init(KEY, jnp.ones((1, 4)))
    with pytest.raises(TypeError, match=msg):
      hk.transform(lambda: hk.get_parameter(
          "w", (4,), jnp.float6_e2m3fn,
          init=hk.initializers.TruncatedNormal(1.0))).init(KEY)
    # Outside a framework float6 comes back as codes.
    w = jax.random.normal(KEY, (4,), jnp.float6_e2m3fn)
    assert isinstance(w, jaxfp8.CodeArray)


@pytest.mark.parametrize("make", [
    lambda: jax.nn.initializers.normal(0.02),
    lambda: jax.nn.initializers.lecun_normal(),
], ids=["normal", "lecun_normal"])
def test_float6_from_jax_initializers_is_refused_everywhere(make):
  # An initializer makes parameters, which layers compute with: float6
  # raises however it is called (no look at the caller), pointing to
  # jaxfp8.encode and to jaxfp8.nn.initializers for the codes.
  prebuilt = make()
  with jaxfp8.installed():
    for init in (prebuilt, make()):
      with pytest.raises(TypeError, match="jaxfp8.encode") as e:
        init(KEY, (4, 4), jnp.float6_e2m3fn)
      assert "jaxfp8.nn.initializers" in str(e.value)
    with pytest.raises(TypeError, match="jaxfp8.encode"):
      jax.nn.initializers.zeros(KEY, (4,), jnp.float6_e2m3fn)
  w = jaxfp8.nn.initializers.normal(0.5)(KEY, (4, 4), jnp.float6_e2m3fn)
  assert isinstance(w, jaxfp8.CodeArray)


def test_prebuilt_closures_in_containers_and_defaults_are_routed():
  # Closures are found wherever they are held (gc), not only in modules.
  held = {"inits": [jax.nn.initializers.he_uniform(in_axis=0, out_axis=1)]}

  def layer(init=jax.nn.initializers.truncated_normal(0.1, lower=-1.0)):
    return init(KEY, (128, 64), jnp.float8_e5m2)

  want = [jaxfp8.cast(held["inits"][0](KEY, (128, 64), jnp.float32),
                      "float8_e5m2"),
          jaxfp8.cast(jax.nn.initializers.truncated_normal(0.1, lower=-1.0)(
              KEY, (128, 64), jnp.float32), "float8_e5m2")]
  with jaxfp8.installed():
    got = [held["inits"][0](KEY, (128, 64), jnp.float8_e5m2), layer()]
  for g, w in zip(got, want):
    np.testing.assert_array_equal(as_f64(g), as_f64(w))


def test_wide_calls_of_routed_closures_keep_their_errors():
  init = jax.nn.initializers.variance_scaling(1.0, "fan_x", "normal")
  want = _error(lambda: init(KEY, (4, 4), jnp.float32))
  missing = _error(lambda: init(KEY))  # pylint: disable=no-value-for-parameter
  with jaxfp8.installed():
    assert _error(lambda: init(KEY, (4, 4), jnp.float32)) == want
    assert _error(lambda: init(KEY)) == missing  # pylint: disable=no-value-for-parameter
    assert _error(lambda: init(KEY, (4, 4), jnp.float8_e4m3fn))[0] is ValueError


def test_factories_imported_before_install_round_once():
  """A module that did `from jax.nn.initializers import normal` before
  installing holds JAX's factory object itself: it routes too."""
  from jax.nn.initializers import normal, variance_scaling  # pylint: disable=g-import-not-at-top
  sig = inspect.signature(normal)
  key = jax.random.key(3)
  jax_own = normal(0.02)(key, (4,), jnp.float32)
  with jaxfp8.installed():
    assert inspect.signature(normal) == sig
    wide = normal(0.02)(key, (4,), jnp.float32)
    got = [normal(0.02)(key, (128, 64), jnp.float8_e4m3fn),
           variance_scaling(2.0, "fan_in", "truncated_normal")(
               key, (128, 64), jnp.float8_e5m2)]
  want = [jaxfp8.nn.initializers.normal(0.02)(key, (128, 64),
                                              jnp.float8_e4m3fn),
          jaxfp8.nn.initializers.variance_scaling(
              2.0, "fan_in", "truncated_normal")(key, (128, 64),
                                                 jnp.float8_e5m2)]
  for g, w in zip(got, want):
    np.testing.assert_array_equal(np.asarray(g).view(np.uint8),
                                  np.asarray(w).view(np.uint8))
  assert normal.__kwdefaults__ is None and not hasattr(normal, "__signature__")
  # float32 is JAX's own, bit for bit, whichever JAX: 0.10 scales a normal
  # sample by 0.02, 0.12 scales erfinv of a uniform by sqrt(2) * 0.02; the
  # two differ in the last bit of some samples.
  np.testing.assert_array_equal(wide, jax_own)
  np.testing.assert_array_equal(normal(0.02)(key, (4,), jnp.float32), jax_own)


def test_routed_closure_works_where_nothing_was_learned():
  """A closure routed in one process and unpickled in another reaches a
  routing module that has learned nothing yet (simulated by forgetting)."""
  with jaxfp8.installed():
    init = jax.nn.initializers.lecun_normal()
    known = dict(routing._KNOWN)  # pylint: disable=protected-access
    routing._KNOWN.clear()  # pylint: disable=protected-access
    try:
      w = init(jax.random.key(0), (16, 16), jnp.float32)
    finally:
      routing._KNOWN.update(known)  # pylint: disable=protected-access
  want = jax.nn.initializers.lecun_normal()(jax.random.key(0), (16, 16),
                                            jnp.float32)
  np.testing.assert_array_equal(w, want)
