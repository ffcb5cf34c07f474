"""fp8 blockwise (TE Float8BlockScaling): every tile's scale and every element
against a float64 NumPy reference written from TE's rule, at every edge."""
from __future__ import annotations

import importlib.metadata

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cast_reference import round_reference
from jaxfp8._src.numerics import formats
from jaxfp8._src.mx import blockwise
from jaxfp8._src.mx import f32

F32_MAX = float(np.finfo(np.float32).max)
TINY = 2.0**-126


# -- float64 reference ---------------------------------------------------------

def _f32(v):
  """float64 -> float32, one correct rounding (overflow to Inf)."""
  with np.errstate(over="ignore"):
    return np.float32(v)


def reference(x, block, fmt, scale):
  """(element values as float64, decode scales as float32) per TE's rule."""
  fmt = formats.get(fmt)
  x = np.asarray(x, np.float32)
  bm, bk = block
  m, k = x.shape[-2:]
  grid = (*x.shape[:-2], -(-m // bm), -(-k // bk))
  values = np.zeros(x.shape, np.float64)
  scales = np.zeros(grid, np.float32)
  for idx in np.ndindex(*grid):
    *lead, i, j = idx
    sl = (*lead, slice(i * bm, (i + 1) * bm), slice(j * bk, (j + 1) * bk))
    tile = x[sl].astype(np.float64)
    if not np.isfinite(tile).all():
      scales[idx] = np.nan
      values[sl] = np.nan
      continue
    amax = np.abs(tile).max()
    if amax == 0:
      enc = 1.0
    else:
      enc = float(_f32(fmt.max / amax))
      if np.isinf(enc):
        enc = F32_MAX
      if scale == "pow2":
        enc = 2.0**np.floor(np.log2(enc))
    scales[idx] = _f32(1.0 / enc)
    y = _f32(tile * enc)  # the float32 product, one rounding
    values[sl] = round_reference(y, fmt)
  return values, scales


def assert_same(codes, scales, want_values, want_scales):
  got = np.asarray(codes).astype(np.float64)
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want_values))
  np.testing.assert_array_equal(got, want_values)  # NaN == NaN here
  np.testing.assert_array_equal(np.signbit(got), np.signbit(want_values))
  s = np.asarray(scales)
  np.testing.assert_array_equal(s.view(np.uint32)[~np.isnan(s)],
                                want_scales.view(np.uint32)[~np.isnan(s)])
  np.testing.assert_array_equal(np.isnan(s), np.isnan(want_scales))


# One row per tile of 8 (block (1, 8)): every edge the rule has.
_SPECIAL_ROWS = [
    [0.0] * 8,                                           # all zeros
    [-0.0, 0.0, -0.0, 0.0, 0.0, 0.0, 0.0, -0.0],         # signed zeros
    [1e-45, -3e-42, 1e-40, 5e-39, -1e-39, 0.0, 2e-44, 7e-41],  # subnormals
    [1e-38, -1.1e-38, 3e-39, 1.2e-38, 0.0, -5e-40, 1e-45, 9e-39],
    [1e-37, -3e-37, 2.5e-37, 1e-40, 0.0, 7e-38, -1e-38, 3e-39],
    [2e-36, -1.5e-36, 1e-36, 3e-37, 1e-40, 0.0, -2e-36, 4e-38],  # tiny decode
    [1.31e-36, 1.32e-36, -5e-37, 1e-39, 0.0, 1e-45, 6e-37, 1e-36],
    [1.0, -2.0, 0.1, np.nan, 3.0, 0.0, -1.0, 5.0],       # NaN inside
    [1.0, -2.0, np.inf, 0.5, 3.0, 0.0, -1.0, 5.0],       # Inf inside
    [-np.inf, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
    [F32_MAX, -F32_MAX, 1.0, 0.0, 3e38, -1e38, 2.0, 1e30],  # +-float32 max
    [448.0, -448.0, 464.0, 480.0, 1.0, -0.001, 240.0, 0.0],  # +-max, above max
    [57344.0, 61440.0, -57344.0, 1.0, 2.0, 3.0, 0.5, 0.0],
    [449.0, 447.9, 1e-3, -1e-5, 2.0**-9, 2.0**-10, 2.0**-7, 3.3],
    [3.0, 2.9999998, -1.0000001, 0.7, 1e-7, 1e-20, 1e-38, 1e-45],
    [5.0e-9, -1.3e-9, 7.7e-10, 1e-12, 4.2e-9, 0.0, 1e-20, -5e-9],
    # amax * fl(448 / amax) rounds above 448 (and above 57344 for e5m2).
    [1.6369617, -1.6504593, 1.3102418, 0.5, 0.0, -1e-30, 1.0, 0.25],
]


def _special():
  return np.array(_SPECIAL_ROWS, np.float32)


# -- tests ---------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("scale", ["pow2", "float32"])
def test_every_edge_tile_matches_the_reference(fmt, scale):
  x = _special()
  codes, scales = blockwise.quantize(x, block=(1, 8), fmt=fmt, scale=scale)
  assert codes.dtype == formats.get(fmt).dtype and codes.shape == x.shape
  assert scales.dtype == jnp.float32 and scales.shape == (len(x), 1)
  assert_same(codes, scales, *reference(x, (1, 8), fmt, scale))


def test_the_edges_are_there():
  """The special tiles reach the cases they are named for."""
  _, scales = blockwise.quantize(_special(), block=(1, 8), scale="float32")
  s = np.asarray(scales)[:, 0]
  assert s[0] == 1.0 and s[1] == 1.0                        # zeros: scale 1
  assert 0 < s[2] < TINY and 0 < s[5] < TINY                # subnormal decode
  assert s[2] == np.float32(1 / F32_MAX)                    # encode FLT_MAX
  assert np.isnan(s[7:10]).all()                            # NaN, Inf tiles
  _, pow2 = blockwise.quantize(_special(), block=(1, 8))
  assert np.asarray(pow2)[2, 0] == np.float32(2.0**-127)    # encode 2^127
  amax = np.float32(1.6504593)                              # just above max
  assert _f32(float(amax) * float(_f32(448 / float(amax)))) > 448
  codes, _ = blockwise.quantize(_special(), block=(1, 8), scale="float32")
  assert np.asarray(codes).astype(np.float64)[16, 1] == -448  # saturated
  # With float32 scales every other finite tile's amax element lands on max.
  c = np.abs(np.asarray(codes).astype(np.float64))
  assert (c[[5, 6, 10, 11, 12, 13, 14, 15]].max(axis=1) == 448).all()


@pytest.mark.parametrize("block", [(1, 128), (128, 128)], ids=str)
@pytest.mark.parametrize("scale", ["pow2", "float32"])
def test_ragged_random_tensors(block, scale):
  """Batched, ragged in M and K, magnitudes varying per row and column."""
  rng = np.random.default_rng(0)
  shape = (2, 130, 300) if block[0] > 1 else (2, 5, 300)
  mags = 2.0 ** rng.integers(-30, 30, size=shape[:-1] + (1,))
  x = (rng.standard_normal(shape) * mags
       * 2.0 ** rng.integers(-3, 3, size=shape[-1])).astype(np.float32)
  codes, scales = blockwise.quantize(x, block=block, scale=scale)
  assert scales.shape == blockwise.block_grid(shape, block)
  assert_same(codes, scales, *reference(x, block, "float8_e4m3fn", scale))
  # Dequantize: each product rounded once.
  want = _f32(np.asarray(codes).astype(np.float64) * np.repeat(
      np.repeat(np.asarray(scales, np.float64), block[0], -2), block[1],
      -1)[..., :shape[-2], :shape[-1]])
  np.testing.assert_array_equal(
      np.asarray(blockwise.dequantize(codes, scales, block=block)), want)


def test_a_partial_tile_takes_the_amax_of_its_own_elements():
  x = np.ones((3, 130), np.float32) * 100.0
  x[:, 128:] = [0.3, -0.01]
  _, scales = blockwise.quantize(x, block=(1, 128), scale="float32")
  _, alone = blockwise.quantize(x[:, 128:], block=(1, 128), scale="float32")
  np.testing.assert_array_equal(np.asarray(scales)[:, 1],
                                np.asarray(alone)[:, 0])
  assert np.asarray(scales)[0, 1] == 1 / np.float32(448 / np.float32(0.3))


def test_square_blocks_are_shared_by_the_transpose():
  """A weight's (N, N) blocks serve both GEMMs that use it."""
  x = np.random.default_rng(1).standard_normal((40, 24)).astype(np.float32)
  c, s = blockwise.quantize(x, block=(16, 16))
  ct, st = blockwise.quantize(x.T, block=(16, 16))
  np.testing.assert_array_equal(np.asarray(c).T.view(np.uint8),
                                np.asarray(ct).view(np.uint8))
  np.testing.assert_array_equal(np.asarray(s).T, np.asarray(st))


def test_dequantize_keeps_subnormal_products():
  """Decode scales below 2^-126 (tiles of values near 1e-36): the products
  are rounded once, not flushed."""
  x = _special()
  codes, scales = blockwise.quantize(x, block=(1, 8), scale="float32")
  got = np.asarray(blockwise.dequantize(codes, scales, block=(1, 8)))
  want = _f32(np.asarray(codes).astype(np.float64) * np.asarray(
      scales, np.float64))
  np.testing.assert_array_equal(got.view(np.uint32)[~np.isnan(got)],
                                want.view(np.uint32)[~np.isnan(got)])
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want) | np.isnan(
      np.asarray(codes).astype(np.float64)))
  assert (0 < np.abs(got[2:7])).any() and (np.abs(got[2:7]) < TINY).any()


def test_jit_gives_the_same_bits():
  x = _special()[:6]
  f = jax.jit(lambda x: blockwise.quantize(x, block=(2, 8), scale="float32"))
  c1, s1 = f(x)
  c2, s2 = blockwise.quantize(x, block=(2, 8), scale="float32")
  np.testing.assert_array_equal(np.asarray(c1).view(np.uint8),
                                np.asarray(c2).view(np.uint8))
  np.testing.assert_array_equal(np.asarray(s1), np.asarray(s2))


@pytest.mark.parametrize("shape, block", [
    ((256, 512), (1, 128)), ((512, 96), (128, 1)), ((300, 260), (128, 128)),
    ((64, 96), (16, 16)), ((3, 70, 90), (7, 40)), ((40, 48), (1, 48)),
    ((50, 70), (5, 7)), ((48, 16), (1, 16)), ((40, 64), (2, 32))], ids=str)
def test_tile_maxima_are_numpys_whatever_the_reduction_order(shape, block):
  # Long rows and tall tiles are halved before the reduce (odd counts too):
  # the same maxima of magnitude bits, NaN above Inf above the rest.
  rng = np.random.default_rng(sum(shape) + sum(block))
  x = (rng.standard_normal(shape) * np.exp2(rng.integers(-150, 120, shape))
       ).astype(np.float32)
  x.flat[rng.choice(x.size, 6, replace=False)] = [
      np.nan, np.inf, -np.inf, -0.0, 1e-45, -F32_MAX]
  t = blockwise.tiles(x, block)
  want = (np.asarray(t).view(np.uint32) & 0x7FFFFFFF).max(axis=(-3, -1))
  got = jax.jit(blockwise.tile_amax)(t)
  np.testing.assert_array_equal(got, want)


def test_exact_float32_helpers():
  """f32.mul / reciprocal against float64, across the subnormal boundary."""
  rng = np.random.default_rng(2)
  a = (rng.uniform(1, 2, 4000) * 2.0 ** rng.integers(-149, 0, 4000))
  b = (rng.uniform(1, 2, 4000) * 2.0 ** rng.integers(-60, 60, 4000))
  a, b = _f32(a) * rng.choice([-1, 1], 4000).astype(np.float32), _f32(b)
  a[:8] = [np.inf, -np.inf, np.nan, 0.0, -0.0, np.inf, 1e-45, F32_MAX]
  b[:8] = [1e-45, 2.0, 1.0, np.inf, 3.0, 0.0, -0.0, 2.0]
  # Ties among the subnormals (to even), with both shifts of the product.
  a[8:13] = _f32(np.array([3, 5, 7, 2**23 + 1, 2**23 + 3]) * 2.0**-149)
  b[8:13] = 0.5
  got = np.asarray(f32.mul(a, b))
  with np.errstate(invalid="ignore"):
    want = _f32(a.astype(np.float64) * b.astype(np.float64))
  assert list(got[8:13].view(np.uint32)) == [2, 2, 4, 2**22, 2**22 + 2]
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  got, want = got[~np.isnan(want)], want[~np.isnan(want)]
  np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
  r = _f32(rng.uniform(1, 2, 4000) * 2.0 ** rng.integers(-149, 128, 4000))
  r[:6] = [2.0**126, np.nextafter(np.float32(2.0**126), np.float32(np.inf)),
           np.float32(F32_MAX), 1e-45, np.inf, 0.0]
  got = np.asarray(f32.reciprocal(r))
  with np.errstate(divide="ignore"):
    want = _f32(1.0 / r.astype(np.float64))
  np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("opt", [None, 2])
def test_reciprocals_below_float32s_normal_range_are_ieees(opt):
  """f32.reciprocal of floats in (2^126, 2^128), whose reciprocals are
  subnormal (a float32 quotient corrected by an exact 48-bit product),
  2^20 of them and the ends, against float64's rounded once; also as
  users' programs compile (LLVM -O2). All 2^24 - 1 of them agreed on
  JAX 0.10.2 and 0.12.0.1 when it was written."""
  rng = np.random.default_rng(6)
  mag = rng.integers(0x7E800001, 0x7F800000, 1 << 20, dtype=np.uint32)
  mag[:6] = [0x7E800001, 0x7E800002, 0x7EFFFFFF, 0x7F000000, 0x7F000001,
             0x7F7FFFFF]
  x = mag.view(np.float32)
  opts = {} if opt is None else {"xla_backend_optimization_level": opt}
  got = np.asarray(jax.jit(f32.reciprocal).lower(x).compile(opts)(x))
  want = _f32(1.0 / x.astype(np.float64))
  np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("fn", ["reciprocal", "reciprocal_to_normal"])
@pytest.mark.parametrize("opt", [None, 2])
def test_reciprocals_up_to_2_126_are_ieees(fn, opt):
  """f32.reciprocal and reciprocal_to_normal of every subnormal float32 (and
  +0), whose reciprocals are normal or overflow (the quotient 2^100 / n of
  the bits n, scaled by 2^49), and of 2^20 normal ones up to 2^126 (XLA's
  division), against float64's rounded once; also at LLVM -O2. Both agreed
  on all of [0, 2^126] on JAX 0.10.2 and 0.12.0.1 when written."""
  rng = np.random.default_rng(7)
  normal = rng.integers(0x800000, 0x7E800001, 1 << 20, dtype=np.uint32)
  normal[:2] = [0x800000, 0x7E800000]
  x = np.concatenate([np.arange(0, 0x800000, dtype=np.uint32),
                      normal]).view(np.float32)
  opts = {} if opt is None else {"xla_backend_optimization_level": opt}
  got = np.asarray(jax.jit(getattr(f32, fn)).lower(x).compile(opts)(x))
  with np.errstate(divide="ignore", over="ignore"):
    want = _f32(1.0 / x.astype(np.float64))
  assert np.isinf(want).sum() > 0x200000 and np.isfinite(want).sum() > 0x400000
  np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("how", ["eager", "jit", "jit_llvm_o2"])
def test_mul_narrow_is_the_ieee_product(how):
  """f32.mul_narrow of short significands (zero or normal, at most 8 bits:
  NVFP4's values times block scales) by any float32, against float64's
  exact product rounded once: results normal, subnormal (ties to even on
  that grid), zero and overflowing; b subnormal; signed zeros, NaN, Inf.
  Jitted, it is one fusion, also compiled as users' programs are (LLVM at
  -O2, not the suite's -O0): there a test of the whole magnitude's bits
  for zero became a float comparison, which saw a subnormal b as zero."""
  rng = np.random.default_rng(5)
  n = 20000
  sig = rng.integers(128, 256, n).astype(np.uint32)
  ea = rng.integers(1, 255, n).astype(np.uint32)
  a = ((ea << 23) | ((sig - 128) << 16)).view(np.float32)
  a = a * rng.choice([-1, 1], n).astype(np.float32)
  b = rng.integers(0, 0x7F800000, n).astype(np.uint32)
  # Products near float32's subnormal range (from both sides), near its
  # largest values, and anywhere: b's exponent from the product's.
  top = np.choose(rng.choice(3, n, p=[0.6, 0.1, 0.3]),
                  [rng.integers(-155, -110, n), rng.integers(120, 135, n),
                   rng.integers(-260, 260, n)])
  eb = np.clip(top + 254 - ea.astype(np.int64), 0, 254).astype(np.uint32)
  b = ((b & 0x807FFFFF) | (eb << 23)).view(np.float32)
  big = 255 * 2.0**120  # the largest 8-bit significand
  a[:10] = [0.0, -0.0, 3.0, np.inf, np.nan, 0.5, 0.5, 1.5, big, -big]
  b[:10] = [-1e-45, 2.0, np.inf, 0.0, 1.0, 3 * 2.0**-149, 5 * 2.0**-149,
            -1e-45, 2.0, 1e-45]
  if how == "eager":
    got = f32.mul_narrow(a, b)
  else:
    opts = {"xla_backend_optimization_level": 2} if how != "jit" else {}
    got = jax.jit(f32.mul_narrow).lower(a, b).compile(opts)(a, b)
  got = np.asarray(got)
  with np.errstate(invalid="ignore", over="ignore"):
    want = _f32(a.astype(np.float64) * b.astype(np.float64))
  assert list(got[5:8].view(np.uint32)) == [2, 2, 0x80000002]  # to even
  tiny = (np.abs(want) < 2.0**-126) & (want != 0)
  assert tiny.sum() > n // 10 and np.isinf(want).sum() > 100
  assert ((np.abs(b) < 2.0**-126) & (b != 0)).sum() > 100
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  keep = ~np.isnan(want)
  np.testing.assert_array_equal(got[keep].view(np.uint32),
                                want[keep].view(np.uint32))


def test_divide_by_a_broadcast_divisor_is_the_ieee_quotient():
  """f32.divide of tiles by one divisor per row, jitted and eager: the
  correctly rounded quotient (float64's, rounded once), where XLA's own
  division by a broadcast divisor is a product by its reciprocal."""
  rng = np.random.default_rng(3)
  x = _f32(rng.uniform(1, 2, (64, 16)) * 2.0 ** rng.integers(-20, 20, (64, 16)))
  # e4m3 block-scale values (4 significant bits), the divisors NVFP4 uses.
  y = _f32(rng.integers(8, 16, (64, 1)) * 2.0 ** rng.integers(-12, 6, (64, 1)))
  x[0, :2], y[0] = 2.8125, 1.875  # x * (1 / y) lands just above 1.5
  x[1, :7] = [np.inf, -np.inf, np.nan, 0.0, -0.0, -3.0, 3.0]
  y[2], y[3] = -0.0, 0.0
  naive = np.asarray(jax.jit(lambda x, y: x / y)(x, y))
  with np.errstate(divide="ignore", invalid="ignore"):
    want = _f32(x.astype(np.float64) / y.astype(np.float64))
  # Up to jaxlib 0.12.0 XLA divides by the broadcast divisor as a product by
  # its reciprocal, which these inputs show; jaxlib 0.12.1 gives the IEEE
  # quotients here.
  jaxlib = tuple(int(p) for p in importlib.metadata.version(
      "jaxlib").split(".")[:3])
  assert (np.array_equal(naive.view(np.uint32), want.view(np.uint32))
          == (jaxlib >= (0, 12, 1))), jaxlib
  for got in (jax.jit(f32.divide)(x, y), f32.divide(x, y)):
    got = np.asarray(got)
    assert got.shape == x.shape and got[0, 0] == 1.5
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    keep = ~np.isnan(want)
    np.testing.assert_array_equal(got[keep].view(np.uint32),
                                  want[keep].view(np.uint32))


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(block=(1, 0)), ValueError, "block"),
    (dict(block=128), TypeError, "block"),
    (dict(block=(1, 8), fmt="float4_e2m1fn"), ValueError, "fmt"),
    (dict(block=(1, 8), fmt="nope"), ValueError, "fmt"),
    (dict(block=(1, 8), scale="e8m0"), ValueError, "scale"),
])
def test_bad_arguments_raise(kwargs, error, match):
  with pytest.raises(error, match=match):
    blockwise.quantize(np.ones((2, 8), np.float32), **kwargs)


def test_bad_shapes_raise():
  with pytest.raises(ValueError, match="two axes"):
    blockwise.quantize(np.ones(8, np.float32), block=(1, 8))
  codes, scales = blockwise.quantize(np.ones((2, 8), np.float32), block=(1, 4))
  with pytest.raises(ValueError, match=r"scales.*\(2, 2\)"):
    blockwise.dequantize(codes, scales[:, :1], block=(1, 4))
  with pytest.raises(TypeError, match="`x` argument to `quantize`"):
    blockwise.quantize("abc", block=(1, 8))


def test_quantize_has_no_gradient():
  f = lambda x: blockwise.quantize(x, block=(1, 8))[1].sum()
  with pytest.raises(TypeError, match="no gradient"):
    jax.grad(f)(jnp.ones((2, 8)))
