"""Host values (Python ints, NumPy arrays) onto the device without surprises.

With x64 off, ``jnp.asarray`` wraps 64-bit integers through int32 and
compiles a copy program for every new NumPy shape. :func:`host_float32`
rounds such integers once to float32 on the host instead, and
:func:`device_array` puts NumPy values on the device without compiling.
Narrow values are not this module's: :func:`jaxfp8._src.numerics.codes.as_float32`
decodes them and hands everything else here.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def _int_to_float32(n: int) -> np.float32:
  """A Python int rounded once to float32 (to nearest, ties to even; beyond
  float32's range, +-inf): ``float(n)`` would round twice above 2^53."""
  m = abs(n)
  shift = m.bit_length() - 24
  if shift > 0:
    q, r = divmod(m, 1 << shift)
    half = 1 << (shift - 1)
    if r > half or (r == half and q & 1):
      q += 1
    m = q << shift
  if m.bit_length() > 128:  # at least 2^128: beyond float32's max
    return np.float32(np.inf if n > 0 else -np.inf)
  return np.float32(float(m) if n >= 0 else -float(m))


def host_float32(x: Any) -> Any:
  """``x`` with its integers converted to float32 on the host, rounding once.

  With x64 off, ``jnp.asarray`` wraps 64-bit NumPy integers and large Python
  ints through int32 (2^31 becomes -2^31); here they become the nearest
  float32 instead (NumPy's int64 -> float32 conversion rounds once). Other
  values (floats, jax arrays, narrow arrays) come back unchanged.

  >>> host_float32(np.array([2**40, 2**31], np.int64))
  array([1.0995116e+12, 2.1474836e+09], dtype=float32)
  >>> float(host_float32(2**64 + 2**40 + 1))  # through float64: 2^64
  1.8446746272732807e+19
  """
  if isinstance(x, (bool, np.bool_)):
    return x
  if isinstance(x, int):
    return x if -2**31 <= x < 2**31 else _int_to_float32(x)
  if (isinstance(x, (np.ndarray, np.generic))
      and x.dtype.kind in "iu" and x.dtype.itemsize > 4):
    return np.asarray(x).astype(np.float32)
  return x


def device_array(x: Any) -> jax.Array:
  """``jnp.asarray(x)``, with NumPy values put on the device directly.

  ``jnp.asarray`` of a NumPy array compiles a copy program for every new
  shape (JAX 0.10.2 compiles one per shape); ``jax.device_put`` copies
  without compiling and gives the same dtype (float64 becomes float32 with
  x64 off), bits and weak type.

  >>> device_array(np.array([1.5, -0.0])).dtype
  dtype('float32')
  """
  if isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind in "biuf":
    return jax.device_put(x)
  return jnp.asarray(x)
