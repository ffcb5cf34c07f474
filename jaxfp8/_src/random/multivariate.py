"""jax.random's samplers of vectors and matrices, for narrow formats.

Each draws jax.random's float32 vectors (or matrices) and rounds every
component once (cast): the components keep jax.random's joint law up to the
format's rounding (a Dirichlet sample sums to 1, an orthogonal matrix is
orthogonal, only up to it). Signatures as jax.random's, plus the
keyword-only ``method`` and ``rounding`` of :mod:`continuous`.
"""
from __future__ import annotations

import jax

from jaxfp8._src.numerics import validate
from jaxfp8._src.random import common
from jaxfp8._src.random import draw


def dirichlet(key, alpha, shape=None, dtype=None, *, out_sharding=None,
              method=None, rounding="nearest"):
  """Dirichlet samples (last axis: categories; ``alpha`` > 0), rounded (cast).

  Each sample's components are rounded separately, so they sum to 1 only up
  to the format's rounding.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.dirichlet(jax.random.key(0), jax.numpy.ones(3), (2,), "e4m3")  # doctest: +SKIP
  Array([[0.40625, 0.375, 0.21875], [0.1875, 0.5, 0.3125]], dtype=float8_e4m3fn)
  """
  fn = "dirichlet"
  key = validate.check_key(key, fn)
  fmt, wide = common.out_format(dtype, fn)
  if fmt is None:
    return jax.random.dirichlet(key, alpha, shape, wide,
                                out_sharding=out_sharding)
  static = {} if shape is None else {"shape": validate.check_shape(shape, fn)}
  return draw.run(fn, key, None, fmt, params={"alpha": alpha}, static=static,
                  method=method, rounding=rounding, out_sharding=out_sharding)


def multivariate_normal(key, mean, cov, shape=None, dtype=None,
                        method="cholesky", *, out_sharding=None,
                        rounding="nearest"):
  """Multivariate normal samples, rounded into ``dtype`` (cast).

  ``method`` keeps jax.random's meaning here (``"cholesky"``, ``"eigh"`` or
  ``"svd"``: how ``cov`` is factored); the float32 draw is then rounded
  (``rounding="nearest"`` or ``"stochastic"``).

  >>> import jax, jax.numpy as jnp, jaxfp8
  >>> jaxfp8.random.multivariate_normal(jax.random.key(0), jnp.zeros(2),
  ...                                   jnp.eye(2), (3,), "e4m3").shape
  (3, 2)
  """
  fn = "multivariate_normal"
  key = validate.check_key(key, fn)
  fmt, wide = common.out_format(dtype, fn)
  if fmt is None:
    return jax.random.multivariate_normal(key, mean, cov, shape, wide, method,
                                          out_sharding=out_sharding)
  validate.check_choice(method, ("cholesky", "eigh", "svd"), "method", fn)
  static = {"method": method}
  if shape is not None:
    static["shape"] = validate.check_shape(shape, fn)
  return draw.run(fn, key, None, fmt, params={"mean": mean, "cov": cov},
                  static=static, method="cast", rounding=rounding,
                  out_sharding=out_sharding)


def ball(key, d, p=2, shape=(), dtype=None, *, out_sharding=None, method=None,
         rounding="nearest"):
  """Samples uniform in the unit ``p``-ball of dimension ``d``, rounded (cast).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.ball(jax.random.key(0), 3, shape=(4,), dtype="e4m3").shape
  (4, 3)
  """
  fn = "ball"
  key = validate.check_key(key, fn)
  fmt, wide = common.out_format(dtype, fn)
  shape = validate.check_shape(shape, fn)
  if fmt is None:
    return jax.random.ball(key, d, p, shape, wide, out_sharding=out_sharding)
  return draw.run(fn, key, None, fmt, params={"p": p},
                  static={"d": validate.check_size(d, "d", fn, minimum=1),
                          "shape": shape},
                  method=method, rounding=rounding, out_sharding=out_sharding)


def orthogonal(key, n, shape=(), dtype=None, m=None, *, out_sharding=None,
               method=None, rounding="nearest"):
  """Haar-random orthogonal matrices, computed in float32 and rounded (cast).

  jax.random's own QR does not run in narrow formats; here it runs in
  float32 and only the result is rounded, so the matrices are orthogonal up
  to the format's rounding.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.orthogonal(jax.random.key(0), 4, dtype="e4m3").shape
  (4, 4)
  """
  fn = "orthogonal"
  key = validate.check_key(key, fn)
  fmt, wide = common.out_format(dtype, fn)
  shape = validate.check_shape(shape, fn)
  if fmt is None:
    return jax.random.orthogonal(key, n, shape, wide, m,
                                 out_sharding=out_sharding)
  static = {"n": validate.check_size(n, "n", fn), "shape": shape}
  if m is not None:
    static["m"] = validate.check_size(m, "m", fn)
  return draw.run(fn, key, None, fmt, params={}, static=static,
                  method=method, rounding=rounding, out_sharding=out_sharding)


# The samplers of jax.random's signatures this module defines (re-exported by
# jaxfp8.random; install() routes jax.random's namesakes to them).
__all__ = [
    "ball", "dirichlet", "multivariate_normal", "orthogonal",
]
