"""Everything that depends on the installed JAX version lives here.

jaxfp8 runs on JAX 0.10 and 0.11. Private JAX entry points are touched only
in this module, each with a fallback, so a JAX upgrade breaks one place.
"""
from __future__ import annotations

import functools

import jax
import numpy as np

JAX_VERSION = tuple(int(p) for p in jax.__version__.split(".")[:3] if p.isdigit())

# The class of traced values (isinstance checks only). jax.core keeps it
# public today; JAX has been moving jax.core's names elsewhere.
try:
  Tracer = jax.core.Tracer
except AttributeError:  # pragma: no cover - a JAX that dropped it
  from jax._src.core import Tracer  # pylint: disable=g-import-not-at-top


def get_constant_handler(type_):
  """Returns JAX's MLIR constant handler for ``type_`` (None if absent)."""
  from jax._src.interpreters import mlir  # pylint: disable=g-import-not-at-top
  return getattr(mlir, "_constant_handlers", {}).get(type_)


def register_constant_handler(type_, handler) -> None:
  from jax.interpreters import mlir  # pylint: disable=g-import-not-at-top
  mlir.register_constant_handler(type_, handler)


def ndarray_constant_types() -> tuple[type, ...]:
  """The array types whose constants JAX lowers with its ndarray handler."""
  types = [np.ndarray]
  try:
    from jax._src import literals  # pylint: disable=g-import-not-at-top
    types.append(literals.TypedNdArray)
  except (ImportError, AttributeError):
    pass
  return tuple(types)


@functools.lru_cache(maxsize=None)
def backend_holds(dtype: np.dtype) -> bool:
  """Whether arrays of ``dtype`` survive a round trip through the backend.

  A failed transfer raises a Python exception (it never aborts), so this probe
  is safe; it is run once per dtype.
  """
  try:
    x = np.zeros((2,), dtype)
    with jax.ensure_compile_time_eval():
      back = np.asarray(jax.device_put(x))
    return back.dtype == x.dtype
  except Exception:  # pylint: disable=broad-except
    return False


def reshard(x, sharding):
  """Places ``x`` on ``sharding``: ``jax.sharding.reshard`` where it exists."""
  fn = getattr(jax.sharding, "reshard", None)
  if fn is not None:
    return fn(x, sharding)
  return jax.lax.with_sharding_constraint(x, sharding)


def x64_enabled() -> bool:
  """Whether 64-bit types are on (``jax_enable_x64``)."""
  return bool(jax.config.read("jax_enable_x64"))
