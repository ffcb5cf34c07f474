"""Precision policies: parsing, printing, saturating casts, jmp and Haiku."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8 import formats
from jaxfp8 import policy as P

ALL_FORMATS = formats.all_formats()
NARROW = formats.all_formats(narrow=True)
NATIVE_NARROW = [f for f in NARROW if f.native and f.signed]
ALIASES = [(f, a) for f in ALL_FORMATS for a in (f.name, *f.aliases)]


@pytest.mark.parametrize("fmt", ALL_FORMATS, ids=lambda f: f.name)
def test_round_trip_every_format(fmt):
  for other in ("float32", "bfloat16", fmt.name):
    p = jaxfp8.Policy(other, fmt, fmt.name)
    q = jaxfp8.get_policy(str(p))
    assert q == p and hash(q) == hash(p)
    assert q.compute_dtype == fmt.dtype and q.param_dtype == np.dtype(
        formats.get(other).dtype)
  alone = jaxfp8.get_policy(fmt.name)
  assert alone == jaxfp8.Policy(fmt, fmt, fmt)
  assert jaxfp8.get_policy(str(alone)) == alone


@pytest.mark.parametrize("fmt,alias", ALIASES, ids=lambda v: str(v))
def test_every_alias_parses(fmt, alias):
  assert jaxfp8.get_policy(f"p=f32,c={alias},o={alias.upper()}") == (
      jaxfp8.Policy(np.float32, fmt.dtype, fmt.dtype))
  assert jaxfp8.get_policy(f"params=float32, compute={alias}") == (
      jaxfp8.Policy("float32", fmt, fmt))


def test_jmp_grammar_defaults():
  p = jaxfp8.get_policy("c=bf16")
  assert (p.param_dtype, p.compute_dtype, p.output_dtype) == (
      np.float32, jnp.bfloat16, jnp.bfloat16)
  p = jaxfp8.get_policy("p=e5m2,c=e4m3")
  assert p.output_dtype == jnp.float8_e4m3fn
  assert jaxfp8.get_policy("full") == jaxfp8.get_policy("p=f32,c=f32,o=f32")
  assert jaxfp8.get_policy("half").compute_dtype == np.float16
  assert jaxfp8.get_policy("f64").param_dtype == np.float64
  assert str(jaxfp8.get_policy("o=f64")) == (
      "params=float32,compute=float32,output=float64")


@pytest.mark.parametrize("name", ["e4m2", "float8", "int8", "p=f32,c=fp9"])
def test_wrong_name_raises_value_error_listing_names(name):
  bad = name.split("=")[-1]
  with pytest.raises(ValueError) as e:
    jaxfp8.get_policy(name)
  msg = str(e.value)
  assert repr(bad) in msg and "get_policy" in msg
  for valid in ("float8_e4m3fn", "e5m2", "bf16", "float32", "float6_e2m3fn"):
    assert valid in msg


def test_wrong_key_raises():
  with pytest.raises(ValueError, match="'q'.*valid keys"):
    jaxfp8.get_policy("q=f32")
  with pytest.raises(TypeError, match="get_policy"):
    jaxfp8.get_policy(jnp.float32)
  with pytest.raises(ValueError, match="'nope'"):
    jaxfp8.Policy("f32", "nope", "f32")


def test_frozen_hashable_with_output_dtype():
  p = jaxfp8.get_policy("p=f32,c=e4m3,o=f32")
  with pytest.raises(dataclasses.FrozenInstanceError):
    p.compute_dtype = jnp.float32  # type: ignore[misc]
  q = p.with_output_dtype("bf16")
  assert q.output_dtype == jnp.bfloat16 and q.compute_dtype == p.compute_dtype
  assert p.output_dtype == np.float32
  assert len({p, q, jaxfp8.get_policy(str(p))}) == 2


# Finite values from 0 through subnormals to the float32 max.
_FINITE = np.array([0.0, -0.0, 1e-45, -1e-40, 1e-8, 0.1, 1.0, -3.3, 240.0,
                    448.0, 449.0, 465.0, -465.0, 57344.0, 61440.0, 1e6, -1e6,
                    1e30, -3.4e38, 3.4028235e38], np.float32)


@pytest.mark.parametrize("fmt", NATIVE_NARROW, ids=lambda f: f.name)
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_narrow_casts_saturate_never_nan(fmt, jit):
  p = jaxfp8.Policy(np.float32, fmt, fmt)
  src = {"a": jnp.asarray(_FINITE), "b": jnp.asarray(_FINITE, jnp.bfloat16)}
  f = jax.jit(p.cast_to_compute) if jit else p.cast_to_compute
  for leaf in jax.tree.leaves(f(src)):
    assert leaf.dtype == fmt.dtype
    vals = np.asarray(leaf).astype(np.float64)
    assert not np.isnan(vals).any() and np.isfinite(vals).all()
    assert np.abs(vals).max() == fmt.max
  # exact: the result is the registry's cast of each value
  expected = np.asarray(jaxfp8.cast(_FINITE, fmt)).astype(np.float64)
  np.testing.assert_array_equal(
      np.asarray(f(src)["a"]).astype(np.float64), expected)


@pytest.mark.parametrize("fmt", [f for f in NARROW if not f.native],
                         ids=lambda f: f.name)
def test_non_native_formats_as_param_only(fmt):
  p = jaxfp8.Policy(fmt, "f32", "f32")
  stored = p.cast_to_param({"w": jnp.asarray(_FINITE)})
  assert isinstance(stored["w"], jaxfp8.CodeArray)
  vals = np.asarray(jaxfp8.decode(stored["w"]))
  assert np.isfinite(vals).all() and np.abs(vals).max() == fmt.max
  back = p.cast_to_compute(stored)
  assert back["w"].dtype == np.float32
  np.testing.assert_array_equal(np.asarray(back["w"]), vals)
  with pytest.raises(TypeError, match=f"{fmt.name}.*param dtype"):
    jaxfp8.Policy("f32", fmt, "f32").cast_to_compute(jnp.ones(3))


def test_scale_format_is_not_a_data_dtype():
  p = jaxfp8.get_policy("p=f32,c=e8m0,o=f32")
  assert jaxfp8.get_policy(str(p)) == p
  with pytest.raises(TypeError, match="float8_e8m0fnu.*scale format"):
    p.cast_to_compute(jnp.ones(2))


def test_wide_casts_and_non_floating_leaves_untouched():
  p = jaxfp8.get_policy("p=f32,c=e5m2,o=bf16")
  key = jax.random.key(0)
  raw_key = jax.random.PRNGKey(0)
  tree = {"i": jnp.arange(3), "k": key, "rk": raw_key, "b": jnp.array(True),
          "n": np.ones(2, np.int8), "s": "text", "none": None}
  out = p.cast_to_compute(tree)
  assert out["i"] is tree["i"] and out["k"] is key and out["rk"] is raw_key
  assert out["b"] is tree["b"] and out["n"] is tree["n"] and out["s"] == "text"
  # narrow -> wide is exact
  x8 = jaxfp8.cast(jnp.array([1.75, -57344.0]), "e5m2")
  np.testing.assert_array_equal(p.cast_to_output(x8),
                                jnp.array([1.75, -57344.0], jnp.bfloat16))
  # wide -> wide is astype (overflow to Inf, never NaN)
  h = jaxfp8.get_policy("half").cast_to_compute(jnp.array([1e6, 1.0]))
  assert h.dtype == jnp.float16 and not jnp.isnan(h).any()


def test_straight_through_gradient():
  p = jaxfp8.get_policy("c=e4m3")
  g = jax.grad(lambda x: p.cast_to_compute(x).astype(jnp.float32).sum())(
      jnp.array([0.3, 1000.0]))
  np.testing.assert_array_equal(g, [1.0, 1.0])


def test_jmp_conversion():
  jmp = pytest.importorskip("jmp")
  jp = jmp.get_policy("p=f32,c=bf16,o=f16")
  p = jaxfp8.Policy.from_jmp(jp)
  assert p == jaxfp8.get_policy("p=f32,c=bf16,o=f16")
  assert p.to_jmp() == jp and str(p.to_jmp()) == str(jp)
  fp8 = jaxfp8.get_policy("p=f32,c=e4m3,o=f32")
  back = jaxfp8.Policy.from_jmp(fp8.to_jmp())
  assert isinstance(fp8.to_jmp(), jmp.Policy) and back == fp8
  with pytest.raises(TypeError, match="from_jmp"):
    jaxfp8.Policy.from_jmp("p=f32")


def test_haiku_set_policy_model_runs():
  hk = pytest.importorskip("haiku")
  policy = jaxfp8.get_policy("p=f32,c=e4m3fn,o=f32")

  def forward(x):
    return hk.nets.MLP([32, 8])(x)

  model = hk.transform(forward)
  x = jax.random.normal(jax.random.key(0), (16, 12))
  params = model.init(jax.random.key(1), x)
  ref = model.apply(params, None, x)
  hk.mixed_precision.set_policy(hk.Linear, policy)
  try:
    params = model.init(jax.random.key(1), x)
    assert all(leaf.dtype == np.float32 for leaf in jax.tree.leaves(params))
    y = jax.jit(model.apply)(params, None, x)
    grads = jax.grad(lambda p: model.apply(p, None, x).sum())(params)
  finally:
    hk.mixed_precision.clear_policy(hk.Linear)
  assert y.dtype == np.float32 and y.shape == (16, 8)
  assert np.isfinite(np.asarray(y)).all()
  # e4m3 has 3 mantissa bits: relative error of a few percent of the scale
  assert float(jnp.abs(y - ref).max()) < 0.15 * float(jnp.abs(ref).max())
  assert float(jnp.abs(y - ref).max()) > 0  # it did compute in fp8
  for g in jax.tree.leaves(grads):
    assert np.isfinite(np.asarray(g)).all() and float(jnp.abs(g).sum()) > 0


def test_float6_leaves_and_dtype_edge_cases():
  import ml_dtypes  # pylint: disable=g-import-not-at-top
  pol = P.get_policy("p=e2m3,c=f32,o=f32")
  host = np.array([1.0, 2.0], ml_dtypes.float6_e2m3fn)
  p = pol.cast_to_param(host)  # a NumPy float6 array becomes codes
  assert isinstance(p, jaxfp8.CodeArray)
  np.testing.assert_array_equal(np.asarray(jaxfp8.decode(p)), [1.0, 2.0])
  with pytest.raises(TypeError, match="compute dtype float6_e2m3fn"):
    P.get_policy("c=e2m3").cast_to_compute(jaxfp8.cast(jnp.ones(2), "e2m3"))
  with pytest.raises(TypeError, match="`param_dtype` argument to `Policy`"):
    P.Policy(None, "f32", "f32")
  assert P.Policy(float, "f32", "f32").param_dtype == jnp.float32


def test_raw_key_of_the_wrong_shape_is_named():
  with pytest.raises(TypeError, match=r"`key` argument to `stochastic_round`"
                     r".*shape \(4,\)"):
    P.stochastic_round(jnp.ones(2), "e4m3", jnp.zeros(4, jnp.uint32))
