"""jaxfp8.mx: bit-exact against a float64 NumPy reference, at every edge."""
from __future__ import annotations

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import jax
import numpy as np
import pytest

from jaxfp8 import mx
from jaxfp8._src.mx import scales
from mx_testing import assert_same_bits

MX_FORMATS = list(mx.MX_FORMATS)
SCALE_MODES = list(mx.SCALE_MODES)
POW2_FORMATS = [f for f in MX_FORMATS if f != "nvfp4"]


# -- float64 reference ---------------------------------------------------------

def _element_grid(fmt: mx.MXFormat):
  """Non-negative element values (ascending, float64); is each code even."""
  if fmt.name == "mxint8":
    k = np.arange(128)
    return k / 64.0, k % 2 == 0
  f = fmt.element
  keep = f.values >= 0
  return f.values[keep], f.codes[keep] % 2 == 0


def _round_nearest(a, grid, even):
  """Index of the grid value nearest a >= 0, ties to even codes, saturating."""
  idx = np.clip(np.searchsorted(grid, a, side="right") - 1, 0, len(grid) - 1)
  nxt = np.minimum(idx + 1, len(grid) - 1)
  mid = (grid[idx] + grid[nxt]) / 2  # exact: grid values have few bits
  up = (a > mid) | ((a == mid) & ~even[idx])
  return np.where(idx == len(grid) - 1, idx, idx + up)


def _floor_log2(a):
  return np.frexp(a)[1] - 1  # exact for every float32, subnormals included


def _ref_exponent(amax, fmt: mx.MXFormat, mode: str):
  emax = _floor_log2(np.float64(fmt.max))
  p = _floor_log2(amax)
  if mode == "floor":
    k = p - emax
  elif mode == "ceil":
    k = p + (amax != 2.0**p) - emax
  elif mode == "rceil":
    k0 = p - emax
    k = k0 + (amax > fmt.max * 2.0**k0)
  else:
    mb = fmt.mantissa_bits
    rounded = np.floor(amax / 2.0**p * 2**mb + 0.5) / 2**mb
    k = p + (rounded >= 2) - emax
  return int(np.clip(k, -127, 127))


def _signed_zero(x, fmt):
  neg = np.signbit(x) & (fmt.name != "mxint8")
  return np.where(neg, -0.0, 0.0)


def _to_float32(values):
  """float64 -> float32, nearest even; beyond float32's range gives Inf (an
  element rounded up next to 2^128 can exceed it: the format holds it)."""
  with np.errstate(over="ignore"):
    return np.array(values).astype(np.float32)


def reference_mx(x: np.ndarray, fmt: mx.MXFormat, mode: str):
  """(scale codes, float32 values) of float32 blocks x of shape (n, bs)."""
  grid, even = _element_grid(fmt)
  codes, out = [], []
  for block in x.astype(np.float64):
    a = np.abs(block)
    if not np.isfinite(block).all():
      codes.append(255)
      out.append(np.full(block.shape, np.nan))
      continue
    amax = a.max()
    k = -127 if amax == 0 else _ref_exponent(amax, fmt, mode)
    g = grid[_round_nearest(a / 2.0**k, grid, even)]  # a / 2^k is exact
    val = np.where(g == 0, _signed_zero(block, fmt),
                   np.copysign(g, block) * 2.0**k)
    codes.append(k + 127)
    out.append(val)
  return np.array(codes, np.uint8), _to_float32(out)


_NV_DIRECTION = {"floor": "down", "ceil": "up", "rceil": "up",
                 "even": "nearest"}


def reference_nvfp4(x: np.ndarray, fmt: mx.MXFormat, mode: str):
  """(scale codes, tensor scale, float32 values) of float32 blocks (n, 16)."""
  grid, even = _element_grid(fmt)
  e4m3 = fmt.scale
  keep = e4m3.values >= 0
  sgrid, scodes = e4m3.values[keep], e4m3.codes[keep]
  x64 = x.astype(np.float64)
  finite_blocks = np.isfinite(x64).all(axis=1)
  tamax = np.abs(x64[finite_blocks]).max(initial=0.0)
  j = 0
  if tamax > 0:
    j0 = _floor_log2(tamax) - 11
    j = int(np.clip(j0 + (tamax > 6 * 448 * 2.0**j0), -126, 127))
  codes, out = [], []
  for block in x64:
    if not np.isfinite(block).all():
      codes.append(e4m3.nan_code)
      out.append(np.full(block.shape, np.nan))
      continue
    a = np.abs(block) / 2.0**j
    bamax = a.max()
    direction = _NV_DIRECTION[mode]
    if direction == "down":
      i = np.searchsorted(6 * sgrid, bamax, side="right") - 1
    elif direction == "up":
      i = np.searchsorted(6 * sgrid, bamax, side="left")
    else:
      i = _round_nearest(bamax, 6 * sgrid, scodes % 2 == 0)
    s = sgrid[i]
    g = (np.zeros_like(a) if s == 0
         else grid[_round_nearest(a, s * grid, even)])
    val = np.where(g == 0, _signed_zero(block, fmt),
                   np.copysign(g, block) * s * 2.0**j)
    codes.append(scodes[i])
    out.append(val)
  return np.array(codes, np.uint8), np.float32(2.0**j), _to_float32(out)


def check_against_reference(x, fmt_name, mode, a=None):
  fmt = mx.get_format(fmt_name)
  a = mx.quantize(x, fmt_name, scale_mode=mode) if a is None else a
  got = np.asarray(a.dequantize())
  xb = x.reshape(-1, a.block_size)
  if fmt.power_of_two_scales:
    codes, want = reference_mx(xb, fmt, mode)
  else:
    codes, ts, want = reference_nvfp4(xb, fmt, mode)
    assert np.float32(a.tensor_scale) == ts
  np.testing.assert_array_equal(np.asarray(a.scales).reshape(-1), codes)
  assert_same_bits(got, want.reshape(x.shape))


# -- inputs: blocks with wide exponent ranges and every corner -----------------

_KINDS = ("random", "wide", "zeros", "tiny_normal", "subnormal", "pow2",
          "elem_max", "special", "huge", "one_nan")


@st.composite
def blocks(draw, fmt_name: str, n_blocks: int = 4):
  """float32 array (n_blocks, block) mixing ordinary and corner blocks."""
  fmt = mx.get_format(fmt_name)
  bs = fmt.block_size
  rows = []
  for _ in range(n_blocks):
    kind = draw(st.sampled_from(_KINDS))
    c = draw(st.integers(0, 254))
    ints = st.lists(st.integers(0, 2**23 - 1), min_size=bs, max_size=bs)
    mant = np.array(draw(ints), np.uint32)
    sign = np.array(draw(st.lists(st.booleans(), min_size=bs, max_size=bs)),
                    np.uint32) << 31
    offs = np.array(draw(st.lists(st.integers(-24, 0), min_size=bs,
                                  max_size=bs)), np.int64)
    if kind == "wide":
      offs = offs * 6
    expo = np.clip(c + offs, 0, 254)
    if kind == "tiny_normal":
      expo = np.clip(offs + 25, 1, 12)
    elif kind == "subnormal":
      expo = np.zeros(bs, np.int64)
    elif kind == "huge":
      expo = np.clip(254 + offs // 8, 250, 254)
    if kind == "pow2":
      mant[:] = 0
    bits = sign | (expo.astype(np.uint32) << 23) | mant
    row = bits.view(np.float32).copy()
    if kind == "zeros":
      row = np.where(sign != 0, np.float32(-0.0), np.float32(0.0))
    elif kind == "elem_max":
      t = c - 127 - fmt.emax
      factors = np.array([1.0, 1 + 2.0**-20, 1.03125, 1.0625, 1.5, 1.9, 0.999])
      pick = draw(st.lists(st.integers(0, len(factors) - 1), min_size=bs,
                           max_size=bs))
      with np.errstate(over="ignore"):  # beyond float32: Inf, also a corner
        row = (fmt.max * factors[pick] * 2.0**t).astype(np.float32)
      row = np.where(sign != 0, -row, row)
    elif kind in ("special", "one_nan"):
      specials = [np.nan, np.inf, -np.inf] if kind == "special" else [np.nan]
      where = draw(st.integers(0, bs - 1))
      row[where] = specials[draw(st.integers(0, len(specials) - 1))]
    rows.append(row.astype(np.float32))
  return np.stack(rows)


_SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)


@pytest.mark.parametrize("mode", SCALE_MODES)
@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_bit_exact_against_float64_reference(fmt, mode):
  @_SETTINGS
  @given(blocks(fmt))
  def check(x):
    check_against_reference(x, fmt, mode)
  check()


# -- the spec's corners, spelled out -------------------------------------------

def test_floor_960_decodes_to_896():
  x = np.zeros(32, np.float32)
  x[0] = 960.0
  a = mx.quantize(x, "mxfp8_e4m3")
  # Read results through NumPy: eager indexing of a jax.Array compiles.
  assert int(np.asarray(a.scales)[0]) == 127 + 1
  assert float(np.asarray(a.dequantize())[0]) == 896.0
  for mode in ("rceil", "ceil"):
    assert float(np.asarray(mx.quantize(x, "mxfp8_e4m3", scale_mode=mode)
                            .dequantize())[0]) == 960.0


@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_zero_and_nan_blocks(fmt):
  bs = mx.get_format(fmt).block_size
  x = np.ones((4, bs), np.float32)
  x[0] = 0.0
  x[1, 5], x[2, 0], x[3, -1] = np.nan, np.inf, -np.inf
  a = mx.quantize(x, fmt)
  got = np.asarray(a.dequantize())
  assert (got[0] == 0).all()
  assert np.isnan(got[1:]).all()
  s = np.asarray(a.scales)[:, 0]
  if fmt == "nvfp4":
    assert s[0] == 0 and (s[1:] == 0x7F).all()
  else:
    assert s[0] == 0 and (s[1:] == 0xFF).all()


@pytest.mark.parametrize("fmt", POW2_FORMATS)
def test_tiny_blocks_clamp_at_2_to_minus_127_and_decode_exactly(fmt):
  tiny_normal = np.float32(2.0**-126 * 1.5)
  x = np.full((3, 32), tiny_normal, np.float32)
  x[1] = np.float32(2.0**-135)   # subnormal: scale clamps at 2^-127
  x[2] = np.float32(3 * 2.0**-149)
  a = mx.quantize(x, fmt)
  if fmt != "mxint8":  # 1.5 * 2^-126 needs emax <= 1 below the clamp
    assert float(np.asarray(a.dequantize())[0, 0]) == float(tiny_normal)
  assert int(np.asarray(a.scales)[1, 0]) == 0
  check_against_reference(x, fmt, "floor", a)


@pytest.mark.parametrize("mode", SCALE_MODES)
@pytest.mark.parametrize("log2_scale", [-135, -118, -100, -60, 0, 60, 110])
@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_whole_tensors_across_the_float32_range(fmt, log2_scale, mode):
  """Tensors near float32's ends take the exact branch, others the fast one."""
  bs = mx.get_format(fmt).block_size
  # A NumPy draw (an eager jax.random draw compiles per shape).
  rng = np.random.default_rng(log2_scale + 200)
  x = rng.standard_normal((4, bs)).astype(np.float32).astype(
      np.float64) * 2.0**log2_scale
  x[1, :4] = [2.0**-149, -3 * 2.0**-149, 2.0**-127, 0.0]
  x[2] *= 2.0**-20
  x = x.astype(np.float32)
  check_against_reference(x, fmt, mode)


def _corner_magnitudes(fmt: mx.MXFormat):
  """Grid values, the midpoints between them (rounding ties) and their
  float32 neighbours, above max and below half the smallest subnormal."""
  grid, _ = _element_grid(fmt)
  mids = (grid[:-1] + grid[1:]) / 2
  vals = np.concatenate([grid, mids, [fmt.max * 1.0625, fmt.max * 1.96875,
                                      grid[1] / 4, grid[1] / 2**20]])
  v32 = vals.astype(np.float32)
  return np.concatenate([v32, np.nextafter(v32, np.float32(0)),
                         np.nextafter(v32, np.float32(np.inf))])


@pytest.mark.parametrize("mode", SCALE_MODES)
@pytest.mark.parametrize("fmt", POW2_FORMATS)
def test_corners_at_the_fast_path_boundary(fmt, mode):
  """Ties, saturation, values below the element grid and float32 subnormals,
  in blocks with k at the smallest exponent the fast path takes, one below
  (the exact path) and ordinary ones; plus zero and NaN blocks alongside."""
  f = mx.get_format(fmt)
  elem = f.element
  k_min = -125 + elem.mantissa_bits - elem.min_exponent
  mags = _corner_magnitudes(f)
  for k in (k_min, k_min - 1, k_min + 3, -5, 40):
    per = f.block_size - 1
    n = -(-mags.size // per)
    body = np.resize(mags, n * per).reshape(n, per).astype(np.float64)
    body *= np.where(np.arange(per) % 2, -1.0, 1.0) * 2.0**k
    lead = np.full((n, 1), f.max * 2.0**k)  # amax: the block's scale is 2^k
    x = np.concatenate([lead, body], axis=1)
    with np.errstate(over="ignore"):
      x = x.astype(np.float32)
    x = x[np.isfinite(x).all(axis=1)]
    # float32 subnormals (the largest too) in a block of scale 2^k
    sub = np.array([3, 2**22, 2**22 + 1, 3 * 2**21, 2**23 - 1], np.uint32)
    tiny = np.resize(sub.view(np.float32), (1, f.block_size))
    tiny[0, 1::2] *= -1
    tiny[0, 0] = x[0, 0]
    extra = np.zeros((3, f.block_size), np.float32)
    extra[0, 1::2] = -0.0
    extra[1], extra[1, 7] = x[0], np.nan
    extra[2], extra[2, 0] = x[0], -np.inf
    check_against_reference(np.concatenate([x, tiny, extra]), fmt, mode)


@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_dequantize_every_code_at_every_scale(fmt):
  """Storage that quantize never writes: every element code (fp8 NaN and Inf
  too) under scales that put products among float32's subnormals and beyond
  its range."""
  f = mx.get_format(fmt)
  bs = f.block_size
  if fmt == "mxint8":
    codes = np.arange(-128, 128).astype(np.int8).view(np.uint8)
    values = np.arange(-128, 128) / 64.0
  elif f.bits == 8:  # NaN and Inf codes too
    codes = np.arange(256).astype(np.uint8)
    values = codes.view(f.element.dtype).astype(np.float64)
  else:
    codes, values = f.element.codes.astype(np.uint8), f.element.values
  reps = -(-codes.size // bs) * bs
  codes, values = np.resize(codes, reps), np.resize(values, reps)
  if fmt == "nvfp4":
    scale_codes = np.arange(256).astype(np.uint8)  # both NaN codes too
    scale_values = scale_codes.view(f.scale.dtype).astype(np.float64)
    tensor_scales = [2.0**-126, 2.0**-3, 2.0**100, 2.0**127]
  else:
    scale_codes = np.array([0, 1, 5, 22, 100, 127, 200, 250, 254, 255],
                           np.uint8)
    scale_values = np.where(scale_codes == 255, np.nan,
                            2.0**(scale_codes.astype(np.float64) - 127))
    tensor_scales = [None]
  n_blocks = reps // bs
  data_codes = np.tile(codes.reshape(n_blocks, bs), (scale_codes.size, 1))
  want = np.repeat(scale_values, n_blocks)[:, None] * np.tile(
      values.reshape(n_blocks, bs), (scale_codes.size, 1))
  scales = np.repeat(scale_codes, n_blocks)[:, None]
  # Storage is built in NumPy or by one jitted pack, and copied in with
  # device_put: eager ops and jnp.asarray compile a program each, and how
  # the storage is built isn't under test here.
  if f.bits == 8 and fmt != "mxint8":
    data = jax.device_put(data_codes.view(f.element.dtype))
  elif f.bits == 8:
    data = jax.device_put(data_codes.view(np.int8))
  else:
    from jaxfp8._src.mx import pack as mx_pack  # pylint: disable=g-import-not-at-top
    data = jax.jit(mx_pack.pack, static_argnums=1)(data_codes, f.bits)
  for ts in tensor_scales:
    t = None if ts is None else jax.device_put(np.float32(ts))
    a = mx.MXArray(data, jax.device_put(scales), fmt, axis=-1, length=bs,
                   block_size=bs, tensor_scale=t)
    expect = want if ts is None else want * ts
    assert_same_bits(jax.jit(mx.dequantize)(a), _to_float32(expect))


def test_nvfp4_scale_limits_come_from_the_registry():
  """The tensor scale covers e2m1 max * e4m3 max = 2688; the fast path
  starts at the tensor exponent the corner test below puts it at."""
  f = mx.get_format("nvfp4")
  assert f.max * f.scale.max == 6 * 448 == 2688
  assert scales.nv_fast_min_exponent(f) == -115


@pytest.mark.parametrize("mode", SCALE_MODES)
def test_nvfp4_corners_at_the_fast_path_boundary(mode):
  """As above for nvfp4, whose fast path depends on the tensor scale 2^j:
  j = -115 takes it, -116 doesn't; float32 subnormals sit in both."""
  f = mx.get_format("nvfp4")
  mags = _corner_magnitudes(f).astype(np.float64)
  sub = np.array([3, 2**22, 2**22 + 1, 3 * 2**21, 2**23 - 1], np.uint32)
  for j in (-116, -115, -112, -9, 100):
    rows = [np.resize(mags, 15) * 2.0**(j + e) for e in (0, 2, 5, 7, -7)]
    rows = [np.concatenate([[2.0**(11 + j)], r]) for r in rows]
    x = np.stack(rows) * np.where(np.arange(16) % 3, 1.0, -1.0)
    tiny = np.resize(sub.view(np.float32), (1, 16)).astype(np.float64)
    tiny[0, 0] = 2.0**(11 + j)
    alone = np.resize(sub.view(np.float32), (1, 16))[:, ::-1]  # own scale
    x = np.concatenate([x, tiny, alone, np.zeros((1, 16))]).astype(np.float32)
    x[-1, 3] = np.nan
    assert float(mx.quantize(x, "nvfp4").tensor_scale) == 2.0**j
    check_against_reference(x, "nvfp4", mode)
