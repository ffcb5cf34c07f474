"""The recipes' per-tensor operands go through the one per-tensor quantizer,
``jaxfp8.policy`` scaling's own ``quantize``: bit for bit what the recipes
computed before (``round_to(scaling.divide(x, scale), format)``), for every
format a ``"tensor"`` or ``"cast"`` quantizer takes, eager and under jit."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8._src.fp8 import scaling
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import rounding
from jaxfp8._src.numerics.codes import CodeArray
from jaxfp8._src.numerics.codes import decode
from jaxfp8._src.recipes import gemm
from jaxfp8._src.recipes import operand
from jaxfp8._src.recipes.spec import Quantizer

# Every signed narrow format (kind "tensor"), float6 and float4 included.
TENSOR_FORMATS = [f.name for f in formats.all_formats()
                  if f.narrow and f.signed]
# Kind "cast" takes every format but float32 (bfloat16, E8M0 too).
CAST_FORMATS = [f.name for f in formats.all_formats() if f.name != "float32"]


def _special(scale=1.0):
  """Zeros, subnormals, +-max of the wide formats, NaN, Inf, a spread."""
  rng = np.random.default_rng(0)
  x = rng.standard_normal(64) * 2.0 ** rng.integers(-20, 10, 64)
  x[:12] = [0.0, -0.0, 1e-45, -3e-39, 448.0, -57344.0, 6.0, 7.5, 1e30,
            -1e-30, 2.0**-9, 0.5]
  with np.errstate(over="ignore"):
    return (x * scale).astype(np.float32)


def _bits(a):
  """Codes of a narrow result (native or CodeArray), bits of a wide one."""
  if isinstance(a, CodeArray):
    return np.asarray(a.codes)
  a = np.asarray(a)
  return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def _before(x32, q, state=None):
  """The recipes' per-tensor rule before it went through the scaling
  objects' quantize."""
  if q.kind == "cast" and not formats.is_narrow(q.format):
    # Wide casts (bfloat16, float16) round as IEEE and lax do: overflow to
    # Inf, Inf and NaN kept (issue #43: the bf16 recipe is the baseline of
    # lax.dot_general on bf16 operands); narrow ones saturate.
    return x32.astype(q.format), None
  if q.kind == "cast":
    return rounding.round_to(x32, q.format), None
  scale = operand.scaler(q, state).scale_for(x32)
  return rounding.round_to(scaling.divide(x32, scale), q.format), scale


# Jitted with the quantizer static: one program per quantizer, shared by the
# cases that differ only in values (a lambda jitted per call compiled anew).
_quantize_jit = jax.jit(operand.quantize_tensor, static_argnums=1)
_before_jit = jax.jit(_before, static_argnums=1)


def _check(x32, q, state=None):
  for quantize, before in ((operand.quantize_tensor, _before),
                           (_quantize_jit, _before_jit)):
    got = quantize(x32, q, state)
    want = before(x32, q, state)
    np.testing.assert_array_equal(_bits(got[0]), _bits(want[0]))
    if want[1] is None:
      assert got[1] is None
    else:
      assert np.asarray(got[1]).view(np.uint32) == np.asarray(
          want[1]).view(np.uint32)
      np.testing.assert_array_equal(
          _bits(operand.dequantize_elementwise(*got)),
          _bits(decode(want[0], jnp.float32) * want[1]))


@pytest.mark.parametrize("scale_kind", ["float32", "pow2"])
@pytest.mark.parametrize("size", ["unit", "subnormal", "nan"])
@pytest.mark.parametrize("fmt", TENSOR_FORMATS)
def test_current_scaling_is_the_scaling_objects_quantize(fmt, size,
                                                         scale_kind):
  x = _special({"unit": 1.0, "subnormal": 1e-40, "nan": 1.0}[size])
  if size == "nan":
    x[5] = np.nan
  _check(jnp.asarray(x), Quantizer("tensor", fmt, scale=scale_kind,
                                   margin=1))


@pytest.mark.parametrize("fmt", TENSOR_FORMATS)
def test_delayed_scaling_is_the_scaling_objects_quantize(fmt):
  state = scaling.DelayedScaling.create(fmt, history_length=2).update(
      jnp.float32(3.0))
  _check(jnp.asarray(_special()), Quantizer("tensor", fmt, delayed=True),
         state)


@pytest.mark.parametrize("fmt", CAST_FORMATS)
def test_cast_is_the_one_cast(fmt):
  _check(jnp.asarray(_special()), Quantizer("cast", fmt))


@pytest.mark.parametrize("q,shape", [
    (Quantizer("nvfp4", "e2m1", block=(16, 16)), (40, 72)),
    (Quantizer("nvfp4", "e2m1", block=(16, 16), scale="pow2"), (32, 48)),
    (Quantizer("block", "e4m3", block=(128, 128)), (130, 260)),
    (Quantizer("block", "e5m2", block=(128, 128), scale="float32"),
     (256, 128)),
])
def test_square_blocks_quantize_a_view_and_its_transpose_alike(q, shape):
  # What lets the core keep the forward GEMM's quantized weight view for
  # the input-gradient GEMM (gemm.shares_quantized): the two views of one
  # operand, contracted along either axis, hold the same values.
  assert gemm.shares_quantized(q, q, (0,))
  w = jax.random.normal(jax.random.key(2), shape) * jnp.exp(
      jax.random.normal(jax.random.key(3), (1, shape[1])))
  along_rows = operand.quantize_view(operand.view(w, (), (0,)), q)
  along_cols = operand.quantize_view(operand.view(w, (), (1,)), q)
  np.testing.assert_array_equal(
      np.asarray(along_rows).T.view(np.uint32),
      np.asarray(along_cols).view(np.uint32))


def test_a_view_is_shared_only_between_like_square_deterministic_quantizers():
  sq = Quantizer("nvfp4", "e2m1", block=(16, 16))
  assert not gemm.shares_quantized(Quantizer("nvfp4", "e2m1"), Quantizer(
      "nvfp4", "e2m1"), (0,))  # 1 x 16 tiles change with the axis
  assert not gemm.shares_quantized(sq, Quantizer("nvfp4", "e2m1", block=(16, 16),
                                            scale="pow2"), (0,))
  assert not gemm.shares_quantized(Quantizer(
      "nvfp4", "e2m1", block=(16, 16), rounding="stochastic"), Quantizer(
          "nvfp4", "e2m1", block=(16, 16), rounding="stochastic"), (0,))
  assert not gemm.shares_quantized(sq, sq, (2, 0))  # flattened in another order
  assert not gemm.shares_quantized(None, None, (0,))


@pytest.mark.parametrize("q", [
    Quantizer("block", "e4m3", block=(1, 128)),
    Quantizer("block", "e5m2", block=(128, 128), scale="float32"),
    Quantizer("nvfp4", "e2m1"),
    Quantizer("nvfp4", "e2m1", block=(16, 16), scale="pow2"),
    Quantizer("nvfp4", "e2m1", rounding="stochastic"),
    Quantizer("mx", "mxfp8", rounding="stochastic"),
    Quantizer("tensor", "e4m3"),
], ids=str)
def test_quantizing_along_the_first_axis_in_place_is_the_view_transposed(q):
  # What the core's in-place GEMMs rely on (gemm._in_place): a matrix
  # contracted along axis 0 quantizes to the values its view (the
  # transpose) would, stochastic bits included.
  x = jax.random.normal(jax.random.key(4), (144, 40)) * jnp.exp(
      jax.random.normal(jax.random.key(5), (144, 1)))
  key = jax.random.key(6) if q.stochastic else None
  got = operand.quantize_along(x, 0, q, key)
  want = operand.quantize_view(x.T, q, key).T
  np.testing.assert_array_equal(np.asarray(got).view(np.uint32),
                                np.asarray(want).view(np.uint32))
