"""Fake quantization: the values an MX format holds, with a straight-through
gradient (quantization-aware training's tool).
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.mx import array as mx_lib
from jaxfp8._src.numerics.rounding import operand_float32


def fake_quantize(x: Any, fmt: Any, *, block_size: int | None = None,
                  axis: int = -1, scale_mode: str = "floor",
                  rounding: str = "nearest", key: jax.Array | None = None,
                  pad: bool = False) -> jax.Array:
  """``quantize(x, ...).dequantize()`` in ``x``'s dtype, straight-through.

  For quantization-aware training: the forward value is exactly what the MX
  format holds; the gradient is the identity (a ``custom_vjp``, so it also
  crosses ``jit``, ``scan`` and ``remat`` boundaries), saturated elements
  included, as ``jaxfp8.cast`` does.

  Args:
    x: a real array (bfloat16/float16 results are rounded from float32).
    fmt, block_size, axis, scale_mode, rounding, key, pad: as for
      :func:`jaxfp8.mx.quantize`.

  Returns:
    An array of ``x``'s shape and dtype (float32 for non-float ``x``).

  >>> import jax, jax.numpy as jnp
  >>> x = jnp.array([960.0, 3.0, -1.0, 0.0] * 8)
  >>> fake_quantize(x, "mxfp8_e4m3")[:2]
  Array([896.,   3.], dtype=float32)
  >>> jax.grad(lambda v: fake_quantize(v, "mxfp4").sum())(x)[:2]
  Array([1., 1.], dtype=float32)
  """
  x32 = operand_float32(x, fn="fake_quantize")
  dtype = (x.dtype if hasattr(x, "dtype") and jnp.issubdtype(
      x.dtype, jnp.floating) and not isinstance(x, np.ndarray) else np.float32)
  q = mx_lib.quantize(lax.stop_gradient(x32), fmt, block_size=block_size,
                      axis=axis, scale_mode=scale_mode, rounding=rounding,
                      key=key, pad=pad)
  return _identity_grad(x32, q.dequantize()).astype(dtype)


@jax.custom_vjp
def _identity_grad(x, values):
  del x
  return values


def _identity_grad_fwd(x, values):
  del x
  return values, None


def _identity_grad_bwd(_, g):
  return g, None


_identity_grad.defvjp(_identity_grad_fwd, _identity_grad_bwd)
