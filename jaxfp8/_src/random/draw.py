"""From a sampler call to samples: check the request, pick the method, run it.

Every sampler of :mod:`jaxfp8.random` goes through here for a narrow
``dtype``: :func:`start` checks the key, ``dtype`` and ``shape``; :func:`run`
checks the parameters against the distribution table
(:mod:`jaxfp8._src.random.distributions`), chooses the method
(:func:`choose_method`) and runs it (``exact_method``, ``table_method`` or
``cast_method``).

``exact`` and ``table`` serve the distributions with a CDF in the table
(closed forms, and scipy.special's for gamma, beta, chisquare, t and
generalized_normal) when every numeric parameter is a concrete scalar: their
tables are built on the host from those numbers. Traced or per-element
parameters, and samplers without a CDF (loggamma, f, wald, ...), use
``cast`` when the method is the default, and raise ``NotImplementedError``
when ``exact``/``table`` was asked for explicitly.
"""
from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxfp8._src.numerics import codes as codes_lib
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import rounding as rounding_lib
from jaxfp8._src.numerics import validate
from jaxfp8._src.random import cast_method
from jaxfp8._src.random import common
from jaxfp8._src.random import config
from jaxfp8._src.random import distributions
from jaxfp8._src.random import exact_method
from jaxfp8._src.random import table_method

# The roundings the samplers offer (the cast method's).
ROUNDINGS = rounding_lib.NEAREST_OR_STOCHASTIC


def start(fn: str, key: Any, shape: Any, dtype: Any,
          params: dict[str, Any] | None = None):
  """Checks key, dtype and shape of a call to ``fn``.

  With ``params``, a ``shape`` of None is kept (it broadcasts them).

  Returns:
    ``(key, shape, fmt, wide)``: ``fmt`` the narrow format asked for, or None
    and ``wide`` the dtype to hand to jax.random (see
    :func:`common.out_format`).
  """
  key = validate.check_key(key, fn)
  fmt, wide = common.out_format(dtype, fn)
  if params is None or shape is not None:
    shape = validate.check_shape(shape, fn)
  return key, shape, fmt, wide


def check_sign(fn: str, fmt: formats.Format, params: dict[str, Any]) -> None:
  """ValueError for draws that can be negative in an unsigned format (E8M0:
  no sign, no zero): they would come back as NaN.

  A traced ``positive_if`` parameter is not checked.
  """
  d = distributions.get(fn)
  if fmt.signed or d.positive_draws:
    return
  arg = d.positive_if
  if arg is not None and arg in params:
    lower = common.concrete_array(params[arg])
    if lower is None or np.all(lower >= 0):
      return
  cond = f" unless `{arg}` is >= 0" if arg else ""
  raise ValueError(
      f"`dtype` argument to `{fn}` is {fmt.name}, an unsigned scale format "
      f"(powers of two, no zero, no sign), and `{fn}` draws values <= 0"
      f"{cond}; use a signed format such as float8_e4m3fn")


def choose_method(method: str | None, rounding: str,
                  scalars: dict[str, float | None], fmt: formats.Format,
                  fn: str) -> str:
  """The method that will run, or an error for an impossible request.

  Raises:
    ValueError: for an unknown ``method`` or ``rounding``, or a rounding the
      asked method doesn't have.
    NotImplementedError: ``exact``/``table`` asked for where it can't run.
    ImportError: ``exact``/``table`` asked for a law whose CDF needs a
      library that is not installed (scipy); the default is then ``cast``.
  """
  if method is not None:
    validate.check_choice(method, config.METHODS, "method", fn)
  validate.check_choice(rounding, ROUNDINGS, "rounding", fn)
  chosen = config.get_default_method() if method is None else method
  if chosen == "cast":
    return "cast"
  if rounding != "nearest":
    if method is not None:
      raise ValueError(f"`rounding={rounding!r}` argument to `{fn}` needs "
                       f"method='cast', got method={method!r}")
    return "cast"
  why = None
  d = distributions.get(fn)
  if method is not None and d.cdf is not None and not d.has_cdf:
    raise ImportError(f"method={method!r} of `{fn}` needs {d.library} (the "
                      f"law's CDF is {d.library}'s), which is not installed: "
                      f"`pip install {d.library}` (jax depends on it), or use "
                      "method='cast'")
  if not d.has_cdf:
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


def run(fn: str, key, shape, fmt: formats.Format, *, params: dict[str, Any],
        static: dict[str, Any] | None = None, method=None,
        rounding="nearest", table_bits=None, out_sharding=None):
  """Samples of ``fn`` in ``fmt`` by the method that serves the request.

  Args:
    fn: the jax.random sampler's name (its entry in the distribution table).
    key: a checked key (a batch of keys is refused here).
    shape: the checked output shape, or None where ``static`` holds
      jax.random's own ``shape`` argument (multivariate samplers).
    fmt: the narrow format.
    params: the user's numeric parameters, by jax.random's names.
    static: non-numeric arguments for jax.random (the cast method).
    method, rounding, table_bits, out_sharding: as the samplers take them.
  """
  static = dict(static or {})
  key = validate.check_single_key(key, fn)
  common.check_params(fn, params)
  common.check_broadcast(fn, params, shape)
  scalars = {k: common.concrete_scalar(v) for k, v in params.items()}
  check_sign(fn, fmt, params)
  if table_bits is not None:
    table_bits = table_method.check_bits(table_bits, fn)
  chosen = choose_method(method, rounding, scalars, fmt, fn)
  if chosen != "cast" and shape is not None and 0 in shape:
    # Nothing to draw (and no table to index): an empty array of the format.
    out = codes_lib.from_codes(jnp.zeros(shape, jnp.uint8), fmt)
  elif chosen == "cast":
    common.check_float32_params(fn, params)
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
