"""jaxfp8.cast / encode / decode: bit-exact against a float64 reference."""
import copy
import gc
import pickle

import hypothesis
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8 import formats
from jaxfp8._src.numerics import decode_grad
from cast_reference import round_reference

NARROW = formats.names(narrow=True)
ROUNDINGS_DET = ("nearest", "down", "up", "toward_zero")


def corner_inputs(fmt) -> np.ndarray:
  """+-0, subnormals, +-max, just above max, every midpoint, NaN, +-Inf."""
  f = formats.get(fmt)
  v = f.values
  mids = (v[1:] + v[:-1]) / 2
  top = f.max
  extra = [0.0, -0.0, f.min_subnormal, f.min_subnormal / 2,
           f.min_subnormal / 3, f.min_normal, top,
           np.nextafter(np.float32(top), np.float32(np.inf)), top * 1.03,
           top * 1.5, top * 4, 1e30, 3.4e38, 1e-40, 6e-39, 1e-45, np.nan,
           np.inf, -np.inf]
  x = np.concatenate([v, mids, np.nextafter(mids.astype(np.float32), 0),
                      np.nextafter(mids.astype(np.float32), np.float32(1e38)),
                      extra])
  x = np.concatenate([x, -x])
  x = np.where(np.isfinite(x), np.clip(x, -3.4e38, 3.4e38), x)
  return x.astype(np.float32)


def _values(y) -> np.ndarray:
  """The exact values of a cast result, read in NumPy (float64).

  What decode computes (test_decode_inverts_every_code checks it against the
  same code table), without compiling decode's eager ops for every shape.
  """
  if isinstance(y, jaxfp8.CodeArray):
    codes = np.asarray(y.codes).astype(np.int64) & ((1 << y.format.bits) - 1)
    return y.format.code_table[codes].astype(np.float64)
  return np.asarray(y).astype(np.float64)


def assert_same(got, want):
  got = _values(got)
  want = np.asarray(want, np.float64)
  both_nan = np.isnan(got) & np.isnan(want)
  same = (got == want) & (np.signbit(got) == np.signbit(want))
  bad = ~(both_nan | same)
  assert not bad.any(), (got[bad][:10], want[bad][:10])


@pytest.mark.parametrize("saturate", [True, False], ids=["sat", "nosat"])
@pytest.mark.parametrize("rounding", ROUNDINGS_DET)
@pytest.mark.parametrize("fmt", NARROW)
def test_corner_values_match_reference(fmt, rounding, saturate):
  x = corner_inputs(fmt)
  got = jaxfp8.cast(jnp.asarray(x), fmt, rounding=rounding, saturate=saturate)
  assert_same(got, round_reference(x, fmt, rounding, saturate))


@pytest.mark.parametrize("fmt", NARROW)
def test_nearest_matches_ml_dtypes(fmt):
  """Without saturation, nearest rounding is what ml_dtypes computes."""
  f = formats.get(fmt)
  x = corner_inputs(fmt)
  if f.name == "float8_e8m0fnu":
    # ml_dtypes rounds float32 subnormals to 2^-126 or 2^-127 inconsistently.
    x = x[(np.abs(x) >= 2.0**-126) | ~np.isfinite(x) | (x == 0)]
  if not f.has_nan:
    # ml_dtypes sends +NaN to -0 and -NaN to +0; jaxfp8 sends every NaN to -0.
    x = x[~np.isnan(x)]
  want = x.astype(f.dtype).astype(np.float64)
  assert_same(jaxfp8.cast(jnp.asarray(x), fmt, saturate=False), want)


FINITE_F32 = st.floats(width=32, allow_nan=True, allow_infinity=True)


@hypothesis.given(st.lists(FINITE_F32, min_size=1, max_size=64),
                  st.sampled_from(NARROW), st.sampled_from(ROUNDINGS_DET),
                  st.booleans())
def test_hypothesis_inputs_match_reference(values, fmt, rounding, saturate):
  x = np.array(values, np.float32)
  # Cast in the first places of fmt's corner inputs: an elementwise cast of
  # that shape is the program test_corner_values_match_reference compiled
  # (a list of its own length would compile a program per example).
  padded = corner_inputs(fmt)
  assert len(x) <= len(padded)
  padded[:len(x)] = x
  got = jaxfp8.cast(jnp.asarray(padded), fmt, rounding=rounding,
                    saturate=saturate)
  assert_same(_values(got)[:len(x)], round_reference(x, fmt, rounding,
                                                     saturate))


@pytest.mark.parametrize("rounding", ROUNDINGS_DET)
@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
def test_wide_16_bit_formats_round_exactly(fmt, rounding):
  f = formats.get(fmt)
  rng = np.random.default_rng(0)
  x = np.concatenate([rng.standard_normal(2000) * 10.0**rng.integers(-8, 8, 2000),
                      [f.max, f.max * 1.001, 1e38, np.inf, np.nan, 0.0]])
  x = np.concatenate([x, -x]).astype(np.float32)
  got = jaxfp8.cast(jnp.asarray(x), fmt, rounding=rounding)
  assert got.dtype == f.dtype
  assert_same(got, round_reference(x, fmt, rounding, True))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1", "e2m3", "e8m0"])
def test_jit_and_vmap_equal_eager(fmt):
  x = jnp.asarray(corner_inputs(fmt))
  eager = jaxfp8.encode(x, fmt, rounding="up").codes
  jitted = jax.jit(lambda v: jaxfp8.encode(v, fmt, rounding="up").codes)(x)
  mapped = jax.vmap(lambda v: jaxfp8.encode(v, fmt, rounding="up").codes)(
      x.reshape(2, -1))
  np.testing.assert_array_equal(eager, jitted)
  np.testing.assert_array_equal(eager, mapped.reshape(-1))


@pytest.mark.parametrize("fmt", NARROW)
def test_encode_codes_match_ml_dtypes_bits(fmt):
  f = formats.get(fmt)
  x = f.values.astype(np.float32)
  want = x.astype(f.dtype).view(np.uint8)
  np.testing.assert_array_equal(jaxfp8.encode(jnp.asarray(x), fmt).codes, want)


@pytest.mark.parametrize("fmt", NARROW)
def test_decode_inverts_every_code(fmt):
  f = formats.get(fmt)
  codes = jax.device_put(np.arange(2**f.bits, dtype=np.uint8))
  got = np.asarray(jaxfp8.decode(jaxfp8.CodeArray(codes, f)), np.float64)
  np.testing.assert_array_equal(got, f.code_table.astype(np.float64))


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2", "e2m1", "e2m3", "e3m2", "e8m0"])
def test_stochastic_is_unbiased_and_uses_neighbours(fmt):
  f = formats.get(fmt)
  v = f.values[f.values > 0]
  lo, hi = v[len(v) // 2], v[len(v) // 2 + 1]
  targets = np.array([lo + (hi - lo) * t for t in (0.1, 0.5, 0.77)], np.float32)
  n = 2**16
  x = jnp.asarray(np.repeat(targets, n))
  out = _values(jaxfp8.cast(x, fmt, rounding="stochastic",
                            key=jax.random.key(7)))
  out = out.reshape(len(targets), n)
  assert np.isin(out, [lo, hi]).all()
  stderr = (hi - lo) * 0.5 / np.sqrt(n)
  np.testing.assert_array_less(np.abs(out.mean(axis=1) - targets), 5 * stderr)


def test_stochastic_below_smallest_subnormal_is_unbiased():
  f = formats.get("e4m3")
  t = np.float32(f.min_subnormal * 0.3)
  out = jaxfp8.cast(jnp.full((2**16,), t), f, rounding="stochastic",
                    key=jax.random.key(1))
  out = np.asarray(out).astype(np.float32)
  assert set(np.unique(out)) <= {0.0, np.float32(f.min_subnormal)}
  assert abs(float(out.mean()) - t) < 5 * f.min_subnormal * 0.5 / 256


def test_straight_through_gradient():
  g = jax.grad(lambda x: jaxfp8.cast(x, "e4m3").astype(jnp.float32).sum())(
      jnp.array([0.3, 1000.0, -2.0]))
  np.testing.assert_array_equal(g, [1.0, 1.0, 1.0])


# Cotangents no narrow format holds: beyond max, between grid points, tiny.
COTANGENTS = np.array([1000.0, 0.3, -7.1, 1e5, 3e-9, 1.0], np.float32)
GRAD_FORMATS = (*NARROW, "bfloat16", "float16")


def _grad_inputs(fmt):
  signed = formats.get(fmt).signed
  return jnp.array([1.0, -2.5, 3.0, 0.7, 1e4, -1e-3] if signed
                   else [1.0, 2.5, 3.0, 0.7, 1e4, 1e-3])


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("fmt,make", [
    (fmt, make) for fmt in GRAD_FORMATS
    for make in (("cast", "encode", "astype", "indexed")
                 if formats.get(fmt).narrow else ("cast",))])
def test_decode_of_cast_is_exact_identity_gradient(fmt, make, jit):
  """d decode(cast(x))/dx = 1 exactly, whatever the cotangent and format."""
  w = jnp.asarray(COTANGENTS)

  def loss(x):
    if make == "cast":
      y = jaxfp8.decode(jaxfp8.cast(x, fmt))
    elif make == "encode":
      y = jaxfp8.decode(jaxfp8.encode(x, fmt))
    elif make == "astype":
      y = jaxfp8.encode(x, fmt).astype(jnp.float32)
    else:  # a CodeArray indexed and reshaped before decoding
      y = jaxfp8.decode(jaxfp8.encode(x[None], fmt)[0].reshape(2, 3)).ravel()
    return (y * w).sum()

  grad = jax.jit(jax.grad(loss)) if jit else jax.grad(loss)
  np.testing.assert_array_equal(grad(_grad_inputs(fmt)), COTANGENTS)


@pytest.mark.parametrize("fmt", ["e4m3", "e2m3", "e2m1", "bf16"])
def test_forward_mode_tangent_is_exact(fmt):
  x, t = _grad_inputs(fmt), jnp.asarray(COTANGENTS)
  _, tangent = jax.jvp(lambda x: jaxfp8.decode(jaxfp8.cast(x, fmt)), (x,), (t,))
  np.testing.assert_array_equal(tangent, COTANGENTS)
  jac = jax.jacfwd(lambda x: jaxfp8.decode(jaxfp8.cast(x, fmt)))(x)
  np.testing.assert_array_equal(jac, np.eye(len(COTANGENTS)))


def test_straight_through_gradient_in_the_input_precision():
  x = jnp.array([1.0, 2.0, 3.0], jnp.bfloat16)
  g = jax.grad(lambda x: (jaxfp8.decode(jaxfp8.cast(x, "e4m3")) * 0.3).sum())(x)
  assert g.dtype == jnp.bfloat16
  np.testing.assert_array_equal(g, jnp.full(3, 0.3, jnp.bfloat16))


def test_stochastic_and_vmapped_straight_through():
  x, k = jnp.array([1.05, 2.3, -0.7]), jax.random.key(0)
  g = jax.jit(jax.grad(lambda x, k: (jaxfp8.decode(jaxfp8.cast(
      x, "e2m3", rounding="stochastic", key=k)) * 0.3).sum()))(x, k)
  np.testing.assert_array_equal(g, np.full(3, 0.3, np.float32))
  g = jax.vmap(jax.grad(lambda x: (jaxfp8.decode(jaxfp8.cast(x, "e5m2"))
                                   * 1e6).sum()))(jnp.stack([x, x]))
  np.testing.assert_array_equal(g, np.full((2, 3), 1e6, np.float32))


def test_gradient_through_the_narrow_array_is_held_in_the_format():
  """What JAX gives through a native narrow array: the tangent in its format."""
  x = jnp.array([1.0, 2.0])
  g = jax.grad(lambda x: (jaxfp8.cast(x, "e4m3").astype(jnp.float32)
                          * 0.3).sum())(x)
  np.testing.assert_array_equal(g, np.full(2, float(np.float32(0.3).astype(
      jnp.float8_e4m3fn)), np.float32))


def test_traced_cast_results_are_forgotten():
  jax.grad(lambda x: jaxfp8.decode(jaxfp8.cast(x, "e4m3")).sum())(jnp.ones(3))
  jax.jit(lambda x: jaxfp8.decode(jaxfp8.cast(x, "e5m2")))(jnp.ones(3))
  gc.collect()
  assert not decode_grad._SOURCES  # pylint: disable=protected-access


def test_decode_of_other_wide_arrays_keeps_jax_gradient():
  g = jax.grad(lambda x: (jaxfp8.decode(x * 2.0) * 3.0).sum())(jnp.ones(2))
  np.testing.assert_array_equal(g, [6.0, 6.0])


def test_cast_never_nan_from_finite_when_saturating():
  x = jnp.asarray(np.random.default_rng(0).standard_normal(4096) * 1e4,
                  jnp.float32)
  for fmt in ("e4m3", "e5m2", "e4m3fnuz", "e2m1", "e3m2"):
    assert not np.isnan(_values(jaxfp8.cast(x, fmt))).any()


def test_float6_result_is_code_array_and_survives_jit():
  y = jax.jit(lambda x: jaxfp8.cast(x, "e3m2"))(jnp.array([1.0, 100.0]))
  assert isinstance(y, jaxfp8.CodeArray) and y.format.name == "float6_e3m2fn"
  np.testing.assert_array_equal(jaxfp8.decode(y), [1.0, 28.0])
  assert y.shape == (2,) and y[1:].shape == (1,)


def test_decode_of_numpy_float6():
  x = np.array([0.5, -3.0], formats.get("e2m3").dtype)
  np.testing.assert_array_equal(jaxfp8.decode(x), [0.5, -3.0])


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
@pytest.mark.parametrize("rounding", ROUNDINGS_DET)
@pytest.mark.parametrize("saturate", [True, False], ids=["sat", "nosat"])
def test_wide_16_bit_subnormals(fmt, rounding, saturate):
  """bfloat16's subnormals lie below float32's normals: none may flush."""
  f = formats.get(fmt)
  sub = f.values[(f.values > 0) & (f.values < f.min_normal)]
  sub = sub[np.linspace(0, len(sub) - 1, 200).astype(int)]
  mids = (sub[1:] + sub[:-1]) / 2
  x = np.concatenate([sub, mids, sub * 1.3, [f.min_subnormal / 2,
                      f.min_subnormal * 0.6, f.min_normal, 1e-39, 9.18e-41]])
  x = np.concatenate([x, -x]).astype(np.float32)
  got = jaxfp8.cast(jnp.asarray(x), fmt, rounding=rounding, saturate=saturate)
  assert_same(got, round_reference(x, fmt, rounding, saturate))
  if rounding == "nearest":
    assert_same(got, x.astype(f.dtype).astype(np.float64))


def test_bf16_subnormals_survive_the_default_cast():
  x = jnp.array([1e-39, -1e-39, 9.18e-41])
  got = np.asarray(jaxfp8.cast(x, "bf16"), np.float64)
  np.testing.assert_array_equal(
      got, np.asarray(x).astype(jnp.bfloat16).astype(np.float64))
  assert (got != 0).all()


# -- CodeArray -----------------------------------------------------------------


def test_code_array_iterates_and_bounds_checks():
  ca = jaxfp8.cast(jnp.linspace(-3, 3, 3), "e2m3")
  # Bounds first: without them the iteration below would never end.
  for bad in (3, 5, -4, np.int64(7)):
    with pytest.raises(IndexError, match="out of bounds for axis 0 with size 3"):
      ca[bad]  # pylint: disable=pointless-statement
  assert float(ca[-3].astype(jnp.float32)) == -3.0
  assert [float(v.astype(jnp.float32)) for v in ca] == [-3.0, 0.0, 3.0]
  assert len(list(ca)) == len(ca) == 3
  grid = jaxfp8.cast(jnp.ones((2, 3)), "e2m3")
  assert grid[1, 2].shape == () and grid[..., -1].shape == (2,)
  assert grid[None, 1].shape == (1, 3) and grid[:, ::2].shape == (2, 2)
  with pytest.raises(IndexError, match="index 3 is out of bounds for axis 1"):
    grid[0, 3]  # pylint: disable=pointless-statement
  with pytest.raises(IndexError, match="index -3 is out of bounds for axis 0"):
    grid[..., -3, 0]  # pylint: disable=pointless-statement
  with pytest.raises(IndexError, match="too many indices"):
    grid[0, 0, 0]  # pylint: disable=pointless-statement


def test_zero_d_code_array_has_no_length():
  scalar = jaxfp8.cast(jnp.float32(1.5), "e2m3")
  with pytest.raises(TypeError, match="len"):
    len(scalar)
  with pytest.raises(TypeError, match="iteration over a 0-d"):
    iter(scalar)


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy,
                                    lambda a: pickle.loads(pickle.dumps(a))],
                         ids=["copy", "deepcopy", "pickle"])
def test_code_array_copies(copier):
  ca = jaxfp8.cast(jnp.array([1.5, -7.0]), "e3m2")
  got = copier(ca)
  assert got.format is ca.format
  np.testing.assert_array_equal(got.codes, ca.codes)
  np.testing.assert_array_equal(jaxfp8.decode(got), [1.5, -7.0])


@pytest.mark.parametrize("fmt", ["e2m3", "e3m2", "e2m1"])
def test_high_bits_of_codes_are_ignored(fmt):
  f = formats.get(fmt)
  low = np.arange(2**f.bits, dtype=np.uint8)
  high = low | np.uint8(0xFF ^ ((1 << f.bits) - 1))
  want = f.code_table.astype(np.float64)
  for codes in (low, high, high.astype(np.int32)):
    ca = jaxfp8.CodeArray(jnp.asarray(codes), f)
    np.testing.assert_array_equal(np.asarray(jaxfp8.decode(ca), np.float64),
                                  want)
    np.testing.assert_array_equal(np.asarray(ca, np.float64), want)


def test_code_array_refuses_float_codes_and_wide_formats():
  with pytest.raises(TypeError, match="`codes` argument to `CodeArray`.*"
                     "integer.*float32"):
    jaxfp8.CodeArray(jnp.array([1.7]), "e2m3")
  with pytest.raises(ValueError, match="`fmt` argument to `CodeArray`.*narrow"
                     ".*float32"):
    jaxfp8.CodeArray(jnp.array([1], jnp.uint8), "f32")


def test_decode_dtype_goes_through_the_registry():
  ca = jaxfp8.cast(jnp.array([1.5, -2.0]), "e2m3")
  assert jaxfp8.decode(ca, "bf16").dtype == jnp.bfloat16
  assert jaxfp8.decode(jnp.ones(2, jnp.float8_e4m3fn), "half").dtype == jnp.float16
  with pytest.raises(TypeError, match="`dtype` argument to `decode` must be a "
                     "wide format.*float6_e2m3fn"):
    jaxfp8.decode(ca, "float6_e2m3fn")
  with pytest.raises(TypeError, match="`dtype` argument to `decode`.*int32"):
    jaxfp8.decode(ca, jnp.int32)
  with pytest.raises(ValueError, match="Unknown format 'f4'"):
    jaxfp8.decode(ca, "f4")


# -- errors --------------------------------------------------------------------


def test_missing_key_for_stochastic():
  with pytest.raises(ValueError, match="needs a `key`"):
    jaxfp8.cast(jnp.ones(3), "e4m3", rounding="stochastic")


def test_bad_key():
  with pytest.raises(TypeError, match="`key` argument to `cast`"):
    jaxfp8.cast(jnp.ones(3), "e4m3", rounding="stochastic", key=3)


def test_integer_target_format():
  with pytest.raises(TypeError, match="must be a floating format.*int8"):
    jaxfp8.cast(jnp.ones(3), jnp.int8)


def test_non_array_input():
  with pytest.raises(TypeError, match="`x` argument to `cast`.*list"):
    jaxfp8.cast([1.0, 2.0], "e4m3")


def test_unknown_rounding():
  with pytest.raises(ValueError, match="`rounding`.*'nearest'.*'banker'"):
    jaxfp8.cast(jnp.ones(3), "e4m3", rounding="banker")


def test_unknown_format_lists_nearest_names():
  with pytest.raises(ValueError, match="'e4m4'.*did you mean.*'e4m3'"):
    jaxfp8.cast(jnp.ones(3), "e4m4")


def test_numpy_type_code_is_not_a_format():
  with pytest.raises(ValueError, match="Unknown format 'f4'.*'fp4'"):
    jaxfp8.cast(jnp.ones(3), "f4")


@pytest.mark.parametrize("fmt", NARROW)
def test_integer_path_equals_xla_convert_path(fmt):
  """encode() always rounds with integers; cast() may use XLA's convert."""
  x = jnp.asarray(corner_inputs(fmt))
  via_codes = _values(jaxfp8.encode(x, fmt))
  assert_same(jaxfp8.cast(x, fmt), via_codes)


def test_stochastic_below_the_smallest_bf16_subnormal():
  # 2^-140 lies below bfloat16's smallest subnormal 2^-133 (and is a float32
  # subnormal): it rounds up to 2^-133 with probability 2^-7, else to 0.
  x = jnp.full((1 << 16,), np.float32(2.0**-140))
  y = jaxfp8.cast(x, jnp.bfloat16, rounding="stochastic",
                  key=jax.random.key(5))
  bits = np.asarray(y).view(np.uint16)
  assert set(np.unique(bits)) <= {0, 1}
  assert abs(bits.mean() - 2.0**-7) < 4 * np.sqrt(2.0**-7 / (1 << 16))


def test_codes_kept_from_an_eager_grad_stay_usable():
  import copy  # pylint: disable=g-import-not-at-top
  import pickle  # pylint: disable=g-import-not-at-top
  kept = []

  def loss(x):
    y = jaxfp8.encode(x, "e4m3")
    kept.append(y)
    return jaxfp8.decode(y).sum()

  jax.grad(loss)(jnp.array([0.3, -1.2, 2.5]))
  y = kept[0]
  # Eager grad hands back concrete codes; their traced source is dropped
  # once its trace is over, so indexing, iterating, reshaping, decoding,
  # copying and pickling work after the grad. (Inside a later jit, JAX's own
  # rule applies: a value leaked from a transformation by a side effect
  # raises UnexpectedTracerError.)
  assert float(y[0].astype(jnp.float32)) == 0.3125 and len(list(y)) == 3
  assert y.reshape(3, 1).shape == (3, 1) and y.T.shape == (3,)
  np.testing.assert_array_equal(np.asarray(jaxfp8.decode(y)),
                                [0.3125, -1.25, 2.5])
  back = pickle.loads(pickle.dumps(y))
  np.testing.assert_array_equal(np.asarray(back.codes), np.asarray(y.codes))
  assert copy.deepcopy(y).format is y.format


def test_codes_take_their_straight_through_source_into_jit():
  # Its regression: the source was no pytree child, so codes passed into
  # jit under grad lost it and the gradient came out zero, silently.
  x = jnp.array([0.3, -1.2, 2.5, 7.0])
  c = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
  decode_dot = jax.jit(lambda y: (jaxfp8.decode(y) * c).sum())
  for fmt in ("float6_e2m3fn", "float4_e2m1fn"):
    g = jax.grad(lambda v: decode_dot(jaxfp8.encode(v, fmt)))(x)
    np.testing.assert_array_equal(np.asarray(g), c)
  # Codes made inside a jit keep their source there: their gradient raises.
  encode_in_jit = jax.jit(lambda v: jaxfp8.encode(v, "float6_e2m3fn"))
  assert len(jax.tree_util.tree_leaves(encode_in_jit(x))) == 1
  with pytest.raises(TypeError, match="left it without its straight-through"):
    jax.grad(lambda v: jaxfp8.decode(encode_in_jit(v)).sum())(x)


@pytest.mark.filterwarnings("ignore:Explicitly requested dtype float64")
def test_decode_to_float64_by_name():
  x = jnp.array([1.5], jnp.float8_e4m3fn)
  for name in ("float64", "f64", np.float64):
    assert jaxfp8.decode(x, name).dtype == jnp.zeros((), np.float64).dtype
  with pytest.raises(TypeError, match="floating format"):
    jaxfp8.formats.get("int32")
