"""NVFP4 with TE's two-level scales: codes, block scales and tensor scale
bit-exact against a float64 NumPy reference of TE's float32 steps; jaxfp8's
pow2 tensor scale; stochastic rounding."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cast_reference import round_reference
from jaxfp8 import mx
from jaxfp8._src.numerics import formats
from jaxfp8._src.mx import nvfp4
from jaxfp8._src.mx import pack as mx_pack

F32_MAX = float(np.finfo(np.float32).max)
E4M3 = formats.get("float8_e4m3fn")
E2M1 = formats.get("float4_e2m1fn")
SIXTH = float(np.float32(1.0 / 6.0))  # C's 1.0f / 6.0f


def _f32(v):
  """float64 -> float32 with one correct rounding (float64 holds every
  product of two float32 values exactly, and a quotient's double rounding
  through float64 is innocuous)."""
  with np.errstate(over="ignore"):
    return np.float32(v)


def _blocks(x, block):
  bm, bk = block
  m, k = x.shape[-2:]
  grid = (*x.shape[:-2], -(-m // bm), -(-k // bk))
  for idx in np.ndindex(*grid):
    *lead, i, j = idx
    yield idx, (*lead, slice(i * bm, (i + 1) * bm),
                slice(j * bk, (j + 1) * bk))


def _grid(x, block):
  return (*x.shape[:-2], -(-x.shape[-2] // block[0]),
          -(-x.shape[-1] // block[1]))


def _good_amax(x, block):
  """Largest |x| over the blocks without NaN or Inf (0 if none)."""
  amax = 0.0
  for _, sl in _blocks(x, block):
    t = x[sl].astype(np.float64)
    if np.isfinite(t).all():
      amax = max(amax, np.abs(t).max())
  return amax


def reference_te(x, block, u=None):
  """(element values, block scale values, tensor scale) of TE's rule."""
  x = np.asarray(x, np.float32)
  amax = _good_amax(x, block)
  if amax == 0:
    s_enc = 1.0
  else:
    s_enc = float(_f32(448.0 * 6.0 / amax))
    s_enc = min(s_enc, F32_MAX)
  s_dec = float(_f32(1.0 / s_enc))
  mult = float(_f32(s_enc * SIXTH))
  values = np.zeros(x.shape, np.float64)
  scales = np.zeros(_grid(x, block), np.float64)
  for idx, sl in _blocks(x, block):
    t = x[sl].astype(np.float64)
    if not np.isfinite(t).all():
      scales[idx] = np.nan
      continue
    bs = round_reference(_f32(np.abs(t).max() * mult), E4M3)
    scales[idx] = bs
    d = float(_f32(bs * s_dec))
    enc = F32_MAX if d == 0 else min(float(_f32(1.0 / d)), F32_MAX)
    y = _f32(t * enc)
    if u is None:
      values[sl] = round_reference(y, E2M1)
    else:
      values[sl] = round_reference(y, E2M1, "stochastic", u=u[sl])
  return values, scales, np.float32(s_dec)


def reference_pow2(x, block):
  """jaxfp8's nvfp4: 2^j tensor scale, block scales rounded down."""
  x = np.asarray(x, np.float32)
  amax = _good_amax(x, block)
  j = 0
  if amax > 0:
    j = int(np.ceil(np.log2(amax / 2688.0)))
    while amax > 2688.0 * 2.0**j:  # the smallest j with amax <= 2688 * 2^j
      j += 1
    while amax <= 2688.0 * 2.0**(j - 1):
      j -= 1
    j = min(max(j, -126), 127)
  e4m3 = E4M3.values[(E4M3.values >= 0) & np.isfinite(E4M3.values)]
  values = np.zeros(x.shape, np.float64)
  scales = np.zeros(_grid(x, block), np.float64)
  for idx, sl in _blocks(x, block):
    t = x[sl].astype(np.float64)
    if not np.isfinite(t).all():
      scales[idx] = np.nan
      continue
    q = np.abs(t).max() / 2.0**j / 6.0
    bs = e4m3[np.searchsorted(e4m3, min(q, 448.0), side="right") - 1]
    scales[idx] = bs
    xs = t / 2.0**j
    y = np.where(np.abs(xs) < 2.0**-126, np.copysign(0.0, xs),
                 _f32(xs / bs) if bs else np.copysign(0.0, xs))
    values[sl] = round_reference(y, E2M1)
  return values, scales, np.float32(2.0**j)


def assert_matches(got, want):
  codes, bs, ts = got
  w_codes, w_bs, w_ts = want
  c = np.asarray(codes).astype(np.float64)
  np.testing.assert_array_equal(c, w_codes)
  np.testing.assert_array_equal(np.signbit(c), np.signbit(w_codes))
  np.testing.assert_array_equal(np.asarray(bs).astype(np.float64), w_bs)
  assert np.asarray(ts).view(np.uint32) == w_ts.view(np.uint32), (ts, w_ts)


def _special(scale=1.0):
  """Rows of 16: zeros, subnormals, NaN/Inf, +-max, ragged K = 40."""
  rng = np.random.default_rng(0)
  x = (rng.standard_normal((6, 40)) * 2.0 ** rng.integers(-12, 4, (6, 1)))
  x[0] = 0.0
  x[1, :16] = [1e-45, -1e-40, 3e-39, 0, -0.0, 2e-44] + [1e-42] * 10
  x[2, 3] = np.nan
  x[3, 20] = np.inf
  x[4, :4] = [6.0, -6.0, 5.0, 7.0]
  x[5, 32:] = [2.0**-9, -(2.0**-10), 0.25, 0.75, 1.25, -2.5, 3.5, 5.0]
  with np.errstate(over="ignore", invalid="ignore"):
    return (x * scale).astype(np.float32)


# Tensors whose amax reaches TE's guards: ordinary, tiny (S_enc capped at
# FLT_MAX, S_dec a subnormal), all subnormal, huge, all zero.
_SCALES = {"unit": 1.0, "tiny": 1e-37, "subnormal": 1e-41, "huge": 1e37,
           "zero": 0.0}


@pytest.mark.parametrize("block", nvfp4.BLOCKS, ids=str)
@pytest.mark.parametrize("scale", list(_SCALES), ids=list(_SCALES))
def test_te_rule_bit_exact(block, scale):
  x = _special(_SCALES[scale])
  if block == (16, 16):
    x = np.concatenate([x, x[::-1] * 0.75, x[:5] * 0.5])  # M = 17: ragged
  got = nvfp4.quantize(x, block=block)
  assert got[0].dtype == jnp.float4_e2m1fn and got[0].shape == x.shape
  assert got[1].dtype == jnp.float8_e4m3fn and got[1].shape == _grid(x, block)
  assert got[2].dtype == jnp.float32 and got[2].shape == ()
  assert_matches(got, reference_te(x, block))


def test_guards_are_reached():
  _, _, ts = nvfp4.quantize(_special(1e-37))
  assert 0 < float(ts) < 2.0**-126                 # S_dec subnormal
  _, _, ts = nvfp4.quantize(_special(1e-41))
  assert float(ts) == float(np.float32(1 / np.float32(F32_MAX)))
  _, _, ts = nvfp4.quantize(_special(0.0))
  assert float(ts) == 1.0                          # amax 0: S_enc = 1
  codes, bs, _ = nvfp4.quantize(_special())
  assert np.isnan(np.asarray(bs, np.float32)[2, 0])   # NaN block
  assert np.isnan(np.asarray(bs, np.float32)[3, 1])   # Inf block
  assert (np.asarray(codes)[2, :16].astype(np.float32) == 0).all()


def test_batched_tensor_scale_is_over_the_whole_array():
  x = np.stack([_special(), _special() * 4])
  got = nvfp4.quantize(x)
  assert got[1].shape == (2, 6, 3)
  assert_matches(got, reference_te(x, (1, 16)))


@pytest.mark.parametrize("block", nvfp4.BLOCKS, ids=str)
def test_pow2_tensor_scale(block):
  x = _special()
  got = nvfp4.quantize(x, block=block, tensor_scale="pow2")
  assert_matches(got, reference_pow2(x, block))


def test_pow2_is_jaxfp8_nvfp4():
  x = _special()
  codes, bs, ts = nvfp4.quantize(x, tensor_scale="pow2")
  a = mx.quantize(x, "nvfp4", pad=True)
  np.testing.assert_array_equal(np.asarray(bs).view(np.uint8),
                                np.asarray(a.scales).view(np.uint8))
  assert float(ts) == float(a.tensor_scale)
  want = np.asarray(a.dequantize())
  got = np.asarray(nvfp4.dequantize(codes, bs, ts))
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


# -- one quantizer: jaxfp8.mx.quantize(x, "nvfp4") is quantize_tiles too ----

def _mx_nvfp4(x, **kwargs):
  """(e2m1 codes, e4m3 scale codes, tensor scale bits) of mx.quantize."""
  a = mx.quantize(x, "nvfp4", pad=True, **kwargs)
  codes = np.asarray(mx_pack.unpack(a.data, 4))[..., :x.shape[-1]]
  return (codes, np.asarray(a.scales).view(np.uint8),
          np.asarray(a.tensor_scale).view(np.uint32))


def _recipe_nvfp4(x, jit=False, **kwargs):
  f = lambda x, key: nvfp4.quantize(x, tensor_scale="pow2", key=key,
                                    **kwargs)
  codes, bs, ts = (jax.jit(f) if jit else f)(x, kwargs.pop("key", None))
  return (np.asarray(codes).view(np.uint8), np.asarray(bs).view(np.uint8),
          np.asarray(ts).view(np.uint32))


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
@pytest.mark.parametrize("scale_mode", ["floor", "ceil", "rceil", "even"])
@pytest.mark.parametrize("scale", list(_SCALES), ids=list(_SCALES))
def test_both_entry_points_give_the_same_bits(scale, scale_mode, rounding,
                                              jit):
  """Zeros, subnormals, NaN/Inf blocks, a ragged edge, every tensor-scale
  guard; stochastic rounding draws jax.random.bits(key, x.shape) in both."""
  x = _special(_SCALES[scale])
  key = jax.random.key(3) if rounding == "stochastic" else None
  want = _mx_nvfp4(x, scale_mode=scale_mode, rounding=rounding, key=key)
  got = _recipe_nvfp4(x, jit, scale_mode=scale_mode, rounding=rounding,
                      key=key)
  for g, w in zip(got, want):
    np.testing.assert_array_equal(g, w)


def test_both_entry_points_agree_on_tiny_tensors():
  """Tensor exponents below nv_fast_min_exponent: the exact branch."""
  x = _special(2.0**-120)
  for rounding, key in [("nearest", None), ("stochastic", jax.random.key(1))]:
    want = _mx_nvfp4(x, rounding=rounding, key=key)
    got = _recipe_nvfp4(x, rounding=rounding, key=key)
    for g, w in zip(got, want):
      np.testing.assert_array_equal(g, w)


def test_scale_mode_is_for_pow2():
  with pytest.raises(ValueError, match="scale_mode"):
    nvfp4.quantize(np.ones((2, 16), np.float32), scale_mode="ceil")
  with pytest.raises(ValueError, match="scale_mode"):
    nvfp4.quantize(np.ones((2, 16), np.float32), tensor_scale="pow2",
                   scale_mode="up")


@pytest.mark.parametrize("scale", ["unit", "tiny", "subnormal"])
def test_dequantize_rounds_once(scale):
  x = _special(_SCALES[scale])
  codes, bs, ts = nvfp4.quantize(x)
  got = np.asarray(nvfp4.dequantize(codes, bs, ts))
  per = np.repeat(np.asarray(bs).astype(np.float64), 16, -1)[:, :40]
  want = _f32(np.asarray(codes).astype(np.float64) * per * float(ts))
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  np.testing.assert_array_equal(got[~np.isnan(got)].view(np.uint32),
                                want[~np.isnan(want)].view(np.uint32))


# -- stochastic rounding -----------------------------------------------------

def test_stochastic_rounding_is_deterministic():
  """A fixed key gives fixed codes (eager and jit), each one of the two
  e2m1 neighbours of the scaled value; scales are those of nearest."""
  x = _special()
  key = jax.random.key(7)
  got = nvfp4.quantize(x, rounding="stochastic", key=key)
  jitted = jax.jit(lambda x, k: nvfp4.quantize(x, rounding="stochastic",
                                               key=k))(x, key)
  np.testing.assert_array_equal(np.asarray(got[0]).view(np.uint8),
                                np.asarray(jitted[0]).view(np.uint8))
  other = nvfp4.quantize(x, rounding="stochastic", key=jax.random.key(8))
  assert (np.asarray(other[0]).view(np.uint8)
          != np.asarray(got[0]).view(np.uint8)).any()
  ref = reference_te(x, (1, 16))
  np.testing.assert_array_equal(np.asarray(got[1]).astype(np.float64), ref[1])
  assert float(got[2]) == float(ref[2])
  c = np.asarray(got[0]).astype(np.float64)
  lo, hi = _neighbours(ref_scaled(x))
  bad = np.isnan(ref_scaled(x))
  assert ((c == lo) | (c == hi))[~bad].all() and (c[bad] == 0).all()


def ref_scaled(x):
  """The float32 values x * encode that TE rounds into e2m1."""
  x = np.asarray(x, np.float32)
  _, scales, s_dec = reference_te(x, (1, 16))
  out = np.full(x.shape, np.nan)
  for idx, sl in _blocks(x, (1, 16)):
    if np.isnan(scales[idx]):
      continue
    d = float(_f32(scales[idx] * float(s_dec)))
    enc = F32_MAX if d == 0 else min(float(_f32(1.0 / d)), F32_MAX)
    out[sl] = np.clip(_f32(x[sl].astype(np.float64) * enc), -6, 6)
  return out


def _neighbours(y):
  """Signed e2m1 neighbours (toward zero, away from zero) of values y."""
  grid = E2M1.values[E2M1.values >= 0]
  a = np.abs(y)
  i = np.clip(np.searchsorted(grid, np.nan_to_num(a), side="right") - 1, 0,
              len(grid) - 1)
  lo = grid[i]
  hi = np.where(lo == a, lo, grid[np.minimum(i + 1, len(grid) - 1)])
  return np.copysign(lo, y), np.copysign(hi, y)


def test_stochastic_rounding_has_the_exact_probabilities():
  """One block scale for all: each column holds one value; the fraction
  rounded up matches (x - lo) / (hi - lo) and the mean is unbiased."""
  n = 2048
  row = np.array([6.0, 0.1, 0.3, 0.6, 1.1, 1.3, 1.7, 2.2, 2.75, 3.1, 4.5,
                  5.9, -0.4, -2.6, -5.5, 0.0], np.float32)
  x = np.tile(row, (n, 1))
  codes, bs, ts = nvfp4.quantize(x, rounding="stochastic",
                                 key=jax.random.key(0))
  y = ref_scaled(x[:1])[0]
  lo, hi = _neighbours(y)
  c = np.asarray(codes).astype(np.float64)
  assert ((c == lo) | (c == hi)).all()
  p = np.where(hi == lo, 0.0, (y - lo) / np.where(hi == lo, 1, hi - lo))
  frac = (c == hi).mean(axis=0) * (hi != lo)
  sigma = np.sqrt(p * (1 - p) / n)
  assert (np.abs(frac - p) <= 5 * sigma + 1e-12).all(), (frac, p)
  assert ((p > 0.05) & (p < 0.95)).sum() >= 10   # the test can see a bias
  # Unbiased: the mean dequantized value is the scaled value's decode.
  deq = np.asarray(nvfp4.dequantize(codes, bs, ts)).astype(np.float64)
  scale = float(np.asarray(bs).astype(np.float64)[0, 0]) * float(ts)
  err = np.abs(deq.mean(axis=0) - y * scale)
  bound = 5 * sigma * np.abs(hi - lo) + 1e-6 * np.abs(y)
  assert (err <= bound * scale).all()


# -- arguments ---------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, match", [
    (dict(block=(1, 32)), ValueError, "block"),
    (dict(block=(16, 1)), ValueError, "block"),
    (dict(tensor_scale="amax"), ValueError, "tensor_scale"),
    (dict(rounding="up"), ValueError, "rounding"),
    (dict(rounding="stochastic"), ValueError, "key"),
    (dict(rounding="stochastic", key=3), TypeError, "key"),
])
def test_bad_arguments_raise(kwargs, error, match):
  with pytest.raises(error, match=match):
    nvfp4.quantize(np.ones((2, 16), np.float32), **kwargs)


def test_bad_dequantize_arguments_raise():
  codes, bs, ts = nvfp4.quantize(_special())
  with pytest.raises(ValueError, match="block_scales"):
    nvfp4.dequantize(codes, bs[:, :1], ts)
  with pytest.raises(ValueError, match="tensor_scale"):
    nvfp4.dequantize(codes, bs, jnp.ones(2))
  with pytest.raises(ValueError, match="two axes"):
    nvfp4.quantize(np.ones(16, np.float32))


def test_quantize_has_no_gradient():
  f = lambda x: nvfp4.quantize(x)[2]
  with pytest.raises(TypeError, match="no gradient"):
    jax.grad(f)(jnp.ones((2, 16)))


# e2m1's ties (1.25, 2.5, 5 between grid points; x / block_scale exactly
# there) under block scales whose reciprocal is inexact: XLA compiles
# x / broadcast(scale) into x * broadcast(1 / scale), which lands an ulp
# above the tie (issue #43's property sweep); the quotient must be IEEE's.
@pytest.mark.parametrize("jit", [False, True])
def test_format_ties_round_to_even_under_every_block_scale(jit):
  grid = np.array([0, .5, 1, 1.5, 2, 3, 4, 6])
  ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0])
  scales = np.array([1.125, 1.25, 1.375, 1.625, 1.75, 1.875, 0.5625, 0.9375])
  x = np.zeros((len(scales), 32), np.float32)
  x[:, 0] = 6 * scales  # each block's amax: block scale = the scale itself
  x[:, 16] = -6 * scales
  x[:, 1:1 + len(ties)] = ties * scales[:, None]
  x[:, 17:17 + len(ties)] = -ties * scales[:, None]
  f = lambda x: mx.quantize(x, "nvfp4").dequantize()
  got = np.asarray((jax.jit(f) if jit else f)(jnp.asarray(x)))
  lo = np.array([grid[grid <= t].max() for t in ties])
  hi = np.array([grid[grid >= t].min() for t in ties])
  even = np.where(np.isin(lo, grid[::2]), lo, hi)
  np.testing.assert_array_equal(got[:, 1:1 + len(ties)] / scales[:, None],
                                np.broadcast_to(even, (len(scales), len(ties))))
  np.testing.assert_array_equal(got[:, 17:17 + len(ties)] / scales[:, None],
                                -np.broadcast_to(even, (len(scales), len(ties))))
