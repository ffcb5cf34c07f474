"""jax.random's continuous scalar samplers, for narrow formats.

Every function takes the same positional and keyword arguments as its
jax.random namesake, plus keyword-only options of ours:

- ``method``: ``"exact"``, ``"table"`` or ``"cast"`` (None: the default, see
  :func:`jaxfp8.random.set_default_method`); gamma, beta, chisquare and
  loggamma also take ``"approximate"`` where the installed jax.random's do
  (JAX >= 0.11): its loop-free float32 draw, rounded (``cast``);
- ``rounding``: ``"nearest"`` (default) or ``"stochastic"`` (``cast`` only);
- ``table_bits``: the resolution ``2^-table_bits`` of the ``table`` method
  (default 16).

The first parts hold the laws with a CDF (uniform, normal, ...: closed
forms; gamma, beta, chisquare, t, generalized_normal: scipy.special's): all
three methods; the last those without one (loggamma, f, wald: ``cast``
only). Discrete samplers are in ``discrete``, vectors and matrices
in ``multivariate``; how a method is chosen is in ``draw``.

A wide ``dtype`` (None, float32, bfloat16, float16, float64, by any name or
alias) goes straight to jax.random, unchanged. A narrow one gives a native
array of the format, or a :class:`jaxfp8.CodeArray` for formats the installed
XLA can't hold (float6).
"""
from __future__ import annotations

from typing import Any, Callable

import jax

from jaxfp8._src import compat
from jaxfp8._src.numerics import validate
from jaxfp8._src.random import common
from jaxfp8._src.random import config
from jaxfp8._src.random import draw


def _sample(fn: str, key, shape, dtype, params: dict[str, Any],
            jax_call: Callable, *, broadcasts=True, static=None,
            out_sharding=None, method=None, rounding="nearest",
            table_bits=None):
  """The body of every sampler here: checks, then jax.random or ours.

  ``jax_call(key, shape, dtype)`` runs jax.random itself for a wide dtype.
  With ``broadcasts`` a ``shape`` of None is the broadcast shape of the
  parameters (as in jax.random); otherwise a shape is required. ``static``:
  jax.random's non-numeric arguments for the cast method's float32 draw.
  """
  key, shape, fmt, wide = draw.start(fn, key, shape, dtype,
                                     params if broadcasts else None)
  if fmt is None:
    return jax_call(key, shape, wide)
  return draw.run(fn, key, common.broadcast_shape(shape, params, fn), fmt,
                  params=params, static=static, method=method,
                  rounding=rounding, table_bits=table_bits,
                  out_sharding=out_sharding)


def _jax_method(fn: str, method: Any) -> tuple[Any, dict[str, str]]:
  """``(our method, jax.random's own arguments)`` for ``fn``'s ``method``.

  Where the installed jax.random's ``fn`` has a ``method`` of its own
  (:func:`compat.jax_sampler_methods`: ``"exact"`` or ``"approximate"``),
  ``"approximate"`` is its loop-free float32 draw, rounded (``cast``). Every
  other value is ours; our float32 draws are jax.random's default (its
  ``"exact"`` rejection sampler).
  """
  if (isinstance(method, str) and method not in config.METHODS
      and method in compat.jax_sampler_methods(fn)):
    return "cast", {"method": method}
  return method, {}


# -- laws with a closed-form CDF: exact, table and cast ------------------------

def uniform(key, shape=(), dtype=None, minval=0., maxval=1., *,
            out_sharding=None, method=None, rounding="nearest",
            table_bits=None):
  """Uniform samples on [minval, maxval), rounded into ``dtype``.

  Args:
    key: a PRNG key (typed or raw uint32; threefry, rbg or unsafe_rbg).
    shape: the output shape.
    dtype: a narrow format (``jnp.float8_e4m3fn``, ``"e2m1"``...) or a wide
      float (then this is ``jax.random.uniform``).
    minval, maxval: the bounds, ``minval < maxval``; arrays of any format.
    out_sharding: as in ``jax.random.uniform``.
    method: ``"exact"``, ``"table"`` or ``"cast"``; None for the default.
    rounding: ``"nearest"`` or ``"stochastic"`` (``cast`` only).
    table_bits: resolution of the ``table`` method (``2^-table_bits``).

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
  return _sample(
      "uniform", key, shape, dtype, {"minval": minval, "maxval": maxval},
      lambda k, s, d: jax.random.uniform(k, s, d, minval, maxval,
                                         out_sharding=out_sharding),
      broadcasts=False, out_sharding=out_sharding, method=method,
      rounding=rounding, table_bits=table_bits)


def _standard(fn: str, doc: str):
  """A parameterless sampler ``fn(key, shape=(), dtype=None, ...)``."""
  jax_fn = getattr(jax.random, fn)

  def sampler(key, shape=(), dtype=None, *, out_sharding=None, method=None,
              rounding="nearest", table_bits=None):
    return _sample(
        fn, key, shape, dtype, {},
        lambda k, s, d: jax_fn(k, s, d, out_sharding=out_sharding),
        broadcasts=False, out_sharding=out_sharding, method=method,
        rounding=rounding, table_bits=table_bits)

  sampler.__name__ = sampler.__qualname__ = fn
  sampler.__doc__ = f"""{doc}, rounded into ``dtype``.

  Same arguments as ``jax.random.{fn}``, plus ``method``, ``rounding`` and
  ``table_bits`` (see :func:`uniform`).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.{fn}(jax.random.key(0), (3,), "e5m2")  # doctest: +SKIP
  Array([-0.375, 1.5, 0.0625], dtype=float8_e5m2)
  """
  return sampler


def normal(key, shape=(), dtype=None, *, mode=None, out_sharding=None,
           method=None, rounding="nearest", table_bits=None):
  """Standard normal samples, rounded into ``dtype``.

  Same arguments as ``jax.random.normal`` (``mode``: JAX >= 0.12.1's, for
  wide dtypes and the cast method's float32 draw; the exact and table
  samplers are exact whatever it is), plus ``method``, ``rounding`` and
  ``table_bits`` (see :func:`uniform`).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.normal(jax.random.key(0), (3,), "e5m2")  # doctest: +SKIP
  Array([-0.375, 1.5, 0.0625], dtype=float8_e5m2)
  """
  twin = compat.jax_random_mode("normal", mode)
  return _sample(
      "normal", key, shape, dtype, {},
      lambda k, s, d: jax.random.normal(k, s, d, out_sharding=out_sharding,
                                        **twin),
      broadcasts=False, static=twin, out_sharding=out_sharding,
      method=method, rounding=rounding, table_bits=table_bits)


laplace = _standard("laplace", "Standard Laplace samples")
logistic = _standard("logistic", "Standard logistic samples")
exponential = _standard("exponential", "Standard exponential samples")
cauchy = _standard("cauchy", "Standard Cauchy samples")
maxwell = _standard("maxwell", "Maxwell (chi, 3 degrees of freedom) samples")


def gumbel(key, shape=(), dtype=None, mode=None, *, out_sharding=None,
           method=None, rounding="nearest", table_bits=None):
  """Standard Gumbel samples, rounded into ``dtype``.

  ``mode`` ("low", "high", "highest") is jax.random's float32 precision mode,
  used by ``method="cast"``; ``exact`` and ``table`` sample the exact law.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.gumbel(jax.random.key(0), (3,), "e4m3")  # doctest: +SKIP
  Array([0.5, -0.3125, 1.75], dtype=float8_e4m3fn)
  """
  key, shape, fmt, wide = draw.start("gumbel", key, shape, dtype)
  if fmt is None:
    return jax.random.gumbel(key, shape, wide, mode,
                             out_sharding=out_sharding)
  if mode is not None:
    validate.check_choice(mode, ("highest", "high", "low"), "mode", "gumbel")
  return draw.run("gumbel", key, shape, fmt, params={},
                  static={"mode": mode}, method=method, rounding=rounding,
                  table_bits=table_bits, out_sharding=out_sharding)


def truncated_normal(key, lower, upper, shape=None, dtype=None, *,
                     mode="low", out_sharding=None, method=None,
                     rounding="nearest", table_bits=None):
  """Standard normal samples truncated to (lower, upper), rounded.

  The rounded value can lie outside (lower, upper) when a bound is not
  representable: the law is that of the real draw, rounded to nearest.

  Args:
    lower, upper: the bounds, ``lower < upper``; shape None broadcasts them.
    mode: as :func:`normal`'s.
    Others as :func:`uniform`.

  >>> import jax, jaxfp8
  >>> x = jaxfp8.random.truncated_normal(jax.random.key(0), -2., 2., (1000,),
  ...                                    "e4m3")
  >>> bool((x.astype("float32") <= 2).all())
  True
  """
  twin = compat.jax_random_mode("truncated_normal", mode)
  return _sample(
      "truncated_normal", key, shape, dtype, {"lower": lower, "upper": upper},
      lambda k, s, d: jax.random.truncated_normal(
          k, lower, upper, s, d, out_sharding=out_sharding, **twin),
      static=twin, out_sharding=out_sharding, method=method,
      rounding=rounding, table_bits=table_bits)


def lognormal(key, sigma=1.0, shape=None, dtype=None, *, out_sharding=None,
              method=None, rounding="nearest", table_bits=None):
  """Log-normal samples ``exp(sigma * N)``, rounded into ``dtype``.

  ``sigma`` must be positive; other arguments as :func:`uniform`.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.lognormal(jax.random.key(0), 0.5, (3,), "e4m3")  # doctest: +SKIP
  Array([0.8125, 2, 1.0625], dtype=float8_e4m3fn)
  """
  return _sample(
      "lognormal", key, shape, dtype, {"sigma": sigma},
      lambda k, s, d: jax.random.lognormal(k, sigma, s, d,
                                           out_sharding=out_sharding),
      out_sharding=out_sharding, method=method, rounding=rounding,
      table_bits=table_bits)


def rayleigh(key, scale, shape=None, dtype=None, *, out_sharding=None,
             method=None, rounding="nearest", table_bits=None):
  """Rayleigh samples of scale ``scale`` (> 0), rounded into ``dtype``.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.rayleigh(jax.random.key(0), 1.0, (3,), "e4m3")  # doctest: +SKIP
  Array([0.8125, 2, 1.0625], dtype=float8_e4m3fn)
  """
  return _sample(
      "rayleigh", key, shape, dtype, {"scale": scale},
      lambda k, s, d: jax.random.rayleigh(k, scale, s, d,
                                          out_sharding=out_sharding),
      out_sharding=out_sharding, method=method, rounding=rounding,
      table_bits=table_bits)


def pareto(key, b, shape=None, dtype=None, *, out_sharding=None, method=None,
           rounding="nearest", table_bits=None):
  """Pareto samples (support [1, inf)) of shape ``b`` (> 0), rounded.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.pareto(jax.random.key(0), 3.0, (3,), "e4m3")  # doctest: +SKIP
  Array([1.125, 1, 1.5], dtype=float8_e4m3fn)
  """
  return _sample(
      "pareto", key, shape, dtype, {"b": b},
      lambda k, s, d: jax.random.pareto(k, b, s, d,
                                        out_sharding=out_sharding),
      out_sharding=out_sharding, method=method, rounding=rounding,
      table_bits=table_bits)


def double_sided_maxwell(key, loc, scale, shape=(), dtype=None, *,
                         method=None, rounding="nearest", table_bits=None):
  """Double-sided Maxwell samples ``loc +- scale * maxwell``, rounded.

  ``scale`` must be positive. Like jax.random's, ``shape`` must be given
  (it does not broadcast the parameters).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.double_sided_maxwell(jax.random.key(0), 0., 1., (3,),
  ...                                    "e4m3")  # doctest: +SKIP
  Array([-1.5, 2, 0.875], dtype=float8_e4m3fn)
  """
  shape = validate.check_shape(shape, "double_sided_maxwell")
  return _sample(
      "double_sided_maxwell", key, shape, dtype, {"loc": loc, "scale": scale},
      lambda k, s, d: jax.random.double_sided_maxwell(k, loc, scale, s, d),
      method=method, rounding=rounding, table_bits=table_bits)


def weibull_min(key, scale, concentration, shape=(), dtype=None, *,
                method=None, rounding="nearest", table_bits=None):
  """Weibull samples of ``scale`` and ``concentration`` (both > 0), rounded.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.weibull_min(jax.random.key(0), 1., 2., (3,), "e4m3")  # doctest: +SKIP
  Array([0.625, 1.25, 0.4375], dtype=float8_e4m3fn)
  """
  shape = validate.check_shape(shape, "weibull_min")
  return _sample(
      "weibull_min", key, shape, dtype,
      {"scale": scale, "concentration": concentration},
      lambda k, s, d: jax.random.weibull_min(k, scale, concentration, s, d),
      method=method, rounding=rounding, table_bits=table_bits)


def triangular(key, left, mode, right, shape=None, dtype=None, *,
               out_sharding=None, method=None, rounding="nearest",
               table_bits=None):
  """Triangular samples on [left, right] peaking at ``mode``, rounded.

  Needs ``left <= mode <= right`` and ``left < right``.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.triangular(jax.random.key(0), -1., 0., 2., (3,), "e4m3")  # doctest: +SKIP
  Array([0.25, -0.4375, 1.125], dtype=float8_e4m3fn)
  """
  return _sample(
      "triangular", key, shape, dtype,
      {"left": left, "mode": mode, "right": right},
      lambda k, s, d: jax.random.triangular(k, left, mode, right, s, d,
                                            out_sharding=out_sharding),
      out_sharding=out_sharding, method=method, rounding=rounding,
      table_bits=table_bits)


# -- laws whose CDF is scipy.special's: exact, table and cast ------------------

def generalized_normal(key, p, shape=(), dtype=None, *, out_sharding=None,
                       method=None, rounding="nearest", table_bits=None):
  """Generalized normal samples (density ~ exp(-|x|^p)), rounded.

  ``p`` must be positive (1: Laplace, 2: normal of variance 1/2); the law's
  CDF is the incomplete gamma function of ``|x|^p``. Like jax.random's,
  ``shape`` does not broadcast ``p``. Other arguments as :func:`uniform`.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.generalized_normal(jax.random.key(0), 1.5, (3,), "e4m3")  # doctest: +SKIP
  Array([0.3125, -1, 0.5], dtype=float8_e4m3fn)
  """
  shape = validate.check_shape(shape, "generalized_normal")
  return _sample(
      "generalized_normal", key, shape, dtype, {"p": p},
      lambda k, s, d: jax.random.generalized_normal(
          k, p, s, d, out_sharding=out_sharding),
      out_sharding=out_sharding, method=method, rounding=rounding,
      table_bits=table_bits)


def gamma(key, a, shape=None, dtype=None, *, out_sharding=None, method=None,
          rounding="nearest", table_bits=None):
  """Gamma samples of shape ``a`` (> 0) and scale 1, rounded into ``dtype``.

  ``exact`` and ``table`` (concrete scalar ``a``) sample the law of the real
  draw rounded, from scipy.special's incomplete gamma function;
  ``method="approximate"`` (JAX >= 0.11) rounds jax.random's loop-free
  approximate draw. Other arguments as :func:`uniform`.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.gamma(jax.random.key(0), 2.0, (3,), "e4m3")  # doctest: +SKIP
  Array([1.25, 0.875, 3.5], dtype=float8_e4m3fn)
  """
  method, twin = _jax_method("gamma", method)
  return _sample(
      "gamma", key, shape, dtype, {"a": a},
      lambda k, s, d: jax.random.gamma(k, a, s, d, out_sharding=out_sharding,
                                       **twin),
      static=twin, out_sharding=out_sharding, method=method, rounding=rounding,
      table_bits=table_bits)


def beta(key, a, b, shape=None, dtype=None, *, out_sharding=None, method=None,
         rounding="nearest", table_bits=None):
  """Beta samples of parameters ``a``, ``b`` (> 0), rounded into ``dtype``.

  The law's CDF is scipy.special's regularized incomplete beta function;
  ``method="approximate"`` as :func:`gamma`; other arguments as
  :func:`uniform`.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.beta(jax.random.key(0), 2.0, 3.0, (3,), "e4m3")  # doctest: +SKIP
  Array([0.34375, 0.5, 0.15625], dtype=float8_e4m3fn)
  """
  method, twin = _jax_method("beta", method)
  return _sample(
      "beta", key, shape, dtype, {"a": a, "b": b},
      lambda k, s, d: jax.random.beta(k, a, b, s, d,
                                      out_sharding=out_sharding, **twin),
      static=twin, out_sharding=out_sharding, method=method, rounding=rounding,
      table_bits=table_bits)


def chisquare(key, df, shape=None, dtype=None, *, out_sharding=None,
              method=None, rounding="nearest", table_bits=None):
  """Chi-square samples with ``df`` (> 0) degrees of freedom, rounded.

  The law is twice a gamma of shape ``df / 2``; ``method="approximate"`` as
  :func:`gamma`; other arguments as :func:`uniform`.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.chisquare(jax.random.key(0), 3.0, (3,), "e4m3")  # doctest: +SKIP
  Array([2.5, 0.75, 4], dtype=float8_e4m3fn)
  """
  method, twin = _jax_method("chisquare", method)
  return _sample(
      "chisquare", key, shape, dtype, {"df": df},
      lambda k, s, d: jax.random.chisquare(k, df, s, d,
                                           out_sharding=out_sharding, **twin),
      static=twin, out_sharding=out_sharding, method=method, rounding=rounding,
      table_bits=table_bits)


def t(key, df, shape=None, dtype=None, *, out_sharding=None, method=None,
      rounding="nearest", table_bits=None):
  """Student's t samples with ``df`` (> 0) degrees of freedom, rounded.

  The law's CDF is scipy.special's (``stdtr`` in the tails, the incomplete
  beta function near zero); ``df = 1`` is the Cauchy law. Other arguments as
  :func:`uniform`.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.t(jax.random.key(0), 3.0, (3,), "e4m3")  # doctest: +SKIP
  Array([-0.5, 1.25, 0.1875], dtype=float8_e4m3fn)
  """
  return _sample(
      "t", key, shape, dtype, {"df": df},
      lambda k, s, d: jax.random.t(k, df, s, d, out_sharding=out_sharding),
      out_sharding=out_sharding, method=method, rounding=rounding,
      table_bits=table_bits)


# -- laws without a CDF here: cast ---------------------------------------------

def loggamma(key, a, shape=None, dtype=None, *, out_sharding=None,
             method=None, rounding="nearest"):
  """Log-gamma samples of shape ``a`` (> 0), rounded (cast).

  ``method="approximate"`` as :func:`gamma`.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.loggamma(jax.random.key(0), 2.0, (3,), "e4m3")  # doctest: +SKIP
  Array([0.25, -0.125, 1.25], dtype=float8_e4m3fn)
  """
  method, twin = _jax_method("loggamma", method)
  return _sample(
      "loggamma", key, shape, dtype, {"a": a},
      lambda k, s, d: jax.random.loggamma(k, a, s, d,
                                          out_sharding=out_sharding, **twin),
      static=twin, out_sharding=out_sharding, method=method, rounding=rounding)


def f(key, dfnum, dfden, shape=None, dtype=None, *, out_sharding=None,
      method=None, rounding="nearest"):
  """F-distribution samples (``dfnum``, ``dfden`` > 0), rounded (cast).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.f(jax.random.key(0), 3.0, 5.0, (3,), "e4m3")  # doctest: +SKIP
  Array([0.5, 1.25, 0.875], dtype=float8_e4m3fn)
  """
  return _sample(
      "f", key, shape, dtype, {"dfnum": dfnum, "dfden": dfden},
      lambda k, s, d: jax.random.f(k, dfnum, dfden, s, d,
                                   out_sharding=out_sharding),
      out_sharding=out_sharding, method=method, rounding=rounding)


def wald(key, mean, shape=None, dtype=None, *, out_sharding=None,
         method=None, rounding="nearest"):
  """Wald (inverse Gaussian, unit shape) samples of ``mean`` (> 0), rounded
  (cast).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.wald(jax.random.key(0), 1.0, (3,), "e4m3")  # doctest: +SKIP
  Array([0.4375, 1.25, 0.8125], dtype=float8_e4m3fn)
  """
  return _sample(
      "wald", key, shape, dtype, {"mean": mean},
      lambda k, s, d: jax.random.wald(k, mean, s, d,
                                      out_sharding=out_sharding),
      out_sharding=out_sharding, method=method, rounding=rounding)


# The samplers of jax.random's signatures this module defines (re-exported by
# jaxfp8.random; install() routes jax.random's namesakes to them).
__all__ = [
    "beta", "cauchy", "chisquare", "double_sided_maxwell", "exponential",
    "f", "gamma", "generalized_normal", "gumbel", "laplace", "loggamma",
    "logistic", "lognormal", "maxwell", "normal", "pareto", "rayleigh", "t",
    "triangular", "truncated_normal", "uniform", "wald", "weibull_min",
]
