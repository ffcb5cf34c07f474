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
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8._src.mx import array as mx_array
from jaxfp8._src.mx import blockwise
from jaxfp8._src.mx import nvfp4
from jaxfp8._src.mx import quantize as mx_quantize
from jaxfp8._src.mx.formats import get_format


def _bits(a):
  # Through NumPy: an eager bitcast compiles a program per shape.
  return np.asarray(a, np.float32).view(np.uint32)


def _subnormals(n):
  return np.float32(3e-39) * np.arange(1, n + 1, dtype=np.float32)


def _scaled(x, p):
  """x with its amax scaled to 2^p, in NumPy (float32 arithmetic that keeps
  subnormals: XLA on CPU would flush them)."""
  return x / np.max(np.abs(x)) * np.float32(2.0**p)


def _inputs():
  # Made by NumPy and copied in (eager jnp ops and jax.random draws compile a
  # program each); where the values come from isn't under test.
  rng = np.random.default_rng(7)
  x = (rng.standard_normal((48, 80)) * np.exp(
      4 * rng.standard_normal((48, 1)))).astype(np.float32)
  specials = x.copy()
  specials[3, 5], specials[7, 40] = np.nan, -np.inf
  specials[9], specials[10] = np.float32(1e-40), 0.0
  specials[11, :16] = _subnormals(16)
  specials[12, :16] = np.float32(-1e-39)
  subnormal_elements = np.zeros((48, 80), np.float32)
  subnormal_elements[1:, ::16] = np.float32(2.0**-117)
  subnormal_elements[1:, 1:16] = _subnormals(15)
  subnormal_elements[0, 0] = np.float32(2.0**-99)
  huge = x.copy()
  huge[0, 0] = np.float32(3e38)
  inputs = {
      "wide": x, "specials": specials,
      # amax near 2^-95 and 2^-110: the plain branch's bound (2^-100) from
      # both sides; 1e-33: steps below float32's normal range.
      "near_bound": _scaled(x, -95),
      "below_bound": _scaled(x, -110),
      "tiny_specials": specials * np.float32(1e-33), "huge": huge,
      "zeros": np.zeros((48, 80), np.float32),
      # In the plain branch (amax 2^-99), blocks of scale 2^-9 whose
      # subnormal elements times their encode scale (~2^121) may round up
      # stochastically: plain float32 would flush them.
      "subnormal_elements": subnormal_elements,
  }
  return {k: jax.device_put(v) for k, v in inputs.items()}


INPUTS = _inputs()
BELOW_PLAIN = jax.device_put(_scaled(np.asarray(INPUTS["wide"]), -85))
MX_EXTRA = {
    "small": jax.device_put(np.asarray(INPUTS["wide"]) * np.float32(
        2.0**-120)),
    "ragged": jax.device_put(np.asarray(INPUTS["specials"])[:, :70])}


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


# Rows 0-15 group 0, 16-31 none, 32-47 group 2 (group 1 empty): tiles of
# 16 rows stay within a group, as the grouped recipes lay them out.
_ROW_GROUP = np.repeat(np.array([0, 3, 2], np.int32), 16)


@pytest.mark.parametrize("rounding", ["nearest", "stochastic"])
@pytest.mark.parametrize("block", [(1, 16), (16, 1), (16, 16)])
def test_nvfp4_values_of_row_groups_are_each_group_alone(block, rounding):
  """``row_groups``: each group's rows quantized as a tensor of its own,
  bit for bit, in both branches (a group of amax 2^-110 beside one near
  2^5 takes the exact forms for all)."""
  values = jax.jit(nvfp4.values, static_argnums=(2,), static_argnames=(
      "tensor_scale", "scale_mode", "rounding"))
  group = jax.device_put(_ROW_GROUP)
  key = jax.random.key(2)
  rand = None if rounding == "nearest" else jax.random.bits(
      key, (48, 80), jnp.uint32)
  inputs = dict(INPUTS, mixed=jax.device_put(np.concatenate(
      [_scaled(np.asarray(INPUTS["wide"])[:16], -110),
       np.asarray(INPUTS["wide"])[16:]])))
  for name, x in inputs.items():
    got = _bits(nvfp4.values(x, rand, block, tensor_scale="te",
                             scale_mode="floor", rounding=rounding,
                             row_groups=(group, 3)))
    for g in (0, 2):
      rows = _ROW_GROUP == g
      alone = jnp.where(jnp.asarray(rows)[:, None], x, 0.0)
      want = _bits(values(alone, rand, block, tensor_scale="te",
                          scale_mode="floor", rounding=rounding))
      np.testing.assert_array_equal(got[rows], want[rows],
                                    err_msg=f"{name}, group {g}")


def test_row_groups_need_the_te_rule_and_a_matrix():
  group = jnp.zeros((48,), jnp.int32)
  with pytest.raises(ValueError, match="`row_groups` argument to `values` "
                     "needs tensor_scale='te'"):
    nvfp4.values(INPUTS["wide"], None, (1, 16), tensor_scale="pow2",
                 scale_mode="floor", rounding="nearest",
                 row_groups=(group, 1))


def test_the_plain_branch_below_its_bound_would_be_wrong(monkeypatch):
  # What the bound guards: plain float32 arithmetic on a tensor whose amax
  # is below 2^-100 (XLA on CPU flushes its subnormal steps) gives other
  # values; the test above would catch a bound set too low.
  x = jax.device_put(_scaled(np.asarray(INPUTS["wide"]), -120))
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


def _equations(jaxpr) -> int:
  """Equations of a jaxpr and of every jaxpr inside it (inner jits, both
  branches of each cond): what XLA compiles."""
  n = 0
  for eqn in jaxpr.eqns:
    n += 1
    for param in eqn.params.values():
      for sub in param if isinstance(param, (tuple, list)) else [param]:
        if isinstance(sub, jax.extend.core.ClosedJaxpr):
          n += _equations(sub.jaxpr)
        elif isinstance(sub, jax.extend.core.Jaxpr):
          n += _equations(sub)
  return n


@pytest.mark.parametrize("which", ["nvfp4", "nvfp4_stochastic", "blockwise",
                                   "mxfp8_e4m3", "mxfp4_e2m1"])
def test_values_compile_less_than_quantize_and_dequantize(which):
  # Every emulated recipe GEMM compiles these programs, five or six times a
  # step. Their exact forms for tiny tensors are only the steps that differ
  # (nvfp4: conds over the per-block steps and the last product around one
  # element stage; blockwise and MX: a cond whose branches round elements
  # in the magnitude form), not the quantizer and dequantizer over again in
  # a cond, which made them 14-34% larger than the two together and each
  # recipe step's compile a quarter to a half slower.
  x = jnp.ones((32, 64), jnp.float32)
  if which == "blockwise":
    values = lambda x: blockwise.values(x, block=(1, 16), fmt="e4m3",
                                        scale="pow2")
    both = lambda x: blockwise.dequantize(
        *blockwise.quantize(x, block=(1, 16)), block=(1, 16))
  elif which.startswith("mx"):
    mx = get_format(which)
    values = lambda x: mx_quantize.values(x, mx, block_size=32, axis=0,
                                          scale_mode="floor")
    both = lambda x: mx_quantize.dequantize_blocks(
        *mx_quantize.quantize_blocks(x, mx, block_size=32, axis=0,
                                     scale_mode="floor", rounding="nearest"),
        mx, axis=0, length=32, block_size=32)
  else:
    rounding = "stochastic" if which.endswith("stochastic") else "nearest"
    key = jax.random.key(0) if rounding == "stochastic" else None
    rand = None if key is None else jnp.ones((32, 64), jnp.uint32)
    values = lambda x: nvfp4.values(x, rand, (1, 16), tensor_scale="te",
                                    scale_mode="floor", rounding=rounding)
    both = lambda x: nvfp4.dequantize(*nvfp4.quantize(x, rounding=rounding,
                                                      key=key))
  got = _equations(jax.make_jaxpr(values)(x).jaxpr)
  bound = _equations(jax.make_jaxpr(both)(x).jaxpr)
  assert got <= bound, (got, bound)


@pytest.mark.parametrize("scale", ["pow2", "float32"])
@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("block", [(1, 16), (16, 16), (1, 128)])
def test_blockwise_values_are_the_decoded_quantization(block, fmt, scale):
  values = jax.jit(blockwise.values, static_argnames=("block", "fmt",
                                                      "scale"))
  cases = dict(INPUTS, below_plain=BELOW_PLAIN)
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
  cases = dict(INPUTS, **MX_EXTRA)
  for name, x in cases.items():
    for axis in (0, 1):  # along the major axis and the minor one
      want = mx_array.quantize(x, fmt, axis=axis, scale_mode=mode, pad=True
                               ).dequantize()
      got = mx_quantize.values(x, mx, block_size=block, axis=axis,
                               scale_mode=mode)
      np.testing.assert_array_equal(_bits(got), _bits(want),
                                    err_msg=f"{name}, axis {axis}")
