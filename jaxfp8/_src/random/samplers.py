"""jax.random's samplers for narrow formats, under jax.random's signatures.

Every function takes the same positional and keyword arguments as its
jax.random namesake, plus keyword-only options of ours:

- ``method``: ``"exact"``, ``"table"`` or ``"cast"`` (None: the default, see
  :func:`set_default_method`);
- ``rounding``: ``"nearest"`` (default) or ``"stochastic"`` (``cast`` only).

A wide ``dtype`` (None, float32, bfloat16, float16) goes straight to
jax.random, unchanged. A narrow one gives a native array of the format, or a
:class:`jaxfp8.CodeArray` for formats the installed XLA can't hold (float6).
"""
from __future__ import annotations

from typing import Any

import jax

from jaxfp8._src import formats
from jaxfp8._src import validate
from jaxfp8._src.random import cast as cast_method
from jaxfp8._src.random import common
from jaxfp8._src.random import config

_ROUNDINGS = ("nearest", "stochastic")
# Methods other than cast, by distribution (filled by the method modules).
_LAW_METHODS: dict[str, dict[str, Any]] = {}


def _resolve_method(method, rounding, dist, scalars, fmt, fn) -> str:
  """The method that will run, or an error for an impossible request."""
  if method is not None:
    validate.check_choice(method, config.METHODS, "method", fn)
  validate.check_choice(rounding, _ROUNDINGS, "rounding", fn)
  chosen = config.get_default_method() if method is None else method
  if chosen == "cast":
    return "cast"
  if rounding != "nearest":
    if method is not None:
      raise ValueError(f"`rounding={rounding!r}` argument to `{fn}` needs "
                       f"method='cast', got method={method!r}")
    return "cast"
  supported = dist in _LAW_METHODS.get(chosen, {})
  if not supported or fmt.name == "float8_e8m0fnu":
    if method is not None:
      raise NotImplementedError(
          f"method={method!r} of `{fn}` is not available for {fmt.name}: "
          f"it needs a closed-form CDF and a signed format; use "
          f"method='cast'")
    return "cast"
  if any(v is None for v in scalars.values()):
    return "cast"  # traced or per-element parameters: documented fallback
  return chosen


def _draw(fn: str, key, shape, fmt: formats.Format, *, params: dict[str, Any],
          static: dict[str, Any] | None = None, method=None,
          rounding="nearest", out_sharding=None):
  """Runs the chosen method; ``params`` are the user's numeric parameters."""
  static = dict(static or {})
  scalars = {k: common.concrete_scalar(v) for k, v in params.items()}
  chosen = _resolve_method(method, rounding, fn, scalars, fmt, fn)
  if chosen == "cast":
    arrays = {k: common.as_float32(v, k, fn) for k, v in params.items()}
    if shape is not None:
      static["shape"] = shape
    out = common.wrap(cast_method.sample(key, fn, fmt, arrays, static,
                                         rounding), fmt)
  else:
    shape = () if shape is None else shape
    out = _LAW_METHODS[chosen][fn](key, shape, fmt, **scalars, **static)
  return common.shard(out, out_sharding)


def _start(fn, key, shape, dtype, *, shape_none_ok=False):
  key = common.check_key(key, fn)
  if shape is not None or not shape_none_ok:
    shape = validate.check_shape(shape, fn)
  return key, shape, common.out_format(dtype, fn)


def uniform(key, shape=(), dtype=None, minval=0., maxval=1., *,
            out_sharding=None, method=None, rounding="nearest"):
  """Uniform samples on [minval, maxval), rounded into ``dtype``.

  Args:
    key: a PRNG key (typed or raw uint32; threefry, rbg or unsafe_rbg).
    shape: the output shape.
    dtype: a narrow format (``jnp.float8_e4m3fn``, ``"e2m1"``...) or a wide
      float (then this is ``jax.random.uniform``).
    minval, maxval: the bounds; ``minval < maxval``. Arrays of any format.
    out_sharding: as in ``jax.random.uniform``.
    method: ``"exact"``, ``"table"`` or ``"cast"``; None for the default.
    rounding: ``"nearest"`` or ``"stochastic"`` (``cast`` only).

  Returns:
    An array of ``dtype`` (a :class:`jaxfp8.CodeArray` for float6): each
    sample is the uniform real draw rounded to nearest-even, saturating.

  Raises:
    TypeError: for a non-key ``key`` or a non-floating ``dtype``.
    ValueError: for ``minval >= maxval``, an unknown ``method`` or
      ``rounding``.

  >>> import jax, jax.numpy as jnp, jaxfp8
  >>> jaxfp8.random.uniform(jax.random.key(0), (4,), jnp.float8_e4m3fn)  # doctest: +SKIP
  Array([0.625, 0.0390625, 0.875, 0.1875], dtype=float8_e4m3fn)
  """
  key, shape, fmt = _start("uniform", key, shape, dtype)
  if fmt is None:
    return jax.random.uniform(key, shape, dtype, minval, maxval,
                              out_sharding=out_sharding)
  common.check_array_less(minval, maxval, "minval", "maxval",
                          "uniform")
  return _draw("uniform", key, shape, fmt,
               params={"minval": minval, "maxval": maxval}, method=method,
               rounding=rounding, out_sharding=out_sharding)


def normal(key, shape=(), dtype=None, *, out_sharding=None, method=None,
           rounding="nearest"):
  """Standard normal samples rounded into ``dtype``.

  Args and returns as :func:`uniform` (no bounds).

  >>> import jax, jax.numpy as jnp, jaxfp8
  >>> jaxfp8.random.normal(jax.random.key(0), (3,), "e5m2")  # doctest: +SKIP
  Array([-0.375, 1.5, 0.0625], dtype=float8_e5m2)
  """
  key, shape, fmt = _start("normal", key, shape, dtype)
  if fmt is None:
    return jax.random.normal(key, shape, dtype, out_sharding=out_sharding)
  return _draw("normal", key, shape, fmt, params={}, method=method,
               rounding=rounding, out_sharding=out_sharding)


def truncated_normal(key, lower, upper, shape=None, dtype=None, *,
                     out_sharding=None, method=None, rounding="nearest"):
  """Standard normal samples truncated to (lower, upper), rounded.

  The rounded value can lie outside (lower, upper) when a bound is not
  representable: the law is that of the real draw, rounded to nearest.

  Args:
    lower, upper: the bounds, ``lower < upper``; shape None broadcasts them.
    Others as :func:`uniform`.

  >>> import jax, jaxfp8
  >>> x = jaxfp8.random.truncated_normal(jax.random.key(0), -2., 2., (1000,),
  ...                                    "e4m3")
  >>> bool((x.astype("float32") <= 2).all())
  True
  """
  fn = "truncated_normal"
  key, shape, fmt = _start(fn, key, shape, dtype, shape_none_ok=True)
  if fmt is None:
    return jax.random.truncated_normal(key, lower, upper, shape, dtype,
                                       out_sharding=out_sharding)
  common.check_array_less(lower, upper, "lower", "upper", fn)
  params = {"lower": lower, "upper": upper}
  return _draw(fn, key, common.broadcast_shape(shape, params, fn), fmt,
               params=params, method=method, rounding=rounding,
               out_sharding=out_sharding)

