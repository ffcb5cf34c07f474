"""Formats the backend can't hold, stored as uint8 codes that carry their format.

XLA has no float6 type, so a float6 array lives on device as a uint8 array of
its bit patterns (low bits of each byte) wrapped in :class:`CodeArray`, a
pytree whose static data is the format. ``values_of_codes`` is the one
decoder of codes into values; ``decode`` turns a CodeArray, or a native
narrow array, back into a wide dtype exactly, and ``as_float32`` turns any
value into float32 (narrow ones decoded, others through
:mod:`jaxfp8._src.numerics.host`). How ``decode`` differentiates lives in
:mod:`jaxfp8._src.numerics.decode_grad`.
"""
from __future__ import annotations

import functools
from typing import Any, Iterator

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src import compat
from jaxfp8._src.numerics import decode_grad
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics.host import device_array
from jaxfp8._src.numerics.host import host_float32


def _is_int(i: Any) -> bool:
  return isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))


def _check_bounds(shape: tuple[int, ...], idx: Any) -> None:
  """IndexError for a concrete integer index outside its axis.

  jnp clamps out-of-range integers (``codes[5]`` of 3 codes is the last),
  which would make a CodeArray iterate forever. Integers index the axes in
  order, or from the last axis back after an Ellipsis; the walk stops at the
  first array or boolean index and leaves the rest to jnp.
  """
  items = idx if isinstance(idx, tuple) else (idx,)
  split = next((k for k, i in enumerate(items) if i is Ellipsis), len(items))
  for seq, axes in ((items[:split], range(len(shape))),
                    (items[split + 1:][::-1], range(len(shape) - 1, -1, -1))):
    axes = iter(axes)
    for item in seq:
      if item is None:
        continue
      if not (_is_int(item) or isinstance(item, slice)):
        break
      axis = next(axes, None)
      if axis is None:
        raise IndexError(f"too many indices for CodeArray of shape {shape}")
      n = shape[axis]
      if _is_int(item) and not -n <= item < n:
        raise IndexError(f"index {int(item)} is out of bounds for axis {axis} "
                         f"with size {n}")


@jax.tree_util.register_pytree_node_class
class CodeArray:
  """An array in a narrow format, stored as uint8 bit patterns.

  Attributes:
    codes: integer array (uint8 as made by jaxfp8); the low ``format.bits``
      bits of each element are the code, higher bits are ignored.
    format: the :class:`jaxfp8.formats.Format` of the values.

  Raises:
    TypeError: if ``codes`` is not an integer array.
    ValueError: if ``fmt`` is not a narrow format.

  >>> import jaxfp8
  >>> y = jaxfp8.encode(jnp.array([0.3, -7.0, 100.0]), "float6_e2m3fn")
  >>> y
  CodeArray(float6_e2m3fn, shape=(3,), values=[0.25 -7 7.5])
  >>> jaxfp8.decode(y)
  Array([ 0.25, -7.  ,  7.5 ], dtype=float32)
  >>> [float(v.astype(jnp.float32)) for v in y]
  [0.25, -7.0, 7.5]
  """

  # `_source` is the float32 array a traced cast started from (see decode);
  # while traced it is a second pytree child, so it crosses jit, vmap and
  # scan boundaries with the codes (decode_grad.source_children).
  __slots__ = ("codes", "format", "_source", "_carried")

  def __init__(self, codes: Any, fmt: formats.FormatLike):
    fmt = formats.get(fmt, arg="fmt", fn="CodeArray")
    if not fmt.narrow:
      raise ValueError(
          f"`fmt` argument to `CodeArray` must be a narrow format "
          f"({', '.join(formats.names(narrow=True))}), got {fmt.name}")
    if not hasattr(codes, "dtype"):
      codes = jnp.asarray(codes)
    if not jnp.issubdtype(codes.dtype, jnp.integer):
      raise TypeError(f"`codes` argument to `CodeArray` must be an integer "
                      f"array of bit patterns, got {codes.dtype}")
    self.codes = codes
    self.format = fmt
    self._source, self._carried = None, False

  def tree_flatten(self):
    return (decode_grad.source_children((self.codes,), self._source,
                                        carried=self._carried),
            self.format.name)

  @classmethod
  def tree_unflatten(cls, name, children):
    obj = object.__new__(cls)
    obj.codes, obj.format = children[0], formats.get(name)
    obj._source = decode_grad.source_from_children(children[1:])
    obj._carried = obj._source is not None  # it crossed in as a child
    return obj

  def _like(self, codes, derive) -> "CodeArray":
    """A CodeArray of ``codes`` whose source is ``derive(self._source)``.

    Eager ``grad`` hands back concrete codes for a cast it traced (their
    tangent is float0), so a CodeArray can outlive the trace of its source;
    a dead source is dropped, never used.
    """
    obj = CodeArray(codes, self.format)
    obj._source = decode_grad.live(derive, self._source)
    obj._carried = self._carried and obj._source is not None
    return obj

  def __reduce__(self):
    # Codes and format only: a traced source never leaves its trace.
    return CodeArray, (self.codes, self.format.name)

  @property
  def shape(self) -> tuple[int, ...]:
    return tuple(self.codes.shape)

  @property
  def ndim(self) -> int:
    return len(self.shape)

  @property
  def size(self) -> int:
    return int(np.prod(self.shape, dtype=np.int64))

  @property
  def dtype(self) -> np.dtype:
    """The logical dtype (the ml_dtypes type of the format)."""
    return self.format.dtype

  @property
  def nbytes(self) -> int:
    """Bytes held on device (one per element: codes are not packed)."""
    return self.size

  def __len__(self) -> int:
    if not self.shape:
      raise TypeError("len() of unsized object (a 0-d CodeArray)")
    return self.shape[0]

  def __iter__(self) -> Iterator["CodeArray"]:
    if not self.shape:
      raise TypeError("iteration over a 0-d CodeArray")
    return (self[i] for i in range(self.shape[0]))

  def __getitem__(self, idx) -> "CodeArray":
    _check_bounds(self.shape, idx)
    return self._like(self.codes[idx], lambda s: s[idx])

  def reshape(self, *shape) -> "CodeArray":
    return self._like(self.codes.reshape(*shape), lambda s: s.reshape(*shape))

  @property
  def T(self) -> "CodeArray":  # pylint: disable=invalid-name
    return self._like(self.codes.T, lambda s: s.T)

  def astype(self, dtype) -> jax.Array:
    """Decodes to ``dtype`` (see :func:`decode`)."""
    return decode(self, dtype)

  def __array__(self, dtype=None, copy=None):
    codes = np.asarray(np.asarray(self.codes).astype(np.int64)
                       & _mask(self.format), np.uint8)
    out = codes.view(self.format.dtype)
    return out if dtype is None else out.astype(dtype)

  def __jax_array__(self) -> jax.Array:
    # jnp.asarray would otherwise take __array__'s float6 NumPy array to XLA,
    # which has no such type ("Invalid XLA PrimitiveType").
    if not self.format.native:
      raise TypeError(
          f"a CodeArray of {self.format.name} can't become a jax.Array: the "
          f"installed XLA has no {self.format.name} type; use "
          "jaxfp8.decode(x) for its values (float32) or x.codes for its "
          "uint8 codes")
    return lax.bitcast_convert_type(
        jnp.asarray(self.codes, jnp.uint8) & np.uint8(_mask(self.format)),
        self.format.dtype)

  def __repr__(self) -> str:
    try:
      vals = np.array2string(np.asarray(self), threshold=8)
    except Exception:  # pylint: disable=broad-except  (a tracer)
      vals = "traced"
    return f"CodeArray({self.format.name}, shape={self.shape}, values={vals})"


def _mask(fmt: formats.Format) -> int:
  return (1 << fmt.bits) - 1


def values_of_codes(codes: jax.Array, fmt: formats.FormatLike,
                    dtype: Any = jnp.float32) -> jax.Array:
  """The one decoder of codes into values: the exact values of ``codes``.

  Bits above ``fmt.bits`` are ignored. 8-bit formats are bitcast; narrower
  ones (float6, float4: no NaN, no Inf) are assembled from their exponent and
  mantissa fields in integer arithmetic, exact under XLA's flushing of
  float32 subnormals. ``dtype`` is float32 (default) or any wider dtype.

  >>> values_of_codes(jnp.array([8, 2, 31, 63], jnp.uint8), "e2m3")
  Array([ 1.  ,  0.25,  7.5 , -7.5 ], dtype=float32)
  """
  fmt = formats.get(fmt)
  # One jitted program: eager callers (tests, host code) compile it once per
  # shape, format and dtype instead of once per op (9 ops for float4).
  return _values_of_codes(codes, fmt_name=fmt.name, dtype=np.dtype(dtype))


@functools.partial(jax.jit, static_argnames=("fmt_name", "dtype"))
def _values_of_codes(codes, *, fmt_name: str, dtype: np.dtype) -> jax.Array:
  fmt = formats.get(fmt_name)
  c = codes.astype(jnp.uint32) & np.uint32(_mask(fmt))
  if fmt.bits == 8:
    return lax.bitcast_convert_type(c.astype(jnp.uint8),
                                    fmt.dtype).astype(dtype)
  if fmt.bits > 8 or fmt.has_nan or fmt.has_inf:
    table = jnp.asarray(fmt.code_table)
    return table[c.astype(jnp.int32)].astype(dtype)
  m = fmt.mantissa_bits
  big_e = (c >> m) & np.uint32(2**fmt.exponent_bits - 1)
  mant = c & np.uint32(2**m - 1)
  normal = ((big_e + np.uint32(127 - fmt.bias)) << 23) | (mant << (23 - m))
  sub = lax.bitcast_convert_type(
      mant.astype(jnp.float32) * np.float32(fmt.min_subnormal), jnp.uint32)
  mag = jnp.where(big_e == 0, sub, normal)
  sign = (c >> (fmt.bits - 1)) << 31
  return lax.bitcast_convert_type(mag | sign, jnp.float32).astype(dtype)


def from_codes(codes: jax.Array, fmt: formats.FormatLike) -> Any:
  """uint8 codes as the format's own storage: a native array or a CodeArray.

  >>> from_codes(jnp.array([2, 9], jnp.uint8), "e2m1")
  Array([1, -0.5], dtype=float4_e2m1fn)
  """
  fmt = formats.get(fmt)
  if not fmt.native:
    return CodeArray(codes, fmt)
  if fmt.bits == 8:
    return lax.bitcast_convert_type(codes.astype(jnp.uint8), fmt.dtype)
  # XLA on CPU can't bitcast uint8 to float4 (it splits the byte): gather
  # the values in float32 and convert, exactly (each is in the format). The
  # table stays float32 because a float6 constant under jit aborts the
  # process on JAX 0.11.2 too, where float6 is a native dtype.
  table = jnp.asarray(fmt.code_table.astype(np.float32))
  return table[codes.astype(jnp.int32) & _mask(fmt)].astype(fmt.dtype)


def remember_source(out: Any, source: Any) -> Any:
  """Marks ``out``, the cast of the float32 ``source``, for :func:`decode`.

  A CodeArray holds a traced source in ``_source``; a native array is
  recorded by :func:`decode_grad.remember` (a tracer takes no attributes).
  """
  if not isinstance(source, compat.Tracer):
    return out  # concrete: nothing will differentiate it
  if isinstance(out, CodeArray):
    out._source = source  # pylint: disable=protected-access
    return out
  return decode_grad.remember(out, source)


def _source_of(x: Any) -> Any:
  if isinstance(x, CodeArray):
    return x._source  # pylint: disable=protected-access
  return decode_grad.source_of(x)


def _result_dtype(dtype: Any) -> np.dtype:
  """``decode``'s wide result dtype: a registered wide format or float64."""
  if not isinstance(dtype, formats.Format):
    try:  # float64 (a dtype, or its names "float64" / "f64")
      if dtype in ("f64",) or np.dtype(dtype) == np.float64:
        return np.dtype(np.float64)
    except (TypeError, ValueError):
      pass
  fmt = formats.get(dtype, arg="dtype", fn="decode")
  if fmt.narrow:
    raise TypeError(
        f"`dtype` argument to `decode` must be a wide format (bfloat16, "
        f"float16, float32) or float64, got {fmt.name}; use jaxfp8.cast or "
        f"jaxfp8.encode to round into a narrow format")
  return fmt.dtype


def decode(x: Any, dtype: Any = jnp.float32) -> jax.Array:
  """Converts a narrow-format array to a wide dtype, exactly.

  Gradients: ``decode(cast(x, fmt))`` (or of :func:`jaxfp8.encode`, or of a
  CodeArray result indexed, reshaped or transposed) differentiates as the
  identity in ``x``, in ``x``'s precision, whatever the format: the gradient
  goes around the narrow array. Through any other narrow array the tangent
  is held in the narrow format, as JAX holds it (rounded to nearest;
  overflow is NaN or Inf as XLA's convert gives), and a CodeArray that did
  not come from a cast in the same trace (a ``jit`` or ``scan`` boundary lies
  between) carries no gradient.

  Args:
    x: a :class:`CodeArray`, or a JAX/NumPy array of a narrow format
      (``float8_*``, ``float4_e2m1fn``...). Wide arrays pass through ``astype``.
    dtype: the wide result dtype: ``bfloat16``, ``float16``, ``float32``
      (the default; a name, alias, dtype or Format) or a float64 dtype.
      bfloat16 and float16 round values they can't hold, like any cast.

  Returns:
    A ``jax.Array`` of ``dtype``.

  Raises:
    TypeError: for a non-array ``x``, or a ``dtype`` that is not a wide
      floating format (a narrow one, an integer type).
    ValueError: for an unknown format name.

  >>> import jaxfp8
  >>> decode(jnp.array([1.5, 500.0]).astype(jnp.float8_e4m3fn))
  Array([1.5, nan], dtype=float32)
  >>> decode(jnp.array([1.5]).astype(jnp.float8_e4m3fn), "bf16")
  Array([1.5], dtype=bfloat16)
  """
  dtype = _result_dtype(dtype)
  source = _source_of(x)
  if isinstance(x, CodeArray):
    values = values_of_codes(x.codes, x.format, dtype)
  elif not hasattr(x, "dtype"):
    raise TypeError(f"`x` argument to `decode` must be an array or CodeArray, "
                    f"got {type(x).__name__}")
  elif (isinstance(x, np.ndarray) and formats.is_narrow(x.dtype)
        and not formats.get(x.dtype).native):
    return decode(encode_numpy(x), dtype)
  elif not (formats.is_narrow(x.dtype)
            or jnp.issubdtype(x.dtype, jnp.floating)
            or jnp.issubdtype(x.dtype, jnp.integer)
            or jnp.issubdtype(x.dtype, jnp.bool_)):
    raise TypeError(f"`x` argument to `decode` must be an array of real "
                    f"numbers (a narrow format, a float, integer or bool "
                    f"type) or a CodeArray, got an array of dtype {x.dtype}")
  else:
    values = jnp.asarray(x).astype(dtype)
  out = decode_grad.live(
      lambda s: decode_grad.straight_through(s, lax.stop_gradient(values)),
      source)
  return values if out is None else out


def as_float32(x: Any) -> jax.Array:
  """``x`` as a float32 jax.Array; narrow values (CodeArrays, native narrow
  arrays, NumPy arrays of formats XLA can't hold) are decoded exactly, and
  64-bit integers are rounded once on the host (:func:`host_float32`)."""
  if isinstance(x, CodeArray) or formats.is_narrow(getattr(x, "dtype", None)):
    return decode(x, jnp.float32)
  return device_array(host_float32(x)).astype(jnp.float32)


def encode_numpy(x: np.ndarray) -> CodeArray:
  """Wraps a NumPy array of a narrow dtype (float6 say) as a CodeArray."""
  fmt = formats.get(x.dtype)
  return CodeArray(jnp.asarray(np.ascontiguousarray(x).view(np.uint8)), fmt)
