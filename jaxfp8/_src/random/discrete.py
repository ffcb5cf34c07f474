"""jax.random's discrete samplers: booleans, signs, counts and indices.

``bernoulli`` and ``rademacher`` are exact for any parameters (integer
comparisons on random bits); ``binomial`` and ``multinomial`` draw float32
counts with jax.random and round them (cast); ``categorical`` returns integer
indices and only decodes narrow ``logits``. Signatures as jax.random's, plus
the keyword-only ``method`` and ``rounding`` of :mod:`continuous`.
"""
from __future__ import annotations

import jax

from jaxfp8._src.numerics import rounding as rounding_lib
from jaxfp8._src.numerics import validate
from jaxfp8._src.random import cast_method
from jaxfp8._src.random import common
from jaxfp8._src.random import config
from jaxfp8._src.random import draw
from jaxfp8._src.random import exact_method
from jaxfp8._src.random import table_method


def bernoulli(key, p=0.5, shape=None, mode="low", *, out_sharding=None,
              method=None, table_bits=None):
  """Booleans that are True with probability ``p`` (any format, any shape).

  ``exact`` (the default) compares 32 random bits with ``round(p * 2^32)``
  element by element, so ``P(True)`` is within ``2^-33`` of ``p`` -- exactly
  ``p`` when ``p`` is a multiple of ``2^-32``, as every fp8/fp6/fp4 value in
  [0, 1] is -- for traced and per-element ``p`` too. ``table`` uses
  ``table_bits`` bits (16 by default; ``p`` rounded to that resolution);
  ``cast`` is ``jax.random.bernoulli`` on ``p`` as float32 (``mode`` as
  there).

  >>> import jax, jax.numpy as jnp, jaxfp8
  >>> p = jnp.array([0.0, 0.25, 1.0], jnp.float8_e4m3fn)
  >>> jaxfp8.random.bernoulli(jax.random.key(0), p)  # doctest: +SKIP
  Array([False, False,  True], dtype=bool)
  """
  fn = "bernoulli"
  key = validate.check_single_key(key, fn)
  validate.check_choice(mode, ("high", "low"), "mode", fn)
  if shape is not None:
    shape = validate.check_shape(shape, fn)
  p32 = rounding_lib.to_float32(p, fn=fn, arg="p")
  common.check_params(fn, {"p": p})
  if method is not None:
    validate.check_choice(method, config.METHODS, "method", fn)
  chosen = config.get_default_method() if method is None else method
  if chosen == "cast":
    out = jax.random.bernoulli(key, p32, shape, mode)
  else:
    bits = 32 if chosen == "exact" else table_method.check_bits(
        table_bits or table_method.DEFAULT_BITS, fn)
    shape = jax.numpy.shape(p32) if shape is None else shape
    out = exact_method.bernoulli(key, p32, shape, bits)
  return common.shard(out, out_sharding)


def rademacher(key, shape=(), dtype=None, *, out_sharding=None, method=None):
  """-1 or +1 with probability 1/2 each, in any dtype (integer by default).

  For a narrow ``dtype`` the ``exact`` and ``table`` methods spend one random
  bit per sample (32 samples per word); ``cast`` is jax.random's float32
  rademacher rounded (32 bits per sample, same values).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.rademacher(jax.random.key(0), (4,), "e2m1")  # doctest: +SKIP
  Array([1, -1, -1, 1], dtype=float4_e2m1fn)
  """
  fn = "rademacher"
  key = validate.check_key(key, fn)
  shape = validate.check_shape(shape, fn)
  try:
    fmt, wide = common.out_format(dtype, fn)
  except TypeError:
    fmt, wide = None, dtype  # integer dtypes are jax.random's business
  if fmt is None:
    return jax.random.rademacher(key, shape, wide, out_sharding=out_sharding)
  key = validate.check_single_key(key, fn)
  draw.check_sign(fn, fmt, {})
  if method is not None:
    validate.check_choice(method, config.METHODS, "method", fn)
  chosen = config.get_default_method() if method is None else method
  if chosen == "cast":
    out = common.wrap(cast_method.sample(key, fn, fmt, {}, {"shape": shape}),
                      fmt)
  else:
    out = exact_method.rademacher(key, shape, fmt)
  return common.shard(out, out_sharding)


def binomial(key, n, p, shape=None, dtype=None, *, method=None,
             rounding="nearest"):
  """Binomial counts (``n`` >= 0 trials, success probability ``p``), rounded.

  Counts above the format's integers round to nearest (cast).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.binomial(jax.random.key(0), 10.0, 0.3, (3,), "e4m3")  # doctest: +SKIP
  Array([3, 2, 4], dtype=float8_e4m3fn)
  """
  fn = "binomial"
  params = {"n": n, "p": p}
  key, shape, fmt, wide = draw.start(fn, key, shape, dtype, params)
  if fmt is None:
    return jax.random.binomial(key, n, p, shape, wide)
  return draw.run(fn, key, common.broadcast_shape(shape, params, fn), fmt,
                  params=params, method=method, rounding=rounding)


def multinomial(key, n, p, *, shape=None, dtype=None, unroll=1, method=None,
                rounding="nearest"):
  """Multinomial counts of ``n`` trials over the categories of ``p`` (last
  axis), rounded into ``dtype`` (cast).

  Counts are integers, rounded like any value: exact up to the format's
  largest consecutive integer (16 in float8_e4m3fn, 8 in float8_e5m2).

  >>> import jax, jax.numpy as jnp, jaxfp8
  >>> c = jaxfp8.random.multinomial(jax.random.key(0), 10., jnp.ones(3) / 3,
  ...                               dtype="e4m3")
  >>> float(c.astype(jnp.float32).sum())
  10.0
  """
  fn = "multinomial"
  key = validate.check_key(key, fn)
  fmt, wide = common.out_format(dtype, fn)
  if fmt is None:
    return jax.random.multinomial(key, n, p, shape=shape, dtype=wide,
                                  unroll=unroll)
  static = {"unroll": unroll}
  if shape is not None:
    static["shape"] = validate.check_shape(shape, fn)
  return draw.run(fn, key, None, fmt, params={"n": n, "p": p}, static=static,
                  method=method, rounding=rounding)


def categorical(key, logits, axis=-1, shape=None, replace=True, mode=None, *,
                out_sharding=None):
  """jax.random.categorical, with ``logits`` in any format (narrow included).

  Narrow logits (native arrays or :class:`jaxfp8.CodeArray`) are decoded to
  float32 exactly; the result is integer indices, as in jax.random.

  >>> import jax, jax.numpy as jnp, jaxfp8
  >>> logits = jnp.array([0., 1., -448.], jnp.float8_e4m3fn)
  >>> int(jaxfp8.random.categorical(jax.random.key(0), logits, shape=(1000,)).max())
  1
  """
  fn = "categorical"
  key = validate.check_key(key, fn)
  logits = rounding_lib.to_float32(logits, fn=fn, arg="logits")
  if shape is not None:
    shape = validate.check_shape(shape, fn)
  return jax.random.categorical(key, logits, axis, shape, replace, mode,
                                out_sharding=out_sharding)


# The samplers of jax.random's signatures this module defines (re-exported by
# jaxfp8.random; install() routes jax.random's namesakes to them).
__all__ = [
    "bernoulli", "binomial", "categorical", "multinomial", "rademacher",
]
