"""The value paths the recipes' emulated GEMMs multiply equal the
quantizers' codes and scales decoded, bit for bit: ``nvfp4.values`` against
``nvfp4.dequantize(*nvfp4.quantize(...))`` and ``blockwise.values`` against
``blockwise.dequantize(*blockwise.quantize(...))``, the MX formats'
``quantize.values`` against ``quantize(...).dequantize()``, in both of their
branches (plain float32 arithmetic, and the exact integer forms for tiny
tensors), every block shape, scale and rounding, NaN, Inf and subnormal
inputs."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np
import pytest

from jaxfp8._src.mx import array as mx_array
from jaxfp8._src.mx import blockwise
from jaxfp8._src.mx import nvfp4
from jaxfp8._src.mx import quantize as mx_quantize
from jaxfp8._src.mx.formats import get_format


def _bits(a):
  return np.asarray(lax.bitcast_convert_type(a, jnp.uint32))


def _subnormals(n):
  # Made by NumPy: XLA on CPU would flush a product that lands there.
  return jnp.asarray(np.float32(3e-39) * np.arange(1, n + 1, dtype=np.float32))


def _inputs():
  k = jax.random.split(jax.random.key(7), 2)
  x = jax.random.normal(k[0], (48, 80)) * jnp.exp(
      4 * jax.random.normal(k[1], (48, 1)))
  specials = (x.at[3, 5].set(jnp.nan).at[7, 40].set(-jnp.inf)
              .at[9].set(1e-40).at[10].set(0.0)
              .at[11, :16].set(_subnormals(16))
              .at[12, :16].set(-1e-39))
  return {
      "wide": x, "specials": specials,
      # amax near 2^-95 and 2^-110: the plain branch's bound (2^-100) from
      # both sides; 1e-33: steps below float32's normal range.
      "near_bound": x / jnp.max(jnp.abs(x)) * 2.0**-95,
      "below_bound": x / jnp.max(jnp.abs(x)) * 2.0**-110,
      "tiny_specials": specials * 1e-33, "huge": x.at[0, 0].set(3e38),
      "zeros": jnp.zeros((48, 80)),
      # In the plain branch (amax 2^-99), blocks of scale 2^-9 whose
      # subnormal elements times their encode scale (~2^121) may round up
      # stochastically: plain float32 would flush them.
      "subnormal_elements": jnp.zeros((48, 80)).at[0, 0].set(2.0**-99)
                            .at[1:, ::16].set(2.0**-117)
                            .at[1:, 1:16].set(_subnormals(15)),
  }


INPUTS = _inputs()


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
@pytest.mark.parametrize("tensor_scale", ["te", "pow2"])
@pytest.mark.parametrize("block", [(1, 16), (16, 16)])
def test_nvfp4_values_are_the_decoded_quantization(block, tensor_scale,
                                                   rounding):
  key = jax.random.key(1) if rounding == "stochastic" else None
  values = jax.jit(nvfp4.values, static_argnums=(2,), static_argnames=(
      "tensor_scale", "scale_mode", "rounding"))
  for name, x in INPUTS.items():
    codes, scales, ts = nvfp4.quantize(x, block=block,
                                       tensor_scale=tensor_scale,
                                       rounding=rounding, key=key)
    want = nvfp4.dequantize(codes, scales, ts, block=block)
    rand = None if key is None else jax.random.bits(key, x.shape,
                                                     jnp.uint32)
    got = values(x, rand, block, tensor_scale=tensor_scale,
                 scale_mode="floor", rounding=rounding)
    np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=name)


def test_the_plain_branch_below_its_bound_would_be_wrong(monkeypatch):
  # What the bound guards: plain float32 arithmetic on a tensor whose amax
  # is below 2^-100 (XLA on CPU flushes its subnormal steps) gives other
  # values; the test above would catch a bound set too low.
  x = INPUTS["wide"] / jnp.max(jnp.abs(INPUTS["wide"])) * 2.0**-120
  codes, scales, ts = nvfp4.quantize(x)
  want = _bits(nvfp4.dequantize(codes, scales, ts))
  monkeypatch.setattr(nvfp4, "_PLAIN_TE_AMAX", np.float32(0.0))
  jax.clear_caches()
  try:
    got = _bits(nvfp4.values(x, None, (1, 16), tensor_scale="te",
                             scale_mode="floor", rounding="nearest"))
  finally:
    jax.clear_caches()
  assert (got != want).any()


@pytest.mark.parametrize("scale", ["pow2", "float32"])
@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("block", [(1, 16), (16, 16), (1, 128)])
def test_blockwise_values_are_the_decoded_quantization(block, fmt, scale):
  values = jax.jit(blockwise.values, static_argnames=("block", "fmt",
                                                      "scale"))
  cases = dict(INPUTS, below_plain=INPUTS["wide"] / jnp.max(
      jnp.abs(INPUTS["wide"])) * 2.0**-85)
  for name, x in cases.items():
    codes, scales = blockwise.quantize(x, block=block, fmt=fmt, scale=scale)
    want = blockwise.dequantize(codes, scales, block=block)
    got = values(x, block=block, fmt=fmt, scale=scale)
    np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=name)


@pytest.mark.parametrize("mode", ["floor", "rceil"])
@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3",
                                 "mxfp6_e3m2", "mxfp4_e2m1", "mxint8",
                                 "nvfp4"])
def test_mx_values_are_the_decoded_quantization(fmt, mode):
  mx = get_format(fmt)
  block = 16 if fmt == "nvfp4" else 32
  cases = dict(INPUTS, small=INPUTS["wide"] * 2.0**-120,
               ragged=INPUTS["specials"][:, :70])
  for name, x in cases.items():
    for axis in (0, 1):  # along the major axis and the minor one
      want = mx_array.quantize(x, fmt, axis=axis, scale_mode=mode, pad=True
                               ).dequantize()
      got = mx_quantize.values(x, mx, block_size=block, axis=axis,
                               scale_mode=mode)
      np.testing.assert_array_equal(_bits(got), _bits(want),
                                    err_msg=f"{name}, axis {axis}")
