"""jaxfp8.mx arrays: jit and eager, storage sizes, padding, axes, pytrees,
dequantize dtypes, stochastic rounding and argument errors."""
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
from mx_testing import assert_same_bits
from mx_testing import host_normal
from mx_testing import to_device

MX_FORMATS = list(mx.MX_FORMATS)


def _wide_input(shape):
  # Drawn by NumPy (eager jax.random draws compile programs per shape): normal
  # values times 2^[-140, 100), subnormals and zeros among them.
  rng = np.random.default_rng(0)
  x = rng.standard_normal(shape) * 2.0**rng.integers(-140, 100, shape)
  x = x.astype(np.float32)
  x[0, 3], x[1, :16] = np.nan, 2.0**-140
  return x


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


# -- storage --------------------------------------------------------------------

@pytest.mark.parametrize("fmt,data_bytes,scale_bytes", [
    ("mxfp4_e2m1", 2048, 128), ("mxfp6_e2m3", 3072, 128),
    ("mxfp6_e3m2", 3072, 128), ("mxfp8_e4m3", 4096, 128),
    ("mxfp8_e5m2", 4096, 128), ("mxint8", 4096, 128), ("nvfp4", 2048, 256)])
def test_storage(fmt, data_bytes, scale_bytes):
  a = mx.quantize(to_device(np.linspace(-3, 3, 4096)), fmt)
  assert a.data.nbytes == data_bytes and a.scales.nbytes == scale_bytes
  extra = 4 if fmt == "nvfp4" else 0
  assert a.nbytes == data_bytes + scale_bytes + extra
  assert a.data.dtype == mx.get_format(fmt).storage_dtype


# -- shapes, padding, axes, pytrees ---------------------------------------------

@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_padding(fmt):
  # Two rows: the padded (2, 64) of the 32-blocks is the shape the tests
  # above quantize, whose programs it shares.
  x = host_normal(2, (2, 45))
  with pytest.raises(ValueError, match="not a multiple of block_size"):
    mx.quantize(x, fmt)
  a = mx.quantize(x, fmt, pad=True)
  assert a.shape == (2, 45)
  bs = a.block_size
  padded = np.zeros((2, -(-45 // bs) * bs), np.float32)
  padded[:, :45] = x
  full = mx.quantize(padded, fmt)
  assert_same_bits(a.dequantize(), np.asarray(full.dequantize())[:, :45])
  np.testing.assert_array_equal(a.scales, full.scales)


@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_axis(fmt):
  # (64, 2): x.T is the (2, 64) the tests above quantize, whose programs it
  # shares; the other axis's length isn't what this test is about.
  x = host_normal(3, (64, 2))
  a = mx.quantize(x, fmt, axis=0)
  t = mx.quantize(x.T, fmt, axis=-1)
  assert a.shape == (64, 2) and a.axis == -2
  assert a.scales.shape == (64 // a.block_size, 2)
  assert_same_bits(a.dequantize(), np.asarray(t.dequantize()).T)


@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_pytree_jit_and_vmap(fmt):
  x = host_normal(4, (3, 2, 64))
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


@pytest.mark.parametrize("fmt", MX_FORMATS)
@pytest.mark.parametrize("shape", [(0, 32), (3, 0)])
def test_empty_arrays(fmt, shape):
  a = mx.quantize(to_device(np.zeros(shape)), fmt)
  assert a.shape == shape and a.dequantize().shape == shape


# -- dequantize dtypes ----------------------------------------------------------

def test_dequantize_other_dtypes():
  a = mx.quantize(to_device(np.linspace(-3, 3, 64)), "mxfp6_e3m2")
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


def test_dequantize_dtype_errors():
  a = mx.quantize(to_device(np.arange(32)), "mxfp6_e2m3")
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
  a = mx.quantize(to_device(np.linspace(-3, 3, 64)), "mxfp8_e4m3")
  want = np.asarray(a.dequantize()).astype(ml_dtypes.bfloat16)
  for alias in ("bf16", "bfloat16", jnp.bfloat16):
    out = mx.dequantize(a, alias)
    assert out.dtype == jnp.bfloat16
    assert_same_bits(out, want)
  assert a.dequantize("f16").dtype == jnp.float16
  with pytest.raises(ValueError, match="`dtype` of `dequantize`"):
    mx.dequantize(a, "f4")


# -- stochastic rounding --------------------------------------------------------

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


# -- errors ---------------------------------------------------------------------

def test_errors():
  x = to_device(np.ones(32))
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
