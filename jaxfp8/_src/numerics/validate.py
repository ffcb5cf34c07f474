"""Argument checks shared by the public functions: plain Python, before jit."""
from __future__ import annotations

import functools
import operator
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src import compat


def check_array(x: Any, arg: str, fn: str) -> None:
  """Raises TypeError unless ``x`` is an array or a scalar number."""
  from jaxfp8._src.numerics.codes import CodeArray  # pylint: disable=g-import-not-at-top
  if isinstance(x, (jax.Array, np.ndarray, np.generic, int, float, bool,
                    CodeArray)) or hasattr(x, "__jax_array__"):
    return
  raise TypeError(f"`{arg}` argument to `{fn}` must be an array or a scalar, "
                  f"got {type(x).__name__}")


@functools.lru_cache(maxsize=None)
def _raw_key_shape(impl: Any) -> tuple[int, ...]:
  """Trailing shape of a raw key of the default PRNG implementation (``impl``
  is its name, the cache key): (2,) for threefry, (4,) for rbg."""
  del impl
  return tuple(jax.eval_shape(
      lambda: jax.random.key_data(jax.random.key(0))).shape)


def is_typed_key(key: jax.Array | np.ndarray) -> bool:
  """Whether an array is of typed PRNG keys (jax.random.key), not raw uint32."""
  return jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)


def check_key(key: Any, fn: str, arg: str = "key") -> jax.Array:
  """Returns ``key`` if it is a typed PRNG key or a raw uint32 key array."""
  if isinstance(key, (jax.Array, np.ndarray)):
    if is_typed_key(key):
      return key
    if key.dtype == np.uint32 and key.ndim >= 1:
      want = _raw_key_shape(getattr(jax.config, "jax_default_prng_impl", None))
      if tuple(key.shape[-len(want):]) != want:
        raise TypeError(
            f"`{arg}` argument to `{fn}` is a raw uint32 key of shape "
            f"{key.shape}; the default PRNG implementation reads raw keys of "
            f"shape (..., {', '.join(map(str, want))}). Pass a typed key "
            "(jax.random.key) instead")
      return jnp.asarray(key)
  raise TypeError(
      f"`{arg}` argument to `{fn}` must be a PRNG key (jax.random.key or "
      f"jax.random.PRNGKey), got {type(key).__name__}"
      f"{' of dtype ' + str(key.dtype) if hasattr(key, 'dtype') else ''}")


def check_single_key(key: Any, fn: str) -> jax.Array:
  """Like :func:`check_key`, and a ValueError for a batch of keys."""
  key = check_key(key, fn)
  typed = is_typed_key(key)
  if key.ndim != (0 if typed else 1):
    raise ValueError(f"`key` argument to `{fn}` must be a single PRNG key, "
                     f"got a batch of keys of shape {key.shape} (jax.vmap "
                     "over the keys instead)")
  return key


def check_shape(shape: Any, fn: str, arg: str = "shape") -> tuple[int, ...]:
  """Canonicalizes a shape, raising TypeError/ValueError naming ``arg``."""
  if isinstance(shape, (int, np.integer)):
    shape = (shape,)
  try:
    out = tuple(operator.index(d) for d in shape)
  except TypeError as e:
    raise TypeError(f"`{arg}` argument to `{fn}` must be a sequence of "
                    f"integers, got {shape!r}") from e
  if any(d < 0 for d in out):
    raise ValueError(f"`{arg}` argument to `{fn}` must have non-negative "
                     f"sizes, got {out}")
  return out


def check_size(value: Any, arg: str, fn: str, *, minimum: int = 0) -> int:
  """An integer size (a dimension) of at least ``minimum``.

  Raises:
    TypeError: for a non-integer (``2.5`` is not truncated), naming ``arg``.
    ValueError: for a size below ``minimum``.
  """
  if isinstance(value, (bool, np.bool_)):
    raise TypeError(f"`{arg}` argument to `{fn}` must be an integer, got "
                    f"{value!r}")
  try:
    out = operator.index(value)
  except TypeError as e:
    raise TypeError(f"`{arg}` argument to `{fn}` must be an integer, got "
                    f"{value!r}") from e
  if out < minimum:
    raise ValueError(f"`{arg}` argument to `{fn}` must be at least {minimum}, "
                     f"got {out}")
  return out


def check_bool(value: Any, arg: str, fn: str) -> bool:
  """``value`` as a Python bool, or a TypeError naming ``arg`` and ``fn``.

  Only True and False (Python or NumPy) pass: a string such as ``"no"`` is
  truthy, and a traced flag can't choose a code path at trace time.
  """
  if isinstance(value, (bool, np.bool_)):
    return bool(value)
  if isinstance(value, compat.Tracer):
    raise TypeError(f"`{arg}` argument to `{fn}` must be a Python bool, got a "
                    "traced value (it picks the code path at trace time; "
                    "mark it static)")
  raise TypeError(f"`{arg}` argument to `{fn}` must be a bool (True or "
                  f"False), got {value!r}")


def check_choice(value: Any, choices: Sequence[str], arg: str, fn: str) -> str:
  if value not in choices:
    raise ValueError(f"`{arg}` argument to `{fn}` must be one of "
                     f"{', '.join(map(repr, choices))}; got {value!r}")
  return value
