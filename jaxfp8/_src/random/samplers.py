"""jax.random's samplers for narrow formats, under jax.random's signatures.

Every function takes the same positional and keyword arguments as its
jax.random namesake, plus keyword-only options of ours:

- ``method``: ``"exact"``, ``"table"`` or ``"cast"`` (None: the default, see
  :func:`set_default_method`);
- ``rounding``: ``"nearest"`` (default) or ``"stochastic"`` (``cast`` only);
- ``table_bits``: the resolution ``2^-table_bits`` of the ``table`` method
  (default 16).

``exact`` and ``table`` serve the distributions with a closed-form CDF
(:data:`jaxfp8._src.laws.DISTRIBUTIONS`) when every numeric parameter is a
concrete scalar. Traced or per-element parameters, and samplers without a CDF
(gamma, beta, ...), use ``cast`` when the method is the default, and raise
``NotImplementedError`` when ``exact``/``table`` was asked for explicitly
(bernoulli and rademacher are exact for any parameters).

A wide ``dtype`` (None, float32, bfloat16, float16) goes straight to
jax.random, unchanged. A narrow one gives a native array of the format, or a
:class:`jaxfp8.CodeArray` for formats the installed XLA can't hold (float6).
"""
from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxfp8._src import formats
from jaxfp8._src import validate
from jaxfp8._src import laws
from jaxfp8._src.random import cast as cast_method
from jaxfp8._src.random import common
from jaxfp8._src.random import config
from jaxfp8._src.random import exact as exact_method
from jaxfp8._src.random import table as table_method

_ROUNDINGS = ("nearest", "stochastic")


def _resolve_method(method, rounding, scalars, fmt, fn) -> str:
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
  why = None
  if fn not in laws.DISTRIBUTIONS:
    why = f"`{fn}` has no closed-form CDF"
  elif not fmt.signed:
    why = f"{fmt.name} is unsigned"
  elif any(v is None for v in scalars.values()):
    why = ("its parameters " + ", ".join(k for k, v in scalars.items()
                                         if v is None)
           + " are traced or per-element arrays")
  if why is None:
    return chosen
  if method is not None:
    raise NotImplementedError(f"method={method!r} of `{fn}` is not available: "
                              f"{why}; use method='cast'")
  return "cast"


def _draw(fn: str, key, shape, fmt: formats.Format, *, params: dict[str, Any],
          static: dict[str, Any] | None = None, method=None,
          rounding="nearest", table_bits=None, out_sharding=None):
  """Runs the chosen method; ``params`` are the user's numeric parameters."""
  static = dict(static or {})
  key = validate.check_single_key(key, fn)
  common.check_finite(params, fn, allow_inf=_MAY_BE_INFINITE.get(fn, ()))
  scalars = {k: common.concrete_scalar(v) for k, v in params.items()}
  _check_sign(fn, fmt, params)
  if table_bits is not None:
    table_bits = table_method.check_bits(table_bits, fn)
  chosen = _resolve_method(method, rounding, scalars, fmt, fn)
  if chosen == "cast":
    arrays = {k: common.as_jax_param(v, k, fn) for k, v in params.items()}
    if shape is not None:
      static["shape"] = shape
    out = common.wrap(cast_method.sample(key, fn, fmt, arrays, static,
                                         rounding), fmt)
  elif chosen == "table":
    out = table_method.sample(key, fn, shape, fmt, scalars,
                              table_bits or table_method.DEFAULT_BITS)
  else:
    out = exact_method.sample(key, fn, shape, fmt, scalars)
  return common.shard(out, out_sharding)


# Parameters that may be infinite (a one-sided or no truncation).
_MAY_BE_INFINITE = {"truncated_normal": ("lower", "upper")}
# Samplers whose draws are > 0 (almost surely) whatever their parameters, and
# those whose draws are > 0 when one parameter is >= 0.
_POSITIVE_DRAWS = frozenset({"exponential", "gamma", "beta", "chisquare",
                             "lognormal", "pareto", "rayleigh", "maxwell",
                             "weibull_min", "dirichlet", "f", "wald"})
_POSITIVE_IF = {"uniform": "minval", "triangular": "left",
                "truncated_normal": "lower"}


def _check_sign(fn: str, fmt: formats.Format, params: dict[str, Any]):
  """ValueError for draws that can be negative in an unsigned format (E8M0:
  no sign, no zero): they would come back as NaN."""
  if fmt.signed or fn in _POSITIVE_DRAWS:
    return
  arg = _POSITIVE_IF.get(fn)
  if arg is not None and arg in params:
    lower = common.concrete_array(params[arg])
    if lower is None or np.all(lower >= 0):  # traced: not checked
      return
  cond = (f" unless `{arg}` is >= 0" if arg else "")
  raise ValueError(
      f"`dtype` argument to `{fn}` is {fmt.name}, an unsigned scale format "
      f"(powers of two, no zero, no sign), and `{fn}` draws values <= 0"
      f"{cond}; use a signed format such as float8_e4m3fn")


def _start(fn, key, shape, dtype, params=None):
  """Checks key, dtype and shape; returns (key, shape, narrow format)."""
  key = common.check_key(key, fn)
  fmt = common.out_format(dtype, fn)
  if params is None or shape is not None:  # with params, None broadcasts
    shape = validate.check_shape(shape, fn)
  return key, shape, fmt


def _positive(params: dict[str, Any], fn: str) -> None:
  for arg, v in params.items():
    common.check_positive_array(v, arg, fn)


# -- distributions with a CDF: exact, table and cast ---------------------------

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
  key, shape, fmt = _start("uniform", key, shape, dtype)
  if fmt is None:
    return jax.random.uniform(key, shape, dtype, minval, maxval,
                              out_sharding=out_sharding)
  common.check_array_less(minval, maxval, "minval", "maxval", "uniform")
  return _draw("uniform", key, shape, fmt,
               params={"minval": minval, "maxval": maxval}, method=method,
               rounding=rounding, table_bits=table_bits,
               out_sharding=out_sharding)


def _standard(fn: str, doc: str):
  """A parameterless sampler ``fn(key, shape=(), dtype=None, ...)``."""
  jax_fn = getattr(jax.random, fn)

  def sampler(key, shape=(), dtype=None, *, out_sharding=None, method=None,
              rounding="nearest", table_bits=None):
    key, shape, fmt = _start(fn, key, shape, dtype)
    if fmt is None:
      return jax_fn(key, shape, dtype, out_sharding=out_sharding)
    return _draw(fn, key, shape, fmt, params={}, method=method,
                 rounding=rounding, table_bits=table_bits,
                 out_sharding=out_sharding)

  sampler.__name__ = sampler.__qualname__ = fn
  sampler.__doc__ = f"""{doc}, rounded into ``dtype``.

  Same arguments as ``jax.random.{fn}``, plus ``method``, ``rounding`` and
  ``table_bits`` (see :func:`uniform`).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.{fn}(jax.random.key(0), (3,), "e5m2")  # doctest: +SKIP
  Array([-0.375, 1.5, 0.0625], dtype=float8_e5m2)
  """
  return sampler


normal = _standard("normal", "Standard normal samples")
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
  key, shape, fmt = _start("gumbel", key, shape, dtype)
  if fmt is None:
    return jax.random.gumbel(key, shape, dtype, mode,
                             out_sharding=out_sharding)
  if mode is not None:
    validate.check_choice(mode, ("highest", "high", "low"), "mode", "gumbel")
  return _draw("gumbel", key, shape, fmt, params={}, static={"mode": mode},
               method=method, rounding=rounding, table_bits=table_bits,
               out_sharding=out_sharding)


def truncated_normal(key, lower, upper, shape=None, dtype=None, *,
                     out_sharding=None, method=None, rounding="nearest",
                     table_bits=None):
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
  params = {"lower": lower, "upper": upper}
  key, shape, fmt = _start(fn, key, shape, dtype, params)
  if fmt is None:
    return jax.random.truncated_normal(key, lower, upper, shape, dtype,
                                       out_sharding=out_sharding)
  common.check_array_less(lower, upper, "lower", "upper", fn)
  return _draw(fn, key, common.broadcast_shape(shape, params, fn), fmt,
               params=params, method=method, rounding=rounding,
               table_bits=table_bits, out_sharding=out_sharding)


def _with_params(fn: str, key, shape, dtype, params: dict[str, Any], *,
                 positive=(), out_sharding=None, method=None,
                 rounding="nearest", table_bits=None, jax_call=None):
  """Shared body of samplers with numeric parameters (shape None broadcasts).

  ``positive`` names the parameters that must be > 0; ``jax_call`` runs
  jax.random itself for a wide dtype.
  """
  key, shape, fmt = _start(fn, key, shape, dtype, params)
  if fmt is None:
    return jax_call(key, shape)
  _positive({k: params[k] for k in positive}, fn)
  return _draw(fn, key, common.broadcast_shape(shape, params, fn), fmt,
               params=params, method=method, rounding=rounding,
               table_bits=table_bits, out_sharding=out_sharding)


def lognormal(key, sigma=1.0, shape=None, dtype=None, *, out_sharding=None,
              method=None, rounding="nearest", table_bits=None):
  """Log-normal samples ``exp(sigma * N)``, rounded into ``dtype``.

  ``sigma`` must be positive; other arguments as :func:`uniform`.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.lognormal(jax.random.key(0), 0.5, (3,), "e4m3")  # doctest: +SKIP
  Array([0.8125, 2, 1.0625], dtype=float8_e4m3fn)
  """
  return _with_params(
      "lognormal", key, shape, dtype, {"sigma": sigma}, positive=("sigma",),
      out_sharding=out_sharding, method=method, rounding=rounding,
      table_bits=table_bits,
      jax_call=lambda k, s: jax.random.lognormal(k, sigma, s, dtype,
                                                 out_sharding=out_sharding))


def rayleigh(key, scale, shape=None, dtype=None, *, out_sharding=None,
             method=None, rounding="nearest", table_bits=None):
  """Rayleigh samples of scale ``scale`` (> 0), rounded into ``dtype``.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.rayleigh(jax.random.key(0), 1.0, (3,), "e4m3")  # doctest: +SKIP
  Array([0.8125, 2, 1.0625], dtype=float8_e4m3fn)
  """
  return _with_params(
      "rayleigh", key, shape, dtype, {"scale": scale}, positive=("scale",),
      out_sharding=out_sharding, method=method, rounding=rounding,
      table_bits=table_bits,
      jax_call=lambda k, s: jax.random.rayleigh(k, scale, s, dtype,
                                                out_sharding=out_sharding))


def pareto(key, b, shape=None, dtype=None, *, out_sharding=None, method=None,
           rounding="nearest", table_bits=None):
  """Pareto samples (support [1, inf)) of shape ``b`` (> 0), rounded.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.pareto(jax.random.key(0), 3.0, (3,), "e4m3")  # doctest: +SKIP
  Array([1.125, 1, 1.5], dtype=float8_e4m3fn)
  """
  return _with_params(
      "pareto", key, shape, dtype, {"b": b}, positive=("b",),
      out_sharding=out_sharding, method=method, rounding=rounding,
      table_bits=table_bits,
      jax_call=lambda k, s: jax.random.pareto(k, b, s, dtype,
                                              out_sharding=out_sharding))


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
  return _with_params(
      "double_sided_maxwell", key, shape, dtype, {"loc": loc, "scale": scale},
      positive=("scale",), method=method, rounding=rounding,
      table_bits=table_bits,
      jax_call=lambda k, s: jax.random.double_sided_maxwell(k, loc, scale, s,
                                                            dtype))


def weibull_min(key, scale, concentration, shape=(), dtype=None, *,
                method=None, rounding="nearest", table_bits=None):
  """Weibull samples of ``scale`` and ``concentration`` (both > 0), rounded.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.weibull_min(jax.random.key(0), 1., 2., (3,), "e4m3")  # doctest: +SKIP
  Array([0.625, 1.25, 0.4375], dtype=float8_e4m3fn)
  """
  shape = validate.check_shape(shape, "weibull_min")
  return _with_params(
      "weibull_min", key, shape, dtype,
      {"scale": scale, "concentration": concentration},
      positive=("scale", "concentration"), method=method, rounding=rounding,
      table_bits=table_bits,
      jax_call=lambda k, s: jax.random.weibull_min(k, scale, concentration, s,
                                                   dtype))


def triangular(key, left, mode, right, shape=None, dtype=None, *,
               out_sharding=None, method=None, rounding="nearest",
               table_bits=None):
  """Triangular samples on [left, right] peaking at ``mode``, rounded.

  Needs ``left <= mode <= right`` and ``left < right``.

  >>> import jax, jaxfp8
  >>> jaxfp8.random.triangular(jax.random.key(0), -1., 0., 2., (3,), "e4m3")  # doctest: +SKIP
  Array([0.25, -0.4375, 1.125], dtype=float8_e4m3fn)
  """
  fn = "triangular"
  common.check_array_less(left, right, "left", "right", fn)
  common.check_array_less(left, mode, "left", "mode", fn, or_equal=True)
  common.check_array_less(mode, right, "mode", "right", fn, or_equal=True)
  return _with_params(
      fn, key, shape, dtype, {"left": left, "mode": mode, "right": right},
      out_sharding=out_sharding, method=method, rounding=rounding,
      table_bits=table_bits,
      jax_call=lambda k, s: jax.random.triangular(k, left, mode, right, s,
                                                  dtype,
                                                  out_sharding=out_sharding))


# -- distributions without a closed-form CDF: cast ------------------------------

def _cast_only(fn: str, key, shape, dtype, params: dict[str, Any], *,
               static=None, positive=(), out_sharding=None, method=None,
               rounding="nearest", jax_call=None):
  """Shared body of the samplers that only ``cast`` serves."""
  key, shape, fmt = _start(fn, key, shape, dtype, params)
  if fmt is None:
    return jax_call(key, shape)
  _positive({k: params[k] for k in positive}, fn)
  return _draw(fn, key, shape, fmt, params=params, static=static,
               method=method, rounding=rounding, out_sharding=out_sharding)


def generalized_normal(key, p, shape=(), dtype=None, *, out_sharding=None,
                       method=None, rounding="nearest"):
  """Generalized normal samples (density ~ exp(-|x|^p)), rounded (cast).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.generalized_normal(jax.random.key(0), 1.5, (3,), "e4m3")  # doctest: +SKIP
  Array([0.3125, -1, 0.5], dtype=float8_e4m3fn)
  """
  return _cast_only(
      "generalized_normal", key, validate.check_shape(shape,
                                                      "generalized_normal"),
      dtype, {"p": p}, positive=("p",), out_sharding=out_sharding,
      method=method, rounding=rounding,
      jax_call=lambda k, s: jax.random.generalized_normal(
          k, p, s, dtype, out_sharding=out_sharding))


def gamma(key, a, shape=None, dtype=None, *, out_sharding=None, method=None,
          rounding="nearest"):
  """Gamma samples of shape ``a`` (> 0), rounded (cast).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.gamma(jax.random.key(0), 2.0, (3,), "e4m3")  # doctest: +SKIP
  Array([1.25, 0.875, 3.5], dtype=float8_e4m3fn)
  """
  return _cast_only(
      "gamma", key, shape, dtype, {"a": a}, positive=("a",),
      out_sharding=out_sharding, method=method, rounding=rounding,
      jax_call=lambda k, s: jax.random.gamma(k, a, s, dtype,
                                             out_sharding=out_sharding))


def wald(key, mean, shape=None, dtype=None, *, out_sharding=None,
         method=None, rounding="nearest"):
  """Wald (inverse Gaussian, unit shape) samples of ``mean`` (> 0), rounded
  (cast).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.wald(jax.random.key(0), 1.0, (3,), "e4m3")  # doctest: +SKIP
  Array([0.4375, 1.25, 0.8125], dtype=float8_e4m3fn)
  """
  return _cast_only(
      "wald", key, shape, dtype, {"mean": mean}, positive=("mean",),
      out_sharding=out_sharding, method=method, rounding=rounding,
      jax_call=lambda k, s: jax.random.wald(k, mean, s, dtype,
                                            out_sharding=out_sharding))


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
  key = common.check_key(key, fn)
  fmt = common.out_format(dtype, fn)
  if fmt is None:
    return jax.random.multinomial(key, n, p, shape=shape, dtype=dtype,
                                  unroll=unroll)
  for arg, v in (("n", n), ("p", p)):
    common.check_positive_array(v, arg, fn, allow_zero=True)
  static = {"unroll": unroll}
  if shape is not None:
    static["shape"] = validate.check_shape(shape, fn)
  return _draw(fn, key, None, fmt, params={"n": n, "p": p}, static=static,
               method=method, rounding=rounding)


def loggamma(key, a, shape=None, dtype=None, *, out_sharding=None,
             method=None, rounding="nearest"):
  """Log-gamma samples of shape ``a`` (> 0), rounded (cast).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.loggamma(jax.random.key(0), 2.0, (3,), "e4m3")  # doctest: +SKIP
  Array([0.25, -0.125, 1.25], dtype=float8_e4m3fn)
  """
  return _cast_only(
      "loggamma", key, shape, dtype, {"a": a}, positive=("a",),
      out_sharding=out_sharding, method=method, rounding=rounding,
      jax_call=lambda k, s: jax.random.loggamma(k, a, s, dtype,
                                                out_sharding=out_sharding))


def beta(key, a, b, shape=None, dtype=None, *, out_sharding=None, method=None,
         rounding="nearest"):
  """Beta samples of parameters ``a``, ``b`` (> 0), rounded (cast).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.beta(jax.random.key(0), 2.0, 3.0, (3,), "e4m3")  # doctest: +SKIP
  Array([0.34375, 0.5, 0.15625], dtype=float8_e4m3fn)
  """
  return _cast_only(
      "beta", key, shape, dtype, {"a": a, "b": b}, positive=("a", "b"),
      out_sharding=out_sharding, method=method, rounding=rounding,
      jax_call=lambda k, s: jax.random.beta(k, a, b, s, dtype,
                                            out_sharding=out_sharding))


def chisquare(key, df, shape=None, dtype=None, *, out_sharding=None,
              method=None, rounding="nearest"):
  """Chi-square samples with ``df`` (> 0) degrees of freedom (cast).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.chisquare(jax.random.key(0), 3.0, (3,), "e4m3")  # doctest: +SKIP
  Array([2.5, 0.75, 4], dtype=float8_e4m3fn)
  """
  return _cast_only(
      "chisquare", key, shape, dtype, {"df": df}, positive=("df",),
      out_sharding=out_sharding, method=method, rounding=rounding,
      jax_call=lambda k, s: jax.random.chisquare(k, df, s, dtype,
                                                 out_sharding=out_sharding))


def t(key, df, shape=None, dtype=None, *, out_sharding=None, method=None,
      rounding="nearest"):
  """Student's t samples with ``df`` (> 0) degrees of freedom (cast).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.t(jax.random.key(0), 3.0, (3,), "e4m3")  # doctest: +SKIP
  Array([-0.5, 1.25, 0.1875], dtype=float8_e4m3fn)
  """
  return _cast_only(
      "t", key, shape, dtype, {"df": df}, positive=("df",),
      out_sharding=out_sharding, method=method, rounding=rounding,
      jax_call=lambda k, s: jax.random.t(k, df, s, dtype,
                                         out_sharding=out_sharding))


def f(key, dfnum, dfden, shape=None, dtype=None, *, out_sharding=None,
      method=None, rounding="nearest"):
  """F-distribution samples (``dfnum``, ``dfden`` > 0), rounded (cast).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.f(jax.random.key(0), 3.0, 5.0, (3,), "e4m3")  # doctest: +SKIP
  Array([0.5, 1.25, 0.875], dtype=float8_e4m3fn)
  """
  return _cast_only(
      "f", key, shape, dtype, {"dfnum": dfnum, "dfden": dfden},
      positive=("dfnum", "dfden"), out_sharding=out_sharding, method=method,
      rounding=rounding,
      jax_call=lambda k, s: jax.random.f(k, dfnum, dfden, s, dtype,
                                         out_sharding=out_sharding))


def binomial(key, n, p, shape=None, dtype=None, *, method=None,
             rounding="nearest"):
  """Binomial counts (``n`` >= 0 trials, success probability ``p``), rounded.

  Counts above the format's integers round to nearest (cast).

  >>> import jax, jaxfp8
  >>> jaxfp8.random.binomial(jax.random.key(0), 10.0, 0.3, (3,), "e4m3")  # doctest: +SKIP
  Array([3, 2, 4], dtype=float8_e4m3fn)
  """
  fn = "binomial"
  pc = common.concrete_scalar(p)
  if pc is not None and not 0 <= pc <= 1:
    raise ValueError(f"`p` argument to `{fn}` must be in [0, 1], got {pc}")
  common.check_positive_array(n, "n", fn, allow_zero=True)
  return _cast_only(
      fn, key, shape, dtype, {"n": n, "p": p}, method=method,
      rounding=rounding,
      jax_call=lambda k, s: jax.random.binomial(k, n, p, s, dtype))


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
  key = common.check_key(key, fn)
  fmt = common.out_format(dtype, fn)
  if fmt is None:
    return jax.random.dirichlet(key, alpha, shape, dtype,
                                out_sharding=out_sharding)
  _positive({"alpha": alpha}, fn)
  static = {} if shape is None else {"shape": validate.check_shape(shape, fn)}
  return _draw(fn, key, None, fmt, params={"alpha": alpha}, static=static,
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
  key = common.check_key(key, fn)
  fmt = common.out_format(dtype, fn)
  if fmt is None:
    return jax.random.multivariate_normal(key, mean, cov, shape, dtype, method,
                                          out_sharding=out_sharding)
  validate.check_choice(method, ("cholesky", "eigh", "svd"), "method", fn)
  static = {"method": method}
  if shape is not None:
    static["shape"] = validate.check_shape(shape, fn)
  return _draw(fn, key, None, fmt, params={"mean": mean, "cov": cov},
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
  key = common.check_key(key, fn)
  fmt = common.out_format(dtype, fn)
  shape = validate.check_shape(shape, fn)
  if fmt is None:
    return jax.random.ball(key, d, p, shape, dtype, out_sharding=out_sharding)
  common.check_positive_array(p, "p", fn)
  return _draw(fn, key, None, fmt, params={"p": p},
               static={"d": int(d), "shape": shape},
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
  key = common.check_key(key, fn)
  fmt = common.out_format(dtype, fn)
  shape = validate.check_shape(shape, fn)
  if fmt is None:
    return jax.random.orthogonal(key, n, shape, dtype, m,
                                 out_sharding=out_sharding)
  static = {"n": int(n), "shape": shape}
  if m is not None:
    static["m"] = int(m)
  return _draw(fn, key, None, fmt, params={}, static=static, method=method,
               rounding=rounding, out_sharding=out_sharding)


# -- discrete samplers ----------------------------------------------------------

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
  p32 = common.as_float32(p, "p", fn)
  pc = common.concrete_scalar(p)
  if pc is not None and not 0 <= pc <= 1:
    raise ValueError(f"`p` argument to `{fn}` must be in [0, 1], got {pc}")
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
  key = common.check_key(key, fn)
  shape = validate.check_shape(shape, fn)
  try:
    fmt = common.out_format(dtype, fn)
  except TypeError:
    fmt = None  # integer dtypes are jax.random's business
  if fmt is None:
    return jax.random.rademacher(key, shape, dtype, out_sharding=out_sharding)
  key = validate.check_single_key(key, fn)
  _check_sign(fn, fmt, {})
  if method is not None:
    validate.check_choice(method, config.METHODS, "method", fn)
  chosen = config.get_default_method() if method is None else method
  if chosen == "cast":
    out = common.wrap(cast_method.sample(key, fn, fmt, {}, {"shape": shape}),
                      fmt)
  else:
    out = exact_method.rademacher(key, shape, fmt)
  return common.shard(out, out_sharding)


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
  key = common.check_key(key, fn)
  logits = common.as_float32(logits, "logits", fn)
  if shape is not None:
    shape = validate.check_shape(shape, fn)
  return jax.random.categorical(key, logits, axis, shape, replace, mode,
                                out_sharding=out_sharding)
