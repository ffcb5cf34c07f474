"""``a @ b`` on MX arrays (:func:`matmul`, ``jaxfp8.mx.matmul``), and converters
to and from the operand layouts of ``jax.lax.scaled_dot`` and
``jax.nn.scaled_matmul`` (:func:`to_scaled`, :func:`from_scaled`).

:func:`matmul` follows ``jnp.matmul`` (``a`` blocked along its last axis,
``b`` along its second to last) and takes any MX format, on any backend. The
kernels ``jaxfp8.ops.mx_matmul_mgpu`` (Mosaic GPU) and
``jaxfp8.ops.mx_matmul`` (Triton) (``a @ b.T``, mxfp8 only) live in
:mod:`jaxfp8._src.kernels`, with the one reference they are tested
against, ``mx_matmul_reference``.

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

from jaxfp8._src import compat
from jaxfp8._src.mx import array as _mx
from jaxfp8._src.mx import elements as elements_lib
from jaxfp8._src.mx import pack as mx_pack
from jaxfp8._src.mx.formats import get_format
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import validate
from jaxfp8._src.numerics.host import device_array


@functools.partial(jax.jit, static_argnums=(1, 2))
def _native_elements(data, fmt_name: str, axis: int):
  fmt = get_format(fmt_name)
  if fmt.bits == 8:
    return data
  codes = mx_pack.unpack(jnp.moveaxis(data, axis, -1), fmt.bits)
  values = elements_lib.element_values(codes, fmt)
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
  >>> from jaxfp8._src.mx.array import quantize
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
    tensor_scale: nvfp4 only: its tensor scale (default 1), a power of two
      in float32's normal range, 2^-126 to 2^127, as :func:`quantize` makes
      them; float or integer (converted to float32 exactly), 0-d, or the
      leading (batch) axes of ``elements``. A recipe's non-power-of-two scale
      (``amax / 2688``) is not accepted: apply it to the result instead
      (see ``docs/mx.md``).

  Returns:
    An :class:`MXArray`.

  Raises:
    TypeError: for elements or scales of the wrong dtype, or a
      ``tensor_scale`` that is not a real number.
    ValueError: for mismatched shapes, a ``tensor_scale`` with a format
      other than nvfp4, or one that is not a power of two in range (checked
      when its value is known, i.e. not under ``jit``).

  >>> import jax.numpy as jnp
  >>> from jaxfp8._src.mx.array import quantize
  >>> a = quantize(jnp.arange(32.0), "mxfp8_e4m3")
  >>> b = from_scaled(*to_scaled(a), "mxfp8_e4m3")
  >>> bool((b.dequantize() == a.dequantize()).all())
  True
  """
  fn = "from_scaled"
  mx = get_format(fmt, fn=fn)
  validate.check_array(elements, "elements", fn)
  validate.check_array(scales, "scales", fn)
  elements, scales = jnp.asarray(elements), jnp.asarray(scales)
  if elements.ndim == 0 or elements.ndim != scales.ndim:
    raise ValueError(f"`elements` and `scales` arguments to `{fn}` must have "
                     f"the same rank >= 1, got shapes {elements.shape} and "
                     f"{scales.shape}")
  ax = _mx.check_axis(axis, elements.ndim, fn=fn)
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
    codes = elements_lib.element_codes(
        lax.bitcast_convert_type(jnp.moveaxis(elements, ax, -1).astype(
            jnp.float32), jnp.uint32), mx, rounding="nearest")
    elements = jnp.moveaxis(mx_pack.pack(codes, mx.bits), -1, ax)
  tensor_scale = _check_tensor_scale(tensor_scale, mx, elements.shape, ax)
  return _mx.MXArray(elements, scales, mx, axis=ax, length=n,
                     block_size=n // nb, tensor_scale=tensor_scale)


def _check_tensor_scale(tensor_scale, mx, shape: tuple[int, ...], ax: int):
  """nvfp4's tensor scale as a float32 array; checks dtype, shape and value."""
  fn = "from_scaled"
  if mx.power_of_two_scales:
    if tensor_scale is not None:
      raise ValueError(f"`tensor_scale` argument to `{fn}` is for nvfp4 only; "
                       f"{mx.name} has no tensor scale (its E8M0 block scales "
                       f"carry the whole scale), got {tensor_scale!r}")
    return None
  if tensor_scale is None:
    return jnp.float32(1.0)
  validate.check_array(tensor_scale, "tensor_scale", fn)
  if isinstance(tensor_scale, (int, np.integer)) and not isinstance(
      tensor_scale, (bool, np.bool_)):
    tensor_scale = float(tensor_scale)  # exact for powers of two to 2^127
  dtype = (np.dtype(tensor_scale.dtype) if hasattr(tensor_scale, "dtype")
           else np.asarray(tensor_scale).dtype)
  if dtype == np.bool_ or not (jnp.issubdtype(dtype, jnp.floating)
                               or jnp.issubdtype(dtype, jnp.integer)):
    raise TypeError(f"`tensor_scale` argument to `{fn}` must be a real "
                    f"number (float or integer), got dtype {dtype}")
  ts_shape = tuple(np.shape(tensor_scale))
  if (len(ts_shape) >= len(shape) or ts_shape != shape[:len(ts_shape)]
      or ax % len(shape) < len(ts_shape)):
    raise ValueError(f"`tensor_scale` argument to `{fn}` must be a scalar or "
                     f"have the leading (batch) axes of `elements` {shape} "
                     f"before the blocked axis {ax}, got shape {ts_shape}")
  if not isinstance(tensor_scale, compat.Tracer):
    v = np.asarray(tensor_scale).astype(np.float64)
    mant, exp = np.frexp(v)
    ok = np.isfinite(v) & (mant == 0.5) & (exp >= -125) & (exp <= 128)
    if not ok.all():
      bad = v[~ok].flat[0] if v.ndim else v
      raise ValueError(f"`tensor_scale` argument to `{fn}` must be a positive "
                       f"power of two in float32's normal range (2^-126 to "
                       f"2^127), got {float(bad)!r}")
    return jnp.asarray(v.astype(np.float32))  # on the host: no int32 detour
  return tensor_scale.astype(jnp.float32)


def _check_operand(x, name: str, blocked_axis: int):
  if isinstance(x, _mx.MXArray):
    if x.ndim < 2 or x.axis != blocked_axis:
      raise ValueError(
          f"`{name}` argument to `matmul` must be blocked along its "
          f"contracting axis ({blocked_axis}) with at least 2 dims; got "
          f"axis={x.axis}, shape={x.shape}")
    return x
  validate.check_array(x, name, "matmul")
  x = device_array(x)
  if x.ndim == 0:
    raise ValueError(f"`{name}` argument to `matmul` must have at least one "
                     "dimension, got a scalar")
  return x


def matmul(a: Any, b: Any, *, preferred_element_type: Any = jnp.float32,
           method: Literal["dequantize", "scaled_dot"] = "dequantize"
           ) -> jax.Array:
  """``a @ b`` for MX operands (``jnp.matmul`` semantics), any MX format.

  Args:
    a: :class:`MXArray` of shape (..., M, K) blocked along K (``axis=-1``),
      or a plain array.
    b: :class:`MXArray` of shape (..., K, N) blocked along K (``axis=-2``),
      or a plain array.
    preferred_element_type: the result dtype (accumulation is float32).
    method: ``"dequantize"`` (default): dequantize both operands exactly and
      multiply in float32 at HIGHEST precision. ``"scaled_dot"``: hand the
      elements and scales to ``jax.lax.scaled_dot`` (2-D or 3-D MX operands of
      the same block size, not fp6); accumulation order may differ. A plain
      operand is quantized in the other's format and block size first
      (dynamic MX activations against packed weights).

  Gradients are straight-through in the operands' sources (see
  :func:`jaxfp8._src.mx.array.quantize`), for both methods.

  >>> import jax.numpy as jnp
  >>> from jaxfp8._src.mx.array import quantize
  >>> a = quantize(jnp.ones((2, 64)), "mxfp8_e4m3")
  >>> b = quantize(jnp.full((64, 3), 0.5), "mxfp4_e2m1", axis=0)
  >>> matmul(a, b)
  Array([[32., 32., 32.],
         [32., 32., 32.]], dtype=float32)
  """
  validate.check_choice(method, ("dequantize", "scaled_dot"), "method",
                        "matmul")
  preferred_element_type = formats.result_dtype(preferred_element_type,
                                                fn="matmul")
  a = _check_operand(a, "a", -1)
  b = _check_operand(b, "b", -2)
  k_b = b.shape[-2] if b.ndim > 1 else b.shape[0]
  if a.shape[-1] != k_b:
    raise ValueError(f"`a` and `b` arguments to `matmul` must have the same "
                     f"contracting size (a's last axis, b's second to last), "
                     f"got shapes {a.shape} and {b.shape}")
  if method == "scaled_dot":
    a, b = _as_mx(a, b, -1), _as_mx(b, a, -2)
    return _straight_through_product(
        a, b, scaled_dot_product(a, b, preferred_element_type))
  da = a.dequantize() if isinstance(a, _mx.MXArray) else a.astype(jnp.float32)
  db = b.dequantize() if isinstance(b, _mx.MXArray) else b.astype(jnp.float32)
  out = jnp.matmul(da, db, precision=lax.Precision.HIGHEST,
                   preferred_element_type=jnp.float32)
  return out.astype(preferred_element_type)


def _as_mx(x, other, axis: int):
  """A plain operand of ``scaled_dot`` quantized like the MX one (dynamic)."""
  if isinstance(x, _mx.MXArray):
    return x
  if not isinstance(other, _mx.MXArray):
    raise NotImplementedError("`matmul` with method='scaled_dot' needs at "
                              "least one MXArray operand")
  return _mx.quantize(x, other.fmt, block_size=other.block_size, axis=axis,
                      pad=True)


def _straight_through_product(a, b, out):
  """``out`` (``scaled_dot``'s product), differentiated as ``a @ b`` of the
  dequantized operands in their straight-through sources (raises when an
  operand has none: its storage carries no gradient)."""
  parts = []
  for x in (a, b):
    if x.source is None:
      x = _mx.no_gradient(x)
      parts += [lax.stop_gradient(jnp.zeros(x.shape, jnp.float32))]
    else:
      parts += [x.source]
    parts += [lax.stop_gradient(x.dequantize())]
  return _st_product(parts[0], parts[2], parts[1], parts[3], out)


@jax.custom_jvp
def _st_product(src_a, src_b, da, db, out):
  del src_a, src_b, da, db
  return out


@_st_product.defjvp
def _st_product_jvp(primals, tangents):
  _, _, da, db, out = primals
  ta, tb = tangents[:2]
  hi = lax.Precision.HIGHEST
  t = jnp.matmul(ta, db, precision=hi) + jnp.matmul(da, tb, precision=hi)
  return _st_product(*primals), t.astype(out.dtype)


def _int8_scale_shift(elements, codes, axis: int):
  """Folds mxint8's 2^-6 into its E8M0 codes, as far as each row allows.

  ``scaled_dot`` reads mxint8 elements as integers, 64 times their value;
  correcting the product afterwards would overflow it six binades early.
  A row (``axis`` is the blocked axis) with a block scale >= 1 (the only
  rows whose products can overflow early) has its codes lowered by
  ``t <= 6`` and the rest, 2^(t - 6), is returned as the factor of that
  row of the product (a column when ``axis`` is -2); other rows keep their
  codes (``t = 0``: the whole 2^-6 after the product, so their tiny
  products don't flush). ``t`` keeps every block holding a nonzero element
  at code >= 1: code 0 (2^-127) is subnormal in the bfloat16 that
  ``scaled_dot``'s CPU decomposition multiplies in, and flushes to zero.
  """
  e = jnp.moveaxis(elements, axis, -1)
  c = jnp.moveaxis(codes, axis, -1).astype(jnp.int32)
  nonzero = jnp.any(e.reshape(*c.shape, -1) != 0, axis=-1)
  live = nonzero & (c != 255)  # NaN blocks decode to NaN at any code
  t = jnp.clip(jnp.min(jnp.where(live, c, 255), axis=-1, initial=255) - 1,
               0, 6)
  # Only rows with a block scale >= 1 can overflow early; lowering the codes
  # of rows of small scales would instead flush products near 2^-126.
  big = jnp.max(jnp.where(live, c, 0), axis=-1, initial=0) >= 127
  t = jnp.where(big, t, 0)
  c = jnp.where(c == 255, c, jnp.maximum(c - t[..., None], 0))
  codes = jnp.moveaxis(c.astype(jnp.uint8), -1, axis)
  factor = lax.bitcast_convert_type(((t + 121) << 23).astype(jnp.uint32),
                                    jnp.float32)  # 2^(t - 6), a normal float
  return codes, factor


def scaled_dot_product(a: _mx.MXArray, b: _mx.MXArray,
                       preferred_element_type: Any, *,
                       b_rows: bool = False) -> jax.Array:
  """``a @ b`` by ``lax.scaled_dot``: a (M, K) / (B, M, K) blocked along K
  (its last axis), b (K, N) / (B, K, N) blocked along K (its second to
  last), the same block size; nvfp4 tensor scales and mxint8's 2^-6 applied
  (see :func:`matmul`). ``b_rows``: b is (N, K) / (B, N, K) blocked along
  its last axis instead (``a @ b.T``; the ``"scaled_dot"`` backend of
  ``jaxfp8.recipes.dot_general``: XLA on CPU fails at run time on some
  transposed (K, N) operands, "Unsupported element type for DotThunk").
  No gradient of its own."""
  if not (isinstance(a, _mx.MXArray) and isinstance(b, _mx.MXArray)):
    raise NotImplementedError("`matmul` with method='scaled_dot' needs two "
                              "MXArray operands")
  if a.ndim not in (2, 3) or a.ndim != b.ndim or a.block_size != b.block_size:
    raise NotImplementedError(
        "`matmul` with method='scaled_dot' needs 2-D or 3-D operands of the "
        f"same rank and block size; got shapes {a.shape}, {b.shape} and "
        f"blocks {a.block_size}, {b.block_size}")
  (ea, sa), (eb, sb) = to_scaled(a), to_scaled(b)
  b_axis = -1 if b_rows else -2
  fa = fb = None
  if a.fmt.name == "mxint8":
    sa, fa = _int8_scale_shift(ea, a.scales, -1)
    sa, fa = lax.bitcast_convert_type(sa, a.fmt.scale.dtype), fa[..., None]
  if b.fmt.name == "mxint8":
    sb, fb = _int8_scale_shift(eb, b.scales, b_axis)
    sb, fb = lax.bitcast_convert_type(sb, b.fmt.scale.dtype), fb[..., None, :]
  k_b = b.ndim + b_axis
  dims = (((a.ndim - 1,), (k_b,)), ((), ()) if a.ndim == 2 else ((0,), (0,)))
  out = lax.scaled_dot(ea, eb, lhs_scale=sa, rhs_scale=sb,
                       dimension_numbers=dims,
                       preferred_element_type=jnp.float32)
  for x, f in ((a, fa), (b, fb)):
    if f is not None:
      out = out * f
    if not x.fmt.power_of_two_scales:
      # Its axes are the operand's leading ones: batch axes (under vmap),
      # and for `a` its rows too; they lead the product's axes as well.
      ts = jnp.asarray(x.tensor_scale)
      out = out * ts.reshape(ts.shape + (1,) * (out.ndim - ts.ndim))
  return out.astype(preferred_element_type)
