"""jaxfp8.mx: storage, packing, padding, axes, pytrees, stochastic rounding,
matmul and the scaled_dot converters."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxfp8
from jaxfp8 import mx
from jaxfp8._src import compat

MX_FORMATS = list(mx.MX_FORMATS)
NATIVE_FORMATS = [f for f in MX_FORMATS if not f.startswith("mxfp6")]


def assert_same_bits(got, want):
  got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
  assert got.shape == want.shape
  np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
  ok = ~np.isnan(want)
  np.testing.assert_array_equal(got.view(np.uint32)[ok],
                                want.view(np.uint32)[ok])


def _wide_input(shape):
  x = np.asarray(jax.random.normal(jax.random.key(0), shape) * jnp.exp2(
      jax.random.randint(jax.random.key(1), shape, -140, 100)))
  x = x.astype(np.float32)
  x[0, 3], x[1, :16] = np.nan, 2.0**-140
  return x


def _normal(seed, shape):
  # NumPy draws: an eager jax.random draw compiles a program per shape, and
  # where these inputs come from doesn't matter to the tests.
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _jax(x, dtype=np.float32):
  """x as a jax.Array, made without compiling anything: jnp.full, jnp.ones,
  jnp.asarray of host data and the like compile a program per shape, while
  jax.device_put only copies."""
  return jax.device_put(np.asarray(x, dtype))


def _assert_same_array(a, b):
  np.testing.assert_array_equal(np.asarray(a.data).view(np.uint8),
                                np.asarray(b.data).view(np.uint8))
  np.testing.assert_array_equal(np.asarray(a.scales), np.asarray(b.scales))


@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_jit_equals_eager(fmt):
  x = _wide_input((2, 64))
  eager = mx.quantize(x, fmt)
  _assert_same_array(jax.jit(lambda v: mx.quantize(v, fmt))(x), eager)
  assert_same_bits(jax.jit(lambda a: a.dequantize())(eager),
                   eager.dequantize())


@pytest.mark.parametrize("fmt", ["nvfp4"])  # its path has float divisions
def test_op_by_op_equals_fused(fmt):
  """Without jit nothing is fused: exactness can't hang on XLA's fusion."""
  x = _wide_input((2, 32))
  fused = mx.quantize(x, fmt)
  with jax.disable_jit():
    op_by_op = mx.quantize(x, fmt)
    values = np.asarray(op_by_op.dequantize())
  _assert_same_array(op_by_op, fused)
  assert_same_bits(values, fused.dequantize())


# -- storage -------------------------------------------------------------------

@pytest.mark.parametrize("fmt,data_bytes,scale_bytes", [
    ("mxfp4_e2m1", 2048, 128), ("mxfp6_e2m3", 3072, 128),
    ("mxfp6_e3m2", 3072, 128), ("mxfp8_e4m3", 4096, 128),
    ("mxfp8_e5m2", 4096, 128), ("mxint8", 4096, 128), ("nvfp4", 2048, 256)])
def test_storage(fmt, data_bytes, scale_bytes):
  a = mx.quantize(_jax(np.linspace(-3, 3, 4096)), fmt)
  assert a.data.nbytes == data_bytes and a.scales.nbytes == scale_bytes
  extra = 4 if fmt == "nvfp4" else 0
  assert a.nbytes == data_bytes + scale_bytes + extra
  assert a.data.dtype == mx.get_format(fmt).storage_dtype


def test_packed_bit_layouts():
  from jaxfp8._src.mx import pack as mx_pack  # pylint: disable=g-import-not-at-top
  codes = _jax([0x1, 0xA, 0xF, 0x0], np.uint8)
  np.testing.assert_array_equal(mx_pack.pack(codes, 4), [0xA1, 0x0F])
  c = np.array([0b000001, 0b100010, 0b010011, 0b111100], np.uint8)
  w = int(c[0]) | int(c[1]) << 6 | int(c[2]) << 12 | int(c[3]) << 18
  np.testing.assert_array_equal(mx_pack.pack(_jax(c, np.uint8), 6),
                                [w & 0xFF, (w >> 8) & 0xFF, w >> 16])
  rng = np.random.default_rng(0)
  for bits in (4, 6, 8):
    codes = _jax(rng.integers(0, 2**bits, (3, 96)), np.uint8)
    packed = mx_pack.pack(codes, bits)
    assert packed.shape == (3, 96 * bits // 8)
    np.testing.assert_array_equal(mx_pack.unpack(packed, bits), codes)


def test_fp4_element_zero_in_low_nibble():
  x = np.zeros(32, np.float32)
  x[0], x[1] = 6.0, 0.5  # scale 1: codes 0x7 and 0x1
  a = mx.quantize(x, "mxfp4_e2m1")
  assert int(np.asarray(a.data)[0]) == 0x17


# -- shapes, padding, axes, pytrees --------------------------------------------

@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_padding(fmt):
  x = _normal(2, (3, 45))
  with pytest.raises(ValueError, match="not a multiple of block_size"):
    mx.quantize(x, fmt)
  a = mx.quantize(x, fmt, pad=True)
  assert a.shape == (3, 45)
  bs = a.block_size
  padded = np.zeros((3, -(-45 // bs) * bs), np.float32)
  padded[:, :45] = x
  full = mx.quantize(padded, fmt)
  assert_same_bits(a.dequantize(), np.asarray(full.dequantize())[:, :45])
  np.testing.assert_array_equal(a.scales, full.scales)


@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_axis(fmt):
  x = _normal(3, (64, 5))
  a = mx.quantize(x, fmt, axis=0)
  t = mx.quantize(x.T, fmt, axis=-1)
  assert a.shape == (64, 5) and a.axis == -2
  assert a.scales.shape == (64 // a.block_size, 5)
  assert_same_bits(a.dequantize(), np.asarray(t.dequantize()).T)


@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_pytree_jit_and_vmap(fmt):
  x = _normal(4, (3, 2, 64))
  a = mx.quantize(x, fmt)
  leaves, tree = jax.tree_util.tree_flatten(a)
  back = jax.tree_util.tree_unflatten(tree, leaves)
  assert back.shape == a.shape and back.fmt is a.fmt
  doubled = jax.jit(lambda m: m.dequantize() * 2)(a)
  assert_same_bits(doubled, np.asarray(a.dequantize()) * 2)
  v = jax.vmap(lambda r: mx.quantize(r, fmt))(x)
  assert isinstance(v, mx.MXArray) and v.shape == x.shape
  rows = np.stack([np.asarray(mx.quantize(r, fmt).dequantize()) for r in x])
  assert_same_bits(v.dequantize(), rows)
  assert_same_bits(jax.vmap(mx.dequantize)(v), rows)


def test_dequantize_other_dtypes():
  a = mx.quantize(_jax(np.linspace(-3, 3, 64)), "mxfp6_e3m2")
  out = a.dequantize(jnp.bfloat16)
  assert out.dtype == jnp.bfloat16
  # ml_dtypes rounds float32 -> bfloat16 to nearest even, as XLA does.
  np.testing.assert_array_equal(
      out, np.asarray(a.dequantize()).astype(ml_dtypes.bfloat16))


@pytest.mark.parametrize("dtype", ["float4_e2m1fn", "float6_e2m3fn",
                                   "float6_e3m2fn"])
def test_dequantize_to_formats_without_inf_saturates(dtype):
  """Values beyond the format's max saturate (XLA's float6 convert, where
  the installed JAX holds float6, gives 0 there); the rest round to nearest
  even."""
  if not jaxfp8.formats.get(dtype).native:
    pytest.skip(f"the installed JAX can't hold {dtype}")
  fmt = jaxfp8.formats.get(dtype)
  x = np.zeros(32, np.float32)
  x[:6] = [fmt.max * 4, -fmt.max * 2, fmt.max, 0.3, -1.1, 1e-3]
  a = mx.quantize(x, "mxfp8_e4m3")
  got = np.asarray(mx.dequantize(a, dtype)).astype(np.float32)
  want = np.asarray(jaxfp8.cast(a.dequantize(), dtype)).astype(np.float32)
  np.testing.assert_array_equal(got, want)
  assert got[0] == fmt.max and got[1] == -fmt.max


# -- stochastic rounding -------------------------------------------------------

@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_stochastic_rounds_to_a_neighbour_without_bias(fmt):
  x = np.random.default_rng(5).uniform(-4, 4, (1, 32)).astype(np.float32)
  x[0, 0] = 4.0  # pins the scale
  if fmt == "nvfp4":
    x = x[:, :16]
  n = 4096
  xs = np.repeat(x, n, axis=0)
  a = mx.quantize(xs, fmt, rounding="stochastic", key=jax.random.key(6))
  got = np.asarray(a.dequantize(), np.float64)
  nearest = mx.quantize(x, fmt)
  np.testing.assert_array_equal(np.asarray(a.scales)[:1], nearest.scales)
  # The neighbours of x on the block's grid, in float64 (saturating).
  f = mx.get_format(fmt)
  code = int(np.asarray(nearest.scales)[0, 0])
  if f.power_of_two_scales:
    scale = 2.0**(code - 127)
    grid = (np.arange(-127, 128) / 64.0 if fmt == "mxint8"
            else f.element.values)
  else:
    scale = float(f.scale.code_table[code]) * float(nearest.tensor_scale)
    grid = f.element.values
  vals = grid * scale
  x64 = np.clip(x[0].astype(np.float64), vals[0], vals[-1])
  down = vals[np.searchsorted(vals, x64, side="right") - 1]
  up = vals[np.searchsorted(vals, x64, side="left")]
  assert ((got == down) | (got == up)).all()
  # Unbiased: each element rounds up with probability frac; 5 sigma on the mean.
  tol = 5 * (up - down) / 2 / math.sqrt(n) + 1e-9
  assert (np.abs(got.mean(axis=0) - x64) <= tol).all()


# -- errors --------------------------------------------------------------------

def test_errors():
  x = _jax(np.ones(32))
  with pytest.raises(ValueError, match="fmt"):
    mx.quantize(x, "mxfp5")
  with pytest.raises(ValueError, match="scale_mode"):
    mx.quantize(x, "mxfp8_e4m3", scale_mode="round")
  with pytest.raises(ValueError, match="block_size"):
    mx.quantize(x, "mxfp6_e2m3", block_size=6)
  with pytest.raises(ValueError, match="axis"):
    mx.quantize(x, "mxfp8", axis=1)
  with pytest.raises(ValueError, match="key"):
    mx.quantize(x, "mxfp8", rounding="stochastic")
  with pytest.raises(ValueError, match="rounding"):
    mx.quantize(x, "mxfp8", rounding="up")
  with pytest.raises(TypeError, match="x"):
    mx.quantize("abc", "mxfp8")
  with pytest.raises(TypeError, match="MXArray"):
    mx.dequantize(x)


def test_lazy_module_access():
  assert jaxfp8.mx.quantize is mx.quantize


# -- matmul and the scaled_dot layouts -----------------------------------------

@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_matmul_reference_is_dequantize_then_dot(fmt):
  x, y = _normal(7, (2, 8, 64)), _normal(70, (64, 5))
  a, b = mx.quantize(_jax(x), fmt), mx.quantize(_jax(y), fmt, axis=0)
  want = np.einsum("bmk,kn->bmn", np.asarray(a.dequantize(), np.float64),
                   np.asarray(b.dequantize(), np.float64))
  got = mx.matmul(a, b)
  assert got.shape == (2, 8, 5) and got.dtype == jnp.float32
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  mixed = mx.matmul(a, b.dequantize(), preferred_element_type=jnp.bfloat16)
  assert mixed.dtype == jnp.bfloat16
  with pytest.raises(ValueError, match="contracting axis"):
    mx.matmul(a, mx.quantize(_jax(y.T), fmt))


@pytest.mark.parametrize("fmt", NATIVE_FORMATS)
def test_scaled_dot_layout_round_trip_and_matmul(fmt):
  a = mx.quantize(_jax(_normal(8, (8, 64))), fmt)
  b = mx.quantize(_jax(_normal(80, (64, 4))), fmt, axis=0)
  e, s = mx.to_scaled(a)
  f = mx.get_format(fmt)
  assert e.dtype == f.dtype and e.shape == (8, 64)
  assert s.dtype == f.scale.dtype and s.shape == a.scales.shape
  back = mx.from_scaled(e, s, fmt, tensor_scale=a.tensor_scale)
  np.testing.assert_array_equal(np.asarray(back.data).view(np.uint8),
                                np.asarray(a.data).view(np.uint8))
  assert_same_bits(back.dequantize(), a.dequantize())
  np.testing.assert_allclose(mx.matmul(a, b, method="scaled_dot"),
                             mx.matmul(a, b), rtol=1e-5, atol=1e-5)
  # scaled_matmul's layout: (B, M, K) and (B, N, K), both blocked on K.
  bt = mx.quantize(_jax(np.asarray(b.dequantize()).T[None]), fmt)
  eb, sb = mx.to_scaled(bt)
  assert eb.shape == (1, 4, 64) and sb.shape == (1, 4, 64 // a.block_size)


def test_to_scaled_refuses_fp6():
  with pytest.raises(NotImplementedError, match="float6"):
    mx.to_scaled(mx.quantize(_jax(np.ones(32)), "mxfp6_e2m3"))


@pytest.mark.parametrize("fmt", MX_FORMATS)
@pytest.mark.parametrize("shape", [(0, 32), (3, 0)])
def test_empty_arrays(fmt, shape):
  a = mx.quantize(_jax(np.zeros(shape)), fmt)
  assert a.shape == shape and a.dequantize().shape == shape


@pytest.mark.parametrize("n", [3, 5])  # n == batch once lined up by mistake
def test_scaled_dot_applies_vmapped_tensor_scales_per_batch(n):
  x = _normal(9, (3, 2, 32)) * np.array([1.0, 100.0, 1e4], np.float32)[
      :, None, None]
  y = _normal(90, (3, 32, n)) * np.array([1e3, 1.0, 1e-2], np.float32)[
      :, None, None]
  a = jax.vmap(lambda v: mx.quantize(v, "nvfp4"))(_jax(x))
  b = jax.vmap(lambda v: mx.quantize(v, "nvfp4", axis=0))(_jax(y))
  assert a.tensor_scale.shape == (3,) and len(set(np.asarray(
      a.tensor_scale).tolist())) == 3
  want = mx.matmul(a, b)
  np.testing.assert_allclose(mx.matmul(a, b, method="scaled_dot"), want,
                             rtol=1e-6)
  np.testing.assert_allclose(
      jax.jit(lambda p, q: mx.matmul(p, q, method="scaled_dot"))(a, b), want,
      rtol=1e-6)


def test_scaled_dot_mxint8_near_float32_max_does_not_overflow():
  a = mx.quantize(_jax(np.full((2, 32), 1.5 * 2.0**100)), "mxint8")
  b = mx.quantize(_jax(np.full((32, 2), 2.0**20)), "mxfp8_e4m3", axis=0)
  want = mx.matmul(a, b)
  assert float(np.asarray(want)[0, 0]) == 1.5 * 2.0**125
  assert_same_bits(mx.matmul(a, b, method="scaled_dot"), want)
  bt = mx.quantize(_jax(np.full((32, 2), 1.5 * 2.0**100)), "mxint8",
                   axis=0)
  at = mx.quantize(_jax(np.full((2, 32), 2.0**20)), "mxfp8_e4m3")
  assert_same_bits(mx.matmul(at, bt, method="scaled_dot"), want)


def test_scaled_dot_mxint8_tiny_and_zero_blocks_stay_exact():
  """Rows whose scales can't take all of 2^-6 take the rest afterwards."""
  x = np.ones((4, 96), np.float32)
  x[0, :32] = 1.5 * 2.0**-124   # E8M0 code 3: only 2^-2 fits in the scale
  x[1, 32:64] = 0.0             # code 0, but no nonzero element
  x[2, 64:] = np.nan
  x[3] *= 2.0**100
  y = np.full((96, 3), 2.0**20, np.float32)
  y[:32, 0] = 2.0**100
  for fa, fb in [("mxint8", "mxfp8_e4m3"), ("mxint8", "mxint8")]:
    a, b = mx.quantize(x, fa), mx.quantize(y, fb, axis=0)
    s = np.asarray(a.scales)
    assert int(s[0, 0]) == 3 and int(s[1, 1]) == 0
    assert_same_bits(mx.matmul(a, b, method="scaled_dot"), mx.matmul(a, b))


def test_from_scaled_tensor_scale_is_checked():
  a = mx.quantize(_jax(np.arange(16)), "nvfp4")
  e, s = mx.to_scaled(a)
  for bad in (3.0, 0.0, -2.0, np.inf, np.nan, 2.0**-127, 2.0**128,
              _jax(3.0)):  # a concrete 0-d jax.Array
    with pytest.raises(ValueError, match="positive power of two"):
      mx.from_scaled(e, s, "nvfp4", tensor_scale=bad)
  for bad in (True, jnp.array(1 + 0j), "2"):
    with pytest.raises(TypeError, match="tensor_scale"):
      mx.from_scaled(e, s, "nvfp4", tensor_scale=bad)
  with pytest.raises(ValueError, match="leading"):
    mx.from_scaled(e, s, "nvfp4", tensor_scale=_jax(np.ones(16)))
  want = np.asarray(a.dequantize()) / float(a.tensor_scale) * 4
  for four in (4, 4.0, np.float64(4.0), jnp.bfloat16(4), jnp.int32(4)):
    got = mx.from_scaled(e, s, "nvfp4", tensor_scale=four)
    assert got.tensor_scale.dtype == jnp.float32
    assert_same_bits(got.dequantize(), want)
  # Traced: the value can't be checked, the dtype still is.
  traced = jax.jit(lambda t: mx.from_scaled(e, s, "nvfp4", tensor_scale=t)
                   .dequantize())(jnp.float32(4.0))
  assert_same_bits(traced, want)
  # Batched elements take batched tensor scales.
  x = _normal(10, (2, 3, 16)) * np.array([1.0, 1e3], np.float32)[:, None, None]
  v = jax.vmap(lambda r: mx.quantize(r, "nvfp4"))(_jax(x))
  back = mx.from_scaled(*mx.to_scaled(v), "nvfp4", tensor_scale=v.tensor_scale)
  assert_same_bits(back.dequantize(), v.dequantize())


def test_from_scaled_refuses_a_tensor_scale_for_mx_formats():
  a = mx.quantize(_jax(np.arange(32)), "mxfp8_e4m3")
  with pytest.raises(ValueError, match="nvfp4 only"):
    mx.from_scaled(*mx.to_scaled(a), "mxfp8_e4m3", tensor_scale=2.0)
  assert mx.from_scaled(*mx.to_scaled(a), "mxfp8_e4m3").tensor_scale is None


@pytest.mark.parametrize("method", ["dequantize", "scaled_dot"])
def test_matmul_contracting_size_mismatch(method):
  a = mx.quantize(_jax(np.ones((2, 64))), "mxfp8_e4m3")
  b = mx.quantize(_jax(np.ones((32, 3))), "mxfp8_e4m3", axis=0)
  with pytest.raises(ValueError, match="contracting size"):
    mx.matmul(a, b, method=method)
  if method == "dequantize":
    with pytest.raises(ValueError, match="contracting size"):
      mx.matmul(a, _jax(np.ones(32)))
    with pytest.raises(ValueError, match="scalar"):
      mx.matmul(a, 2.0)
    assert mx.matmul(a, _jax(np.ones(64))).shape == (2,)


def test_dequantize_dtype_errors():
  a = mx.quantize(_jax(np.arange(32)), "mxfp6_e2m3")
  # Whether XLA holds and computes with float6 arrays depends on the
  # installed JAX (0.10.2's CPU backend holds none, 0.11.2's holds them but
  # can't convert them, so compat.backend_holds says no on both): refused by
  # name, or the float32 values rounded as jaxfp8.cast rounds them (exact
  # where float6 holds them, saturating beyond; XLA's own convert would give
  # 0 there).
  f6 = np.dtype(ml_dtypes.float6_e2m3fn)
  if compat.backend_holds(f6):
    out = a.dequantize("float6_e2m3fn")
    wide = a.dequantize()
    assert out.dtype == f6
    assert_same_bits(np.asarray(out).astype(np.float32),
                     np.asarray(jaxfp8.cast(wide, f6)).astype(np.float32))
    assert float(np.asarray(out).astype(np.float32).max()) == 7.5
    fits = np.abs(np.asarray(wide)) <= float(ml_dtypes.finfo(f6).max)
    np.testing.assert_array_equal(np.asarray(out, np.float32)[fits],
                                  np.asarray(wide)[fits])
  else:
    with pytest.raises(NotImplementedError, match="dequantize.*encode"):
      a.dequantize("float6_e2m3fn")
  with pytest.raises(ValueError, match="`dtype` of `dequantize`"):
    a.dequantize("bogus")
  with pytest.raises(TypeError, match="`dtype` argument to `dequantize`"):
    a.dequantize(jnp.int8)
  assert a.dequantize("e4m3").dtype == jnp.float8_e4m3fn
  assert a.dequantize(None).dtype == jnp.float32


def test_dequantize_dtype_follows_the_registry():
  """dtype is read as formats.get_dtype reads it: every alias, no NumPy codes.

  "f4" is NumPy's code for float32 (and "f16" for float128), which the
  format registry refuses or reads as its own aliases.
  """
  a = mx.quantize(_jax(np.linspace(-3, 3, 64)), "mxfp8_e4m3")
  want = np.asarray(a.dequantize()).astype(ml_dtypes.bfloat16)
  for alias in ("bf16", "bfloat16", jnp.bfloat16):
    out = mx.dequantize(a, alias)
    assert out.dtype == jnp.bfloat16
    assert_same_bits(out, want)
  assert a.dequantize("f16").dtype == jnp.float16
  with pytest.raises(ValueError, match="`dtype` of `dequantize`"):
    mx.dequantize(a, "f4")


def test_scaled_dot_mxint8_keeps_tiny_and_huge_results():
  # Tiny: a row of small scales keeps its codes (no early flush).
  a = mx.quantize(_jax(np.full((1, 32), 2.0**-8)), "mxfp8_e4m3")
  b = mx.quantize(_jax(np.full((32, 1), 2.0**-120)), "mxint8", axis=0)
  got = np.asarray(mx.matmul(a, b, method="scaled_dot"))
  assert float(got[0, 0]) == 32 * 2.0**-128
  # Huge: a row of large scales folds 2^-6 in (no early overflow).
  qa = mx.quantize(_jax(np.full((2, 32), 1.5 * 2.0**100)), "mxint8")
  qb = mx.quantize(_jax(np.full((32, 2), 2.0**20)), "mxfp8_e4m3", axis=0)
  np.testing.assert_array_equal(np.asarray(mx.matmul(qa, qb, method="scaled_dot")),
                                np.asarray(mx.matmul(qa, qb)))


def test_from_scaled_integer_and_per_row_tensor_scales():
  e, s = mx.to_scaled(mx.quantize(_jax(np.ones(16)), "nvfp4"))
  for v in (np.int64(2**31), np.int64(2**40), 2**40, 2**127, 4):
    got = float(mx.from_scaled(e, s, "nvfp4", tensor_scale=v).tensor_scale)
    assert got == float(v), v
  x = _jax(np.arange(128).reshape(4, 32))
  e, s = mx.to_scaled(mx.quantize(x, "nvfp4"))
  a = mx.from_scaled(e, s, "nvfp4", tensor_scale=_jax([1., 2., 4., 8.]))
  b = mx.quantize(_jax(np.ones((32, 3))), "nvfp4", axis=0)
  want = mx.matmul(a, b)
  got = mx.matmul(a, b, method="scaled_dot")
  assert got.shape == want.shape == (4, 3)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
