"""Formats the backend can't hold, stored as uint8 codes that carry their format.

XLA has no float6 type, so a float6 array lives on device as a uint8 array of
its bit patterns (low bits of each byte) wrapped in :class:`CodeArray`, a
pytree whose static data is the format. ``decode`` turns such an array, or a
native narrow array, back into a wide dtype exactly.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src import formats


@jax.tree_util.register_pytree_node_class
class CodeArray:
  """An array in a narrow format, stored as uint8 bit patterns.

  Attributes:
    codes: uint8 array; the low ``format.bits`` bits of each byte are the code.
    format: the :class:`jaxfp8.formats.Format` of the values.

  >>> import jaxfp8
  >>> y = jaxfp8.encode(jnp.array([0.3, -7.0, 100.0]), "float6_e2m3fn")
  >>> y
  CodeArray(float6_e2m3fn, shape=(3,), values=[0.25 -7 7.5])
  >>> jaxfp8.decode(y)
  Array([ 0.25, -7.  ,  7.5 ], dtype=float32)
  """

  __slots__ = ("codes", "format")

  def __init__(self, codes: Any, fmt: formats.FormatLike):
    self.codes = codes
    self.format = formats.get(fmt)

  def tree_flatten(self):
    return (self.codes,), self.format.name

  @classmethod
  def tree_unflatten(cls, name, children):
    obj = object.__new__(cls)
    obj.codes, obj.format = children[0], formats.get(name)
    return obj

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
    return self.shape[0]

  def __getitem__(self, idx) -> "CodeArray":
    return CodeArray(self.codes[idx], self.format)

  def reshape(self, *shape) -> "CodeArray":
    return CodeArray(self.codes.reshape(*shape), self.format)

  @property
  def T(self) -> "CodeArray":  # pylint: disable=invalid-name
    return CodeArray(self.codes.T, self.format)

  def astype(self, dtype) -> jax.Array:
    """Decodes to ``dtype`` (see :func:`decode`)."""
    return decode(self, dtype)

  def __array__(self, dtype=None, copy=None):
    out = np.asarray(self.codes).astype(np.uint8).view(self.format.dtype)
    return out if dtype is None else out.astype(dtype)

  def __repr__(self) -> str:
    try:
      vals = np.array2string(np.asarray(self), threshold=8)
    except Exception:  # pylint: disable=broad-except  (a tracer)
      vals = "traced"
    return f"CodeArray({self.format.name}, shape={self.shape}, values={vals})"


def decode(x: Any, dtype: Any = jnp.float32) -> jax.Array:
  """Converts a narrow-format array to a wide dtype, exactly.

  Args:
    x: a :class:`CodeArray`, or a JAX/NumPy array of a narrow format
      (``float8_*``, ``float4_e2m1fn``...). Wide arrays pass through ``astype``.
    dtype: the wide result dtype (float32 by default; bfloat16 and float16
      round values they can't hold, like any cast).

  Returns:
    A ``jax.Array`` of ``dtype``.

  >>> import jaxfp8
  >>> decode(jnp.array([1.5, 500.0]).astype(jnp.float8_e4m3fn))
  Array([1.5, nan], dtype=float32)
  """
  dtype = np.dtype(dtype)
  if isinstance(x, CodeArray):
    table = jnp.asarray(x.format.code_table)
    return table[x.codes.astype(jnp.int32)].astype(dtype)
  if not hasattr(x, "dtype"):
    raise TypeError(f"`x` argument to `decode` must be an array or CodeArray, "
                    f"got {type(x).__name__}")
  if isinstance(x, np.ndarray) and formats.is_narrow(x.dtype):
    if not formats.get(x.dtype).native:
      return decode(encode_numpy(x), dtype)
  return jnp.asarray(x).astype(dtype)


def encode_numpy(x: np.ndarray) -> CodeArray:
  """Wraps a NumPy array of a narrow dtype (float6 say) as a CodeArray."""
  fmt = formats.get(x.dtype)
  return CodeArray(jnp.asarray(np.ascontiguousarray(x).view(np.uint8)), fmt)
