"""jaxfp8.mx.matmul and the scaled_dot converters (to_scaled, from_scaled)."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8 import mx
from mx_testing import assert_same_bits
from mx_testing import host_normal
from mx_testing import to_device

MX_FORMATS = list(mx.MX_FORMATS)
NATIVE_FORMATS = [f for f in MX_FORMATS if not f.startswith("mxfp6")]


# mx.matmul outside jit runs op by op, compiling a program per op and shape
# (dozens per scaled_dot call); these tests check its products, so they take
# them from one jitted program per call signature. Eager calls stay where
# the test is about the eager path or about argument errors.
@functools.partial(jax.jit, static_argnames=("method",))
def _matmul(a, b, method="dequantize"):
  return mx.matmul(a, b, method=method)


@pytest.mark.parametrize("fmt", MX_FORMATS)
def test_matmul_reference_is_dequantize_then_dot(fmt):
  x, y = host_normal(7, (2, 8, 64)), host_normal(70, (64, 5))
  a, b = mx.quantize(to_device(x), fmt), mx.quantize(to_device(y), fmt, axis=0)
  want = np.einsum("bmk,kn->bmn", np.asarray(a.dequantize(), np.float64),
                   np.asarray(b.dequantize(), np.float64))
  got = mx.matmul(a, b)
  assert got.shape == (2, 8, 5) and got.dtype == jnp.float32
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  mixed = mx.matmul(a, b.dequantize(), preferred_element_type=jnp.bfloat16)
  assert mixed.dtype == jnp.bfloat16
  with pytest.raises(ValueError, match="contracting axis"):
    mx.matmul(a, mx.quantize(to_device(y.T), fmt))


@pytest.mark.parametrize("method", ["dequantize", "scaled_dot"])
def test_matmul_contracting_size_mismatch(method):
  a = mx.quantize(to_device(np.ones((2, 64))), "mxfp8_e4m3")
  b = mx.quantize(to_device(np.ones((32, 3))), "mxfp8_e4m3", axis=0)
  with pytest.raises(ValueError, match="contracting size"):
    mx.matmul(a, b, method=method)
  if method == "dequantize":
    with pytest.raises(ValueError, match="contracting size"):
      mx.matmul(a, to_device(np.ones(32)))
    with pytest.raises(ValueError, match="scalar"):
      mx.matmul(a, 2.0)
    assert mx.matmul(a, to_device(np.ones(64))).shape == (2,)


@pytest.mark.parametrize("fmt", NATIVE_FORMATS)
def test_scaled_dot_layout_round_trip_and_matmul(fmt):
  a = mx.quantize(to_device(host_normal(8, (8, 64))), fmt)
  b = mx.quantize(to_device(host_normal(80, (64, 4))), fmt, axis=0)
  e, s = mx.to_scaled(a)
  f = mx.get_format(fmt)
  assert e.dtype == f.dtype and e.shape == (8, 64)
  assert s.dtype == f.scale.dtype and s.shape == a.scales.shape
  back = mx.from_scaled(e, s, fmt, tensor_scale=a.tensor_scale)
  np.testing.assert_array_equal(np.asarray(back.data).view(np.uint8),
                                np.asarray(a.data).view(np.uint8))
  assert_same_bits(back.dequantize(), a.dequantize())
  np.testing.assert_allclose(_matmul(a, b, method="scaled_dot"),
                             _matmul(a, b), rtol=1e-5, atol=1e-5)
  # scaled_matmul's layout: (B, M, K) and (B, N, K), both blocked on K.
  bt = mx.quantize(to_device(np.asarray(b.dequantize()).T[None]), fmt)
  eb, sb = mx.to_scaled(bt)
  assert eb.shape == (1, 4, 64) and sb.shape == (1, 4, 64 // a.block_size)


def test_to_scaled_refuses_fp6():
  with pytest.raises(NotImplementedError, match="float6"):
    mx.to_scaled(mx.quantize(to_device(np.ones(32)), "mxfp6_e2m3"))


@pytest.mark.parametrize("n", [3, 5])  # n == batch once lined up by mistake
def test_scaled_dot_applies_vmapped_tensor_scales_per_batch(n):
  x = host_normal(9, (3, 2, 32)) * np.array([1.0, 100.0, 1e4], np.float32)[
      :, None, None]
  y = host_normal(90, (3, 32, n)) * np.array([1e3, 1.0, 1e-2], np.float32)[
      :, None, None]
  a = jax.vmap(lambda v: mx.quantize(v, "nvfp4"))(to_device(x))
  b = jax.vmap(lambda v: mx.quantize(v, "nvfp4", axis=0))(to_device(y))
  assert a.tensor_scale.shape == (3,) and len(set(np.asarray(
      a.tensor_scale).tolist())) == 3
  want = mx.matmul(a, b)
  np.testing.assert_allclose(mx.matmul(a, b, method="scaled_dot"), want,
                             rtol=1e-6)
  np.testing.assert_allclose(
      jax.jit(lambda p, q: mx.matmul(p, q, method="scaled_dot"))(a, b), want,
      rtol=1e-6)


def test_scaled_dot_mxint8_near_float32_max_does_not_overflow():
  a = mx.quantize(to_device(np.full((2, 32), 1.5 * 2.0**100)), "mxint8")
  b = mx.quantize(to_device(np.full((32, 2), 2.0**20)), "mxfp8_e4m3", axis=0)
  want = _matmul(a, b)
  assert float(np.asarray(want)[0, 0]) == 1.5 * 2.0**125
  assert_same_bits(_matmul(a, b, method="scaled_dot"), want)
  bt = mx.quantize(to_device(np.full((32, 2), 1.5 * 2.0**100)), "mxint8",
                   axis=0)
  at = mx.quantize(to_device(np.full((2, 32), 2.0**20)), "mxfp8_e4m3")
  assert_same_bits(_matmul(at, bt, method="scaled_dot"), want)


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
    assert_same_bits(_matmul(a, b, method="scaled_dot"), _matmul(a, b))


def test_scaled_dot_mxint8_keeps_tiny_and_huge_results():
  # Tiny: a row of small scales keeps its codes (no early flush).
  a = mx.quantize(to_device(np.full((1, 32), 2.0**-8)), "mxfp8_e4m3")
  b = mx.quantize(to_device(np.full((32, 1), 2.0**-120)), "mxint8", axis=0)
  got = np.asarray(_matmul(a, b, method="scaled_dot"))
  assert float(got[0, 0]) == 32 * 2.0**-128
  # Huge: a row of large scales folds 2^-6 in (no early overflow).
  qa = mx.quantize(to_device(np.full((2, 32), 1.5 * 2.0**100)), "mxint8")
  qb = mx.quantize(to_device(np.full((32, 2), 2.0**20)), "mxfp8_e4m3", axis=0)
  np.testing.assert_array_equal(np.asarray(_matmul(qa, qb, method="scaled_dot")),
                                np.asarray(_matmul(qa, qb)))


def test_from_scaled_tensor_scale_is_checked():
  a = mx.quantize(to_device(np.arange(16)), "nvfp4")
  e, s = mx.to_scaled(a)
  for bad in (3.0, 0.0, -2.0, np.inf, np.nan, 2.0**-127, 2.0**128,
              to_device(3.0)):  # a concrete 0-d jax.Array
    with pytest.raises(ValueError, match="positive power of two"):
      mx.from_scaled(e, s, "nvfp4", tensor_scale=bad)
  for bad in (True, jnp.array(1 + 0j), "2"):
    with pytest.raises(TypeError, match="tensor_scale"):
      mx.from_scaled(e, s, "nvfp4", tensor_scale=bad)
  with pytest.raises(ValueError, match="leading"):
    mx.from_scaled(e, s, "nvfp4", tensor_scale=to_device(np.ones(16)))
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
  x = host_normal(10, (2, 3, 16)) * np.array([1.0, 1e3], np.float32)[:, None, None]
  v = jax.vmap(lambda r: mx.quantize(r, "nvfp4"))(to_device(x))
  back = mx.from_scaled(*mx.to_scaled(v), "nvfp4", tensor_scale=v.tensor_scale)
  assert_same_bits(back.dequantize(), v.dequantize())


def test_from_scaled_refuses_a_tensor_scale_for_mx_formats():
  a = mx.quantize(to_device(np.arange(32)), "mxfp8_e4m3")
  with pytest.raises(ValueError, match="nvfp4 only"):
    mx.from_scaled(*mx.to_scaled(a), "mxfp8_e4m3", tensor_scale=2.0)
  assert mx.from_scaled(*mx.to_scaled(a), "mxfp8_e4m3").tensor_scale is None


def test_from_scaled_integer_and_per_row_tensor_scales():
  e, s = mx.to_scaled(mx.quantize(to_device(np.ones(16)), "nvfp4"))
  for v in (np.int64(2**31), np.int64(2**40), 2**40, 2**127, 4):
    got = float(mx.from_scaled(e, s, "nvfp4", tensor_scale=v).tensor_scale)
    assert got == float(v), v
  x = to_device(np.arange(128).reshape(4, 32))
  e, s = mx.to_scaled(mx.quantize(x, "nvfp4"))
  a = mx.from_scaled(e, s, "nvfp4", tensor_scale=to_device([1., 2., 4., 8.]))
  b = mx.quantize(to_device(np.ones((32, 3))), "nvfp4", axis=0)
  want = _matmul(a, b)
  got = _matmul(a, b, method="scaled_dot")
  assert got.shape == want.shape == (4, 3)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
