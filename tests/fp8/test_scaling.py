"""Per-tensor current and delayed scaling, and jmp-compatible loss scales."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8 import formats
from jaxfp8 import policy as P

SCALED = [f for f in formats.all_formats(narrow=True) if f.signed]
FP8 = [formats.get(n) for n in ("e4m3", "e5m2", "e4m3fnuz", "e3m4")]


def _f64(x):
  """``x``'s values (float32 precision) as float64, read in NumPy.

  A CodeArray is read through its format's code table, what decode computes:
  eager decode/astype ops would compile once per shape and format.
  """
  if isinstance(x, jaxfp8.CodeArray):
    codes = np.asarray(x.codes).astype(np.int64) & ((1 << x.format.bits) - 1)
    return x.format.code_table[codes].astype(np.float64)
  return np.asarray(x).astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("fmt", SCALED, ids=lambda f: f.name)
def test_compute_scale_exact(fmt):
  for a in (1.0, 3.0, 1e-20, 7e5):
    s = float(P.compute_scale(jnp.float32(a), fmt))
    assert s == pytest.approx(a / fmt.max, rel=1e-6)
    s2 = float(P.compute_scale(jnp.float32(a), fmt, margin=2))
    assert s2 == pytest.approx(4 * s, rel=1e-6)
    p2 = float(P.compute_scale(jnp.float32(a), fmt, power_of_two=True))
    assert p2 == 2.0 ** np.ceil(np.log2(np.float64(np.float32(a)) / fmt.max))
  # an amax equal to max gives exactly 1 in both modes
  assert float(P.compute_scale(jnp.float32(fmt.max), fmt)) == 1.0
  assert float(P.compute_scale(jnp.float32(fmt.max), fmt,
                               power_of_two=True)) == 1.0
  for bad in (0.0, np.inf, np.nan):
    assert float(P.compute_scale(jnp.float32(bad), fmt, previous=0.25)) == 0.25
  tiny = float(P.compute_scale(jnp.float32(1e-45), fmt))
  assert tiny >= np.finfo(np.float32).tiny


# (format, margin) pairs: every scaled format's max, margins that bring a
# tiny amax's scale back into float32's normal range and that push a large
# one past it.
_SCALE_CASES = (("e4m3", 0), ("e4m3", 12), ("e5m2", 126), ("e2m1", -7),
                ("e3m2", 60), ("e2m3", -126), ("e3m4", 40))


def test_compute_scale_is_the_rounded_product_shifted_exactly():
  """compute_scale(a) is float32(a * float32(1 / max)) rounded once to a
  24-bit significand, times 2^margin exactly, clipped to float32's normal
  range (and rounded up to a power of two), for amaxes of every binade:
  subnormal ones, and normal ones whose product by 1 / max is below 2^-126,
  which XLA on CPU would flush (and the margin then shift a zero). One
  program for every case, at the suite's flags."""
  rng = np.random.default_rng(11)
  n = 1 << 14
  bits = rng.integers(1, 0x7F800000, n, dtype=np.uint32)
  bits[: n // 4] = rng.integers(1, 0x800000, n // 4, dtype=np.uint32)
  bits[n // 4: n // 2] = rng.integers(0x800000, 0x05000000, n // 4,
                                      dtype=np.uint32)
  a = bits.view(np.float32)
  cases = [(f, m, p2) for f, m in _SCALE_CASES for p2 in (False, True)]

  @jax.jit
  def scales(a):
    return [jax.vmap(lambda v, f=f, m=m, p2=p2: P.compute_scale(
        v, f, margin=m, power_of_two=p2))(a) for f, m, p2 in cases]

  a64 = a.astype(np.float64)
  k = np.where(a64 < 2.0**-60, 64, 0)  # no product below 2^-126 here
  for (f, m, p2), got in zip(cases, scales(a)):
    inv = np.float64(np.float32(1) / np.float32(formats.get(f).max))
    base = (a64 * np.exp2(k) * inv).astype(np.float32).astype(np.float64)
    want = np.clip(base * np.exp2(m - k), 2.0**-126,
                   float(np.finfo(np.float32).max)).astype(np.float32)
    if p2:
      want = np.minimum(np.exp2(np.ceil(np.log2(want.astype(np.float64)))),
                        2.0**127).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(got).view(np.uint32),
                                  want.view(np.uint32),
                                  err_msg=f"{f} margin={m} p2={p2}")


@pytest.mark.parametrize("fmt", SCALED, ids=lambda f: f.name)
@pytest.mark.parametrize("power_of_two", [False, True])
def test_current_scaling_round_trip(fmt, power_of_two):
  # Drawn in NumPy: the source of the normals does not matter, and eager
  # jax.random / .at[] ops compile.
  x = np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 1e3
  x[0] = -3e3
  x = jax.device_put(x)
  s = P.CurrentScaling(fmt, power_of_two=power_of_two)
  q, scale = s.quantize(x)
  vals = _f64(q)
  assert np.isfinite(vals).all()
  # the largest magnitude lands on the format's max (or within one binade)
  top = np.abs(vals).max()
  assert top == fmt.max if not power_of_two else fmt.max / 2 <= top <= fmt.max
  # every value is the nearest grid point of x / scale: error <= half a step
  back = _f64(P.dequantize(q, scale))
  rel_step = 2.0 ** -fmt.mantissa_bits
  big = np.abs(x) > 2.0 ** (fmt.min_exponent + 1) * float(scale)
  err = np.abs(back - np.asarray(x, np.float64))[big]
  assert (err <= 0.5 * rel_step * np.abs(np.asarray(x))[big] * 1.0001).all()
  if power_of_two:  # values on the scaled grid stay exact
    # exact: a power-of-two scale times grid points, in float32
    on_grid = jax.device_put(fmt.values[-5:].astype(np.float32)
                             * np.asarray(scale, np.float32))
    np.testing.assert_array_equal(
        _f64(P.dequantize(P.quantize(on_grid, fmt, scale), scale)),
        np.asarray(on_grid, np.float64))


@pytest.mark.parametrize("fmt", FP8, ids=lambda f: f.name)
def test_quantize_saturates_never_nan(fmt):
  x = jnp.array([3.4e38, -3.4e38, 1e30, -1e-30, 0.0, 1.0])
  for scale in (1.0, 1e-3, 1e-30):
    vals = _f64(P.quantize(x, fmt, scale))
    assert np.isfinite(vals).all() and np.abs(vals).max() == fmt.max


def test_delayed_scaling_updates_under_jit():
  s = P.DelayedScaling.create("e4m3", history_length=3)
  assert s.history_length == 3 and float(s.scale) == 1.0
  traces = []

  @jax.jit
  def step(state, x):
    traces.append(1)
    q, scale = state.quantize(x)
    return state.update(P.amax(x)), q, scale

  amaxes = [448.0, 896.0, 112.0, 224.0, 56.0]
  seen = []
  for i, a in enumerate(amaxes):
    x = jnp.array([a, -a / 2, 0.0])
    prev_scale = float(s.scale)
    s, q, scale = step(s, x)
    assert float(scale) == prev_scale  # quantized with the stored scale
    seen.insert(0, a)
    hist = (seen + [0.0] * 3)[:3]
    np.testing.assert_array_equal(np.asarray(s.amax_history), hist)
    assert float(s.scale) == pytest.approx(max(hist) / 448.0, rel=1e-6)
    assert np.isfinite(_f64(q)).all() and np.abs(_f64(q)).max() <= 448
  assert len(traces) == 1  # one compilation: the state is a pytree of arrays


@pytest.mark.parametrize("reduction,expected", [
    ("max", 8.0), ("most_recent", 2.0), ("mean", 14.0 / 3),
    (lambda h: jnp.min(h), 2.0)])
def test_reductions(reduction, expected):
  s = P.DelayedScaling.create("e5m2", history_length=3, reduction=reduction)
  for a in (8.0, 4.0, 2.0):
    s = s.update(jnp.float32(a))
  assert float(s.reduced_amax()) == pytest.approx(expected, rel=1e-6)
  assert float(s.scale) == pytest.approx(expected / 57344.0, rel=1e-6)


def test_delayed_zero_and_nan_keep_scale_and_pytree():
  s = P.DelayedScaling.create("e4m3", history_length=1, initial_scale=0.5,
                              margin=1)
  assert float(s.update(jnp.float32(0.0)).scale) == 0.5
  assert float(s.update(jnp.float32(np.nan)).scale) == 0.5
  assert float(s.update(jnp.float32(448.0)).scale) == 2.0
  leaves, tree = jax.tree.flatten(s)
  assert len(leaves) == 2
  back = jax.tree.unflatten(tree, leaves)
  assert (back.format, back.reduction, back.margin) == ("float8_e4m3fn",
                                                        "max", 1)
  with pytest.raises(dataclasses.FrozenInstanceError):
    s.scale = 1.0  # type: ignore[misc]


def test_scaling_argument_errors():
  with pytest.raises(ValueError, match="reduction.*'max'"):
    P.DelayedScaling.create("e4m3", reduction="median")
  with pytest.raises(ValueError, match="history_length"):
    P.DelayedScaling.create("e4m3", history_length=0)
  with pytest.raises(TypeError, match="narrow format"):
    P.CurrentScaling("float32")
  with pytest.raises(ValueError, match="'e9m9'"):
    P.CurrentScaling("e9m9")
  with pytest.raises(TypeError, match="margin"):
    P.CurrentScaling("e4m3", margin=0.5)


# -- loss scaling ------------------------------------------------------------------

def test_dynamic_loss_scale_matches_jmp():
  jmp = pytest.importorskip("jmp")
  ours = P.DynamicLossScale(jnp.float32(2.0**15), period=3, factor=2)
  theirs = jmp.DynamicLossScale(jnp.float32(2.0**15), period=3, factor=2)
  adjust = jax.jit(lambda s, f: s.adjust(f))
  pattern = [True, True, True, False, True, True, True, True, False, False]
  for finite in pattern:
    ours = adjust(ours, jnp.array(finite))
    theirs = theirs.adjust(jnp.array(finite))
    assert float(ours.loss_scale) == float(theirs.loss_scale)
    assert int(ours.counter) == int(theirs.counter)
  conv = P.loss_scale_from_jmp(theirs)
  assert isinstance(conv, P.DynamicLossScale)
  assert float(conv.loss_scale) == float(ours.loss_scale)
  back = ours.to_jmp()
  assert isinstance(back, jmp.DynamicLossScale)
  assert float(back.loss_scale) == float(ours.loss_scale)
  assert P.loss_scale_from_jmp(jmp.NoOpLossScale()) == P.NoOpLossScale()
  assert P.loss_scale_from_jmp(jmp.StaticLossScale(8.0)).loss_scale == 8.0
  assert isinstance(P.StaticLossScale(8.0).to_jmp(), jmp.StaticLossScale)
  with pytest.raises(TypeError, match="loss_scale_from_jmp"):
    P.loss_scale_from_jmp(2.0)


def test_loss_scale_scale_unscale_keeps_dtypes():
  ls = P.DynamicLossScale(jnp.float32(1024.0))
  tree = {"f": jnp.array([1.0, 2.0]), "b": jnp.array([1.0], jnp.bfloat16),
          "i": jnp.array([3]),
          "q": jaxfp8.cast(jnp.array([1.0, 400.0]), "e4m3")}
  scaled = ls.scale(tree)
  assert {k: v.dtype for k, v in scaled.items()} == {
      k: v.dtype for k, v in tree.items()}
  np.testing.assert_array_equal(scaled["f"], [1024.0, 2048.0])
  np.testing.assert_array_equal(scaled["i"], [3])
  assert _f64(scaled["q"]).tolist() == [448.0, 448.0]  # saturated, not NaN
  back = ls.unscale(scaled)
  np.testing.assert_array_equal(back["f"], tree["f"])
  assert bool(P.all_finite(tree)) and not bool(
      P.all_finite({"a": jnp.array([jnp.nan])}))
  assert bool(P.all_finite({"i": jax.device_put(np.arange(3, dtype=np.int32))}))
  with pytest.raises(ValueError, match="scalar"):
    ls.adjust(jnp.array([True, False]))


def test_scales_stay_in_float32_range():
  huge = jnp.float32(3e38)
  s = P.compute_scale(huge, "e2m1", margin=3)
  assert float(s) == float(np.finfo(np.float32).max)  # clamped, not previous
  s2 = P.compute_scale(huge, "e2m1", margin=3, power_of_two=True)
  assert float(s2) == 2.0**127
  q = np.asarray(jaxfp8.decode(P.quantize(jnp.array([huge]), "e2m1", s)))
  assert np.isfinite(q).all() and q[0] > 0
  # The margin is an exact power of two, both ways.
  assert float(P.compute_scale(jnp.float32(896.0), "e4m3", margin=-3)) == 0.25
  assert float(P.compute_scale(jnp.float32(896.0), "e4m3", margin=5)) == 64.0
  for bad in (127, -200):
    with pytest.raises(ValueError, match="`margin` argument to `compute_scale`"):
      P.compute_scale(huge, "e4m3", margin=bad)
  with pytest.raises(ValueError, match="`margin` argument to `CurrentScaling`"):
    P.CurrentScaling("e4m3", margin=400)


def test_unsigned_scale_format_refused_for_scaled_tensors():
  for make in (lambda: P.CurrentScaling("e8m0"),
               lambda: P.DelayedScaling.create("e8m0"),
               lambda: P.compute_scale(1.0, "e8m0"),
               lambda: P.quantize(jnp.ones(2), "e8m0", 1.0)):
    with pytest.raises(ValueError, match="signed format"):
      make()


def test_narrow_inputs_the_backend_cannot_hold():
  import ml_dtypes  # pylint: disable=g-import-not-at-top
  ca = jaxfp8.cast(jnp.array([1.0, -3.0, 0.5]), "e2m3")
  host = np.array([1.0, -3.0, 0.5], ml_dtypes.float6_e2m3fn)
  for x in (ca, host):
    assert float(P.amax(x)) == 3.0
    q = P.quantize(x, "e4m3", 0.5)
    np.testing.assert_array_equal(_f64(q), [2.0, -6.0, 1.0])
    q2, scale = P.CurrentScaling("e5m2").quantize(x)
    np.testing.assert_allclose(
        _f64(q2) * float(scale), [1.0, -3.0, 0.5],
        rtol=0.125)


def test_current_scaling_quantize_dequantize_is_straight_through():
  x = jnp.array([1.0, -3.0, 0.7, 2.5])
  g = jax.grad(lambda x: (P.dequantize(*P.CurrentScaling("e4m3").quantize(x))
                          * np.arange(1.0, 5.0, dtype=np.float32)).sum())(x)
  # (x / s) * s in float32: the identity up to one rounding.
  np.testing.assert_allclose(np.asarray(g), [1.0, 2.0, 3.0, 4.0], rtol=1e-6)


def test_subnormal_amax_is_an_amax_eager_and_jit():
  # Issue 15: keeping the previous scale quantized such tensors to zeros.
  a = jnp.float32(1e-38)  # a float32 subnormal
  f = lambda a: P.compute_scale(a, "e4m3", previous=7.0)
  tiny = float(np.finfo(np.float32).tiny)
  assert float(f(a)) == tiny and float(jax.jit(f)(a)) == tiny
