"""Matmul on MX arrays (the reference the Pallas kernels are tested against),
and converters to and from the operand layouts of ``jax.lax.scaled_dot`` and
``jax.nn.scaled_matmul``.

Both JAX ops take the elements as a native narrow array and one scale per
block along the contracting axis, in a scale array of the same rank whose
contracting axis is divided by the block size: exactly :class:`MXArray`'s
layout with the packing undone and the scale codes viewed as
``float8_e8m0fnu`` (MX) or ``float8_e4m3fn`` (nvfp4).
"""
from __future__ import annotations

import functools
from typing import Any, Literal

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src import mx as _mx
from jaxfp8._src import mx_pack
from jaxfp8._src import validate


@functools.partial(jax.jit, static_argnums=(1, 2))
def _native_elements(data, fmt_name: str, axis: int):
  fmt = _mx.get_format(fmt_name)
  if fmt.bits == 8:
    return data
  codes = mx_pack.unpack(jnp.moveaxis(data, axis, -1), fmt.bits)
  values = _mx._element_values(codes, fmt)  # pylint: disable=protected-access
  return jnp.moveaxis(values.astype(fmt.dtype), -1, axis)


def to_scaled(a: _mx.MXArray) -> tuple[jax.Array, jax.Array]:
  """(elements, scales) as ``lax.scaled_dot`` and ``scaled_matmul`` take them.

  ``elements`` is a native array of the element dtype (``float8_e4m3fn``,
  ``float8_e5m2``, ``float4_e2m1fn``; ``int8`` for mxint8, whose values are
  ``int8 / 64``) of the padded storage shape; ``scales`` views the scale
  codes as ``float8_e8m0fnu`` (MX) or ``float8_e4m3fn`` (nvfp4), the same
  shape as ``a.scales``. For nvfp4 the product still needs ``a.tensor_scale``.

  Raises:
    NotImplementedError: for fp6, which XLA can't hold natively.

  >>> import jax.numpy as jnp
  >>> from jaxfp8._src.mx import quantize
  >>> e, s = to_scaled(quantize(jnp.arange(32.0), "mxfp4_e2m1"))
  >>> e.dtype, s.dtype, s.shape
  (dtype(float4_e2m1fn), dtype(float8_e8m0fnu), (1,))
  """
  if not isinstance(a, _mx.MXArray):
    raise TypeError(f"`a` argument to `to_scaled` must be an MXArray, got "
                    f"{type(a).__name__}")
  if a.fmt.bits == 6:
    raise NotImplementedError(
        f"`to_scaled`: {a.fmt.name} elements need a float6 array, which the "
        "installed XLA can't hold; use dequantize or mx.matmul instead")
  elements = _native_elements(a.data, a.fmt.name, a.axis)
  scales = lax.bitcast_convert_type(a.scales, a.fmt.scale.dtype)
  return elements, scales


def from_scaled(elements: Any, scales: Any, fmt: Any, *, axis: int = -1,
                tensor_scale: Any = None) -> _mx.MXArray:
  """Builds an :class:`MXArray` from ``scaled_dot``-style operands.

  Args:
    elements: native array of the element dtype (values must be exactly
      representable; fp4 and fp8 arrays always are).
    scales: ``float8_e8m0fnu`` / ``float8_e4m3fn`` array, or its uint8 codes,
      with ``elements``' shape except along ``axis`` (divided by the block).
    fmt: the MX format name.
    axis: the blocked (contracting) axis.
    tensor_scale: nvfp4's float32 power-of-two tensor scale (default 1).

  >>> import jax.numpy as jnp
  >>> from jaxfp8._src.mx import quantize
  >>> a = quantize(jnp.arange(32.0), "mxfp8_e4m3")
  >>> b = from_scaled(*to_scaled(a), "mxfp8_e4m3")
  >>> bool((b.dequantize() == a.dequantize()).all())
  True
  """
  fn = "from_scaled"
  mx = _mx.get_format(fmt, fn=fn)
  validate.check_array(elements, "elements", fn)
  validate.check_array(scales, "scales", fn)
  elements, scales = jnp.asarray(elements), jnp.asarray(scales)
  if elements.ndim == 0 or elements.ndim != scales.ndim:
    raise ValueError(f"`elements` and `scales` arguments to `{fn}` must have "
                     f"the same rank >= 1, got shapes {elements.shape} and "
                     f"{scales.shape}")
  ax = _mx._check_axis(  # pylint: disable=protected-access
      axis, elements.ndim, fn)
  n, nb = elements.shape[ax], scales.shape[ax]
  other = [d for i, d in enumerate(elements.shape) if i != ax % elements.ndim]
  other_s = [d for i, d in enumerate(scales.shape) if i != ax % scales.ndim]
  if nb == 0 or n % nb or other != other_s:
    raise ValueError(f"`scales` argument to `{fn}` must have `elements`' "
                     f"shape with axis {ax} divided by the block size; got "
                     f"{scales.shape} for elements {elements.shape}")
  if scales.dtype != np.uint8:
    if scales.dtype != mx.scale.dtype:
      raise TypeError(f"`scales` argument to `{fn}` must be {mx.scale.name} "
                      f"or uint8 codes for {mx.name}, got {scales.dtype}")
    scales = lax.bitcast_convert_type(scales, jnp.uint8)
  if elements.dtype != mx.dtype:
    raise TypeError(f"`elements` argument to `{fn}` must be {mx.dtype} for "
                    f"{mx.name}, got {elements.dtype}")
  if mx.bits < 8:
    codes = _mx._element_codes(  # pylint: disable=protected-access
        lax.bitcast_convert_type(jnp.moveaxis(elements, ax, -1).astype(
            jnp.float32), jnp.uint32), None, mx, "nearest")
    elements = jnp.moveaxis(mx_pack.pack(codes, mx.bits), -1, ax)
  if not mx.power_of_two_scales and tensor_scale is None:
    tensor_scale = jnp.float32(1.0)
  return _mx.MXArray(elements, scales, mx, axis=ax, length=n,
                     block_size=n // nb, tensor_scale=tensor_scale)


def _check_operand(x, name: str, blocked_axis: int):
  if isinstance(x, _mx.MXArray):
    if x.ndim < 2 or x.axis != blocked_axis:
      raise ValueError(
          f"`{name}` argument to `matmul` must be blocked along its "
          f"contracting axis ({blocked_axis}) with at least 2 dims; got "
          f"axis={x.axis}, shape={x.shape}")
    return x
  validate.check_array(x, name, "matmul")
  return jnp.asarray(x)


def matmul(a: Any, b: Any, *, preferred_element_type: Any = jnp.float32,
           method: Literal["dequantize", "scaled_dot"] = "dequantize"
           ) -> jax.Array:
  """``a @ b`` for MX operands (``jnp.matmul`` semantics), the reference path.

  Args:
    a: :class:`MXArray` of shape (..., M, K) blocked along K (``axis=-1``),
      or a plain array.
    b: :class:`MXArray` of shape (..., K, N) blocked along K (``axis=-2``),
      or a plain array.
    preferred_element_type: the result dtype (accumulation is float32).
    method: ``"dequantize"`` (default): dequantize both operands exactly and
      multiply in float32 at HIGHEST precision. ``"scaled_dot"``: hand the
      elements and scales to ``jax.lax.scaled_dot`` (2-D or 3-D MX operands of
      the same block size, not fp6); accumulation order may differ.

  >>> import jax.numpy as jnp
  >>> from jaxfp8._src.mx import quantize
  >>> a = quantize(jnp.ones((2, 64)), "mxfp8_e4m3")
  >>> b = quantize(jnp.full((64, 3), 0.5), "mxfp4_e2m1", axis=0)
  >>> matmul(a, b)
  Array([[32., 32., 32.],
         [32., 32., 32.]], dtype=float32)
  """
  validate.check_choice(method, ("dequantize", "scaled_dot"), "method",
                        "matmul")
  a = _check_operand(a, "a", -1)
  b = _check_operand(b, "b", -2)
  if method == "scaled_dot":
    return _scaled_dot(a, b, preferred_element_type)
  da = a.dequantize() if isinstance(a, _mx.MXArray) else a.astype(jnp.float32)
  db = b.dequantize() if isinstance(b, _mx.MXArray) else b.astype(jnp.float32)
  out = jnp.matmul(da, db, precision=lax.Precision.HIGHEST,
                   preferred_element_type=jnp.float32)
  return out.astype(preferred_element_type)


def _scaled_dot(a, b, preferred_element_type):
  if not (isinstance(a, _mx.MXArray) and isinstance(b, _mx.MXArray)):
    raise NotImplementedError("`matmul` with method='scaled_dot' needs two "
                              "MXArray operands")
  if a.ndim not in (2, 3) or a.ndim != b.ndim or a.block_size != b.block_size:
    raise NotImplementedError(
        "`matmul` with method='scaled_dot' needs 2-D or 3-D operands of the "
        f"same rank and block size; got shapes {a.shape}, {b.shape} and "
        f"blocks {a.block_size}, {b.block_size}")
  if a.shape[-1] != b.shape[-2]:
    raise ValueError(f"`matmul`: contracting sizes differ, {a.shape} @ "
                     f"{b.shape}")
  (ea, sa), (eb, sb) = to_scaled(a), to_scaled(b)
  dims = (((1,), (0,)), ((), ())) if a.ndim == 2 else (((2,), (1,)),
                                                       ((0,), (0,)))
  out = lax.scaled_dot(ea, eb, lhs_scale=sa, rhs_scale=sb,
                       dimension_numbers=dims,
                       preferred_element_type=jnp.float32)
  for x in (a, b):
    if x.fmt.name == "mxint8":
      out = out * np.float32(2.0**-6)
    if x.tensor_scale is not None:
      out = out * x.tensor_scale
  return out.astype(preferred_element_type)
