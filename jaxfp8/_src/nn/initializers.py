"""Initializers for narrow formats: the float32 initializer, rounded once.

Every factory mirrors :mod:`jax.nn.initializers` (names, signatures,
defaults). For a wide ``dtype`` the returned ``init`` runs JAX's: the same
samples, bit for bit, and JAX's errors, but for axes out of the shape's
range (JAX's bare IndexError), which raise a ``numpy.exceptions.AxisError``
(a ValueError and an IndexError) naming the argument. For a narrow format it
draws JAX's initializer in float32 with the same key and rounds the result
once, to nearest-even with saturation (:func:`jaxfp8.cast`). So the weights
follow exactly the law of the float32 initializer rounded into the format,
and the fp8 weights of a model are the rounding of its float32 weights.

JAX's own initializers do their arithmetic in the narrow format instead: the
scale is rounded into the format before it multiplies a sample that was
already rounded (and ``truncated_normal`` in float8_e4m3fn gives NaN), which
moves the spread by up to half a unit in the last place of the scale (6% in
float8_e4m3fn, 12% in float8_e5m2) and often further.

When the format can't honour the request (most weights would round to zero,
or a visible share would saturate at the format's largest value) a
:class:`~jaxfp8._src.nn.init_range.FormatRangeWarning` says so, with a
power-of-two scale and formats that would fit (:mod:`jaxfp8._src.nn.init_range`
holds that check; each factory here gives it the law of its float32 weights).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Callable, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.nn import initializers as _jax

from jaxfp8._src.nn import init_range
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import validate
from jaxfp8._src.numerics.cast import cast

Initializer = _jax.Initializer
RealNumeric = Any
DTypeLike = Any

# Standard deviation of N(0, 1) truncated to (-2, 2), as jax.nn uses it.
_TRUNCATED_STD = .87962566103423978


# ---------------------------------------------------------------------------
# Parameters as the range check reads them (None: traced, not checked).


def _concrete(x: Any) -> float | None:
  """A parameter as a Python float, or None when it is traced or an array."""
  try:
    return float(x)
  except (TypeError, jax.errors.ConcretizationTypeError):
    return None


def _param(x: Any, arg: str, fn: str, *,
           nonnegative: bool = False) -> float | None:
  """``x`` as a finite float (None when traced or an array), or raises.

  Raises:
    ValueError: ``x`` is NaN or infinite (or negative, if ``nonnegative``):
      the narrow weights would be NaN or saturated throughout.
  """
  v = _concrete(x)
  if v is not None and (not math.isfinite(v) or (nonnegative and v < 0)):
    expected = "finite and >= 0" if nonnegative else "finite"
    raise ValueError(f"`{arg}` argument to `{fn}` must be {expected} for "
                     f"weights in a narrow format, got {v}")
  return v


# ---------------------------------------------------------------------------
# One rule for every initializer: JAX's, in float32, rounded once.


def _narrow(dtype: Any) -> formats.Format | None:
  return formats.get(dtype) if formats.is_narrow(dtype) else None


def _rounded(fn: str, jax_init: Callable, default_dtype: DTypeLike,
             law: Callable[[tuple[int, ...]], init_range.Law | None], *,
             check: Callable[[tuple[int, ...]], None] | None = None
             ) -> Initializer:
  """``init(key, shape, dtype, out_sharding)``: JAX's for wide dtypes, else
  JAX's in float32 rounded once into the narrow format. ``check(shape)``
  raises for arguments that don't fit the (non-empty) shape, before JAX
  sees them."""

  def init(key: jax.Array, shape: Sequence[int],
           dtype: DTypeLike | None = default_dtype,
           out_sharding: Any = None):
    fmt = _narrow(dtype)
    if fmt is None and dtype is not None:  # the registry's aliases: "bf16"...
      dtype = formats.get_dtype(dtype, arg="dtype", fn=fn)
    shape = validate.check_shape(shape, fn)
    if math.prod(shape) == 0:
      # No weights to draw: JAX's variance scaling would divide by a zero fan.
      empty = jnp.zeros(tuple(shape), jnp.float32)
      return cast(empty, fmt) if fmt else empty.astype(dtype or jnp.float32)
    if check is not None:
      check(shape)
    if fmt is None:  # JAX's initializer, errors and all
      return jax_init(key, shape, dtype, out_sharding)
    try:
      wide = jax_init(key, shape, jnp.float32, out_sharding)
    except (TypeError, ValueError) as e:  # JAX's messages name no argument
      raise type(e)(f"`shape` argument to `{fn}` (shape {tuple(shape)}, "
                    f"dtype {fmt.name}): {e}") from e
    init_range.check_range(fn, law(tuple(wide.shape)), fmt)
    return cast(wide, fmt)

  init.__qualname__ = init.__name__ = f"{fn}_init"
  return init


def _fans(shape: tuple[int, ...], in_axis, out_axis, batch_axis
          ) -> tuple[float, float]:
  """fan_in, fan_out as jax.nn.initializers.variance_scaling counts them."""
  def size(axes):
    return shape[axes] if isinstance(axes, int) else math.prod(
        shape[i] for i in axes)
  receptive = math.prod(shape) / size(in_axis) / size(out_axis) / size(
      batch_axis)
  return size(in_axis) * receptive, size(out_axis) * receptive


def _axes_checker(fn: str, in_axis, out_axis, batch_axis
                  ) -> Callable[[tuple[int, ...]], None]:
  """Raises unless each of the axes arguments is an int or a sequence of
  ints within the shape's axes (JAX's own gives a bare IndexError)."""
  def check(shape: tuple[int, ...]) -> None:
    ndim = len(shape)
    if isinstance(in_axis, int) and in_axis == -2 and ndim <= 1:
      return  # JAX's own ValueError says it: the default needs 2 axes
    for arg, axes in (("in_axis", in_axis), ("out_axis", out_axis),
                      ("batch_axis", batch_axis)):
      # A Python int, or any iterable of ints (a tuple, a list, a NumPy
      # array), as JAX's _compute_fans takes them.
      try:
        listed = ([axes] if isinstance(axes, (int, str)) else list(axes))
      except TypeError:
        listed = [None]  # a scalar that is not a Python int
      for axis in listed:
        if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
          raise TypeError(f"`{arg}` argument to `{fn}` must be an int or a "
                          f"sequence of ints, got {axes!r}")
        if not -ndim <= axis < ndim:
          raise np.exceptions.AxisError(
              f"`{arg}` argument to `{fn}` is {axes!r}, out of range for "
              f"shape {shape} ("
              + (f"axes {-ndim} to {ndim - 1})" if ndim else "no axes)"))
  return check


def _variance_law(fn, scale, mode, distribution, in_axis, out_axis,
                  batch_axis):
  def law(shape):
    s = _param(scale, "scale", fn, nonnegative=True)
    if s is None or not shape or math.prod(shape) == 0:
      return None
    fan_in, fan_out = _fans(shape, in_axis, out_axis, batch_axis)
    n = {"fan_in": fan_in, "fan_out": fan_out,
         "fan_avg": (fan_in + fan_out) / 2,
         "fan_geo_avg": math.sqrt(fan_in * fan_out)}[mode]
    std = math.sqrt(s / n)
    if distribution == "truncated_normal":
      return init_range.Law("normal", std / _TRUNCATED_STD, -2.0, 2.0)
    if distribution == "normal":
      return init_range.Law("normal", std)
    limit = math.sqrt(3.0) * std
    return init_range.Law("uniform", lower=-limit, upper=limit)
  return law


# ---------------------------------------------------------------------------
# The public factories: jax.nn.initializers' names, signatures and defaults.


def zeros(key: jax.Array, shape: Sequence[int],
          dtype: DTypeLike | None = None, out_sharding: Any = None):
  """An initializer that returns a constant array full of zeros.

  Like :func:`jax.nn.initializers.zeros`, for every narrow format too
  (float6 as a :class:`jaxfp8.CodeArray`). The ``key`` argument is ignored.

  >>> import jax, jax.numpy as jnp, jaxfp8
  >>> zeros(jax.random.key(0), (2,), jnp.float8_e4m3fn)
  Array([0, 0], dtype=float8_e4m3fn)
  """
  return _rounded("zeros", _jax.zeros, None,
                  lambda _: init_range.Law("constant", lower=0.0))(
                      key, shape, dtype, out_sharding)


def ones(key: jax.Array, shape: Sequence[int],
         dtype: DTypeLike | None = None, out_sharding: Any = None):
  """An initializer that returns a constant array full of ones.

  >>> import jax
  >>> ones(jax.random.key(0), (2,), "float6_e2m3fn")
  CodeArray(float6_e2m3fn, shape=(2,), values=[1 1])
  """
  return _rounded("ones", _jax.ones, None,
                  lambda _: init_range.Law("constant", lower=1.0))(
                      key, shape, dtype, out_sharding)


def constant(value: Any, dtype: DTypeLike | None = None) -> Initializer:
  """Builds an initializer that returns arrays full of ``value``.

  In a narrow format ``value`` is rounded once, saturating at the format's
  largest value (JAX's own gives NaN in float8_e4m3fn beyond 464).

  Args:
    value: the constant.
    dtype: optional; the initializer's default dtype.

  >>> import jax, jax.numpy as jnp
  >>> constant(1000.0)(jax.random.key(0), (2,), jnp.float8_e4m3fn)  # doctest: +SKIP
  Array([448, 448], dtype=float8_e4m3fn)
  """
  def law(_):
    v = _concrete(value) if jnp.ndim(value) == 0 else None
    return None if v is None else init_range.Law("constant", lower=v)
  return _rounded("constant", _jax.constant(value, dtype), dtype, law)


def uniform(scale: RealNumeric = 1e-2,
            dtype: DTypeLike | None = None) -> Initializer:
  """Builds an initializer of weights uniform on ``[0, scale)``.

  Args:
    scale: optional; the upper bound of the distribution.
    dtype: optional; the initializer's default dtype.

  >>> import jax, jax.numpy as jnp
  >>> uniform(1.0)(jax.random.key(0), (3,), jnp.float8_e5m2)  # doctest: +SKIP
  Array([0.875, 0.3125, 0.625], dtype=float8_e5m2)
  """
  def law(_):
    s = _param(scale, "scale", "uniform")
    # A negative scale draws from (scale, 0], as jax.nn's does.
    return None if s is None else init_range.Law(
        "uniform", lower=min(s, 0.0), upper=max(s, 0.0))
  return _rounded("uniform", _jax.uniform(scale, dtype), dtype, law)


def normal(stddev: RealNumeric = 1e-2,
           dtype: DTypeLike | None = None) -> Initializer:
  """Builds an initializer of normal weights with mean 0 and std ``stddev``.

  Args:
    stddev: optional; the standard deviation.
    dtype: optional; the initializer's default dtype.

  >>> import jax, jax.numpy as jnp
  >>> w = normal(0.02)(jax.random.key(0), (256, 256), jnp.float8_e4m3fn)
  >>> round(float(w.astype(jnp.float32).std()), 2)
  0.02
  """
  def law(_):
    s = _param(stddev, "stddev", "normal")
    return None if s is None else init_range.Law("normal", abs(s))
  return _rounded("normal", _jax.normal(stddev, dtype), dtype, law)


def truncated_normal(stddev: RealNumeric = 1e-2,
                     dtype: DTypeLike | None = None,
                     lower: RealNumeric = -2.0,
                     upper: RealNumeric = 2.0) -> Initializer:
  """Builds an initializer of truncated-normal weights.

  Args:
    stddev: optional; the std of the untruncated distribution (no correction
      is applied, as in :func:`jax.nn.initializers.truncated_normal`).
    dtype: optional; the initializer's default dtype.
    lower: lower truncation bound, in units of ``stddev``.
    upper: upper truncation bound, in units of ``stddev``.

  >>> import jax, jax.numpy as jnp
  >>> w = truncated_normal(1.0)(jax.random.key(0), (1000,), jnp.float8_e4m3fn)
  >>> bool(jnp.isnan(w.astype(jnp.float32)).any())
  False
  """
  def law(_):
    s = _param(stddev, "stddev", "truncated_normal")
    lo, hi = _concrete(lower), _concrete(upper)
    if None in (s, lo, hi) or not lo < hi:
      return None
    return init_range.Law("normal", abs(s), lo, hi)
  return _rounded("truncated_normal",
                  _jax.truncated_normal(stddev, dtype, lower, upper), dtype,
                  law)


def variance_scaling(
    scale: RealNumeric,
    mode: Literal["fan_in", "fan_out", "fan_avg", "fan_geo_avg"],
    distribution: Literal["truncated_normal", "normal", "uniform"],
    in_axis: int | Sequence[int] = -2,
    out_axis: int | Sequence[int] = -1,
    batch_axis: int | Sequence[int] = (),
    dtype: DTypeLike | None = None) -> Initializer:
  """Initializer whose spread adapts to the shape of the weights.

  As :func:`jax.nn.initializers.variance_scaling`: std ``sqrt(scale / n)``
  with ``n`` the fan given by ``mode``; every ``mode`` and ``distribution``;
  in a narrow format the float32 weights rounded once.

  Args:
    scale: scaling factor (positive float).
    mode: ``"fan_in"``, ``"fan_out"``, ``"fan_avg"`` or ``"fan_geo_avg"``.
    distribution: ``"truncated_normal"``, ``"normal"`` or ``"uniform"``.
    in_axis: axis or axes of the input dimension.
    out_axis: axis or axes of the output dimension.
    batch_axis: axis or axes that are ignored.
    dtype: the default dtype of the weights.

  >>> import jax, jax.numpy as jnp
  >>> init = variance_scaling(2.0, "fan_in", "normal")
  >>> w = init(jax.random.key(0), (512, 256), jnp.float8_e5m2)
  >>> round(float(w.astype(jnp.float32).std()) * 512 ** 0.5 / 2 ** 0.5, 1)
  1.0
  """
  return _variance_scaling("variance_scaling", scale, mode, distribution,
                           in_axis, out_axis, batch_axis, dtype)


def _variance_scaling(fn, scale, mode, distribution, in_axis, out_axis,
                      batch_axis, dtype) -> Initializer:
  return _rounded(
      fn,
      _jax.variance_scaling(scale, mode, distribution, in_axis=in_axis,
                            out_axis=out_axis, batch_axis=batch_axis,
                            dtype=dtype),
      dtype,
      _variance_law(fn, scale, mode, distribution, in_axis, out_axis,
                    batch_axis),
      check=_axes_checker(fn, in_axis, out_axis, batch_axis))


def _named_variance_scaling(name: str, scale: float, mode: str,
                            distribution: str):
  def factory(in_axis: int | Sequence[int] = -2,
              out_axis: int | Sequence[int] = -1,
              batch_axis: int | Sequence[int] = (),
              dtype: DTypeLike | None = None) -> Initializer:
    return _variance_scaling(name, scale, mode, distribution, in_axis,
                             out_axis, batch_axis, dtype)
  factory.__name__ = factory.__qualname__ = name
  factory.__module__ = __name__
  factory.__doc__ = (
      f"Builds a {name} initializer: :func:`variance_scaling` with "
      f"``scale={scale}``, ``mode=\"{mode}\"``,\n"
      f"``distribution=\"{distribution}\"`` (as "
      f":func:`jax.nn.initializers.{name}`).\n\n"
      "  Args:\n"
      "    in_axis: axis or axes of the input dimension.\n"
      "    out_axis: axis or axes of the output dimension.\n"
      "    batch_axis: axis or axes that are ignored.\n"
      "    dtype: the default dtype of the weights.\n\n"
      "  Returns:\n    An initializer.\n")
  return factory


glorot_uniform = _named_variance_scaling("glorot_uniform", 1.0, "fan_avg",
                                         "uniform")
glorot_normal = _named_variance_scaling("glorot_normal", 1.0, "fan_avg",
                                        "truncated_normal")
lecun_uniform = _named_variance_scaling("lecun_uniform", 1.0, "fan_in",
                                        "uniform")
lecun_normal = _named_variance_scaling("lecun_normal", 1.0, "fan_in",
                                       "truncated_normal")
he_uniform = _named_variance_scaling("he_uniform", 2.0, "fan_in", "uniform")
he_normal = _named_variance_scaling("he_normal", 2.0, "fan_in",
                                    "truncated_normal")
xavier_uniform = glorot_uniform
xavier_normal = glorot_normal
kaiming_uniform = he_uniform
kaiming_normal = he_normal


def _orthogonal_law(fn, scale, column_axis):
  def law(shape):
    s = _param(scale, "scale", fn)
    if s is None or len(shape) < 2 or math.prod(shape) == 0:
      return None
    cols = shape[column_axis]
    # Rows or columns are orthonormal: each entry has variance 1/max(n, m).
    return init_range.Law(
        "normal", abs(s) / math.sqrt(max(math.prod(shape) // cols, cols)))
  return law


def orthogonal(scale: RealNumeric = 1.0, column_axis: int = -1,
               dtype: DTypeLike | None = None) -> Initializer:
  """Builds an initializer of (scaled) orthogonal matrices.

  The matrix is drawn and orthogonalized (QR) in float32, then rounded once:
  JAX's own raises for narrow formats.

  Args:
    scale: multiplies the orthogonal matrix.
    column_axis: the axis that holds the columns that are orthogonal.
    dtype: the default dtype of the weights.

  >>> import jax, jax.numpy as jnp
  >>> q = orthogonal()(jax.random.key(0), (64, 64), jnp.float8_e4m3fn)
  >>> q32 = q.astype(jnp.float32)
  >>> float(jnp.abs(q32 @ q32.T - jnp.eye(64)).max()) < 0.1
  True
  """
  return _rounded("orthogonal", _jax.orthogonal(scale, column_axis, dtype),
                  dtype, _orthogonal_law("orthogonal", scale, column_axis))


def delta_orthogonal(scale: RealNumeric = 1.0, column_axis: int = -1,
                     dtype: DTypeLike | None = None) -> Initializer:
  """Builds an initializer of delta-orthogonal convolution kernels.

  Zero everywhere except the spatial centre, which holds an orthogonal
  matrix (drawn in float32, rounded once). The shape must be 3D, 4D or 5D.

  Args:
    scale: multiplies the orthogonal matrix.
    column_axis: the axis that holds the columns that are orthogonal.
    dtype: the default dtype of the weights.

  >>> import jax, jax.numpy as jnp
  >>> k = delta_orthogonal()(jax.random.key(0), (3, 3, 16, 16), jnp.float8_e5m2)
  >>> k.shape, bool((k[0].astype(jnp.float32) == 0).all())
  ((3, 3, 16, 16), True)
  """
  ortho = _orthogonal_law("delta_orthogonal", scale, column_axis)
  return _rounded("delta_orthogonal",
                  _jax.delta_orthogonal(scale, column_axis, dtype), dtype,
                  lambda shape: ortho(shape[-2:]))


# The factories (and the two plain initializers) jax.nn.initializers has.
FACTORIES: tuple[str, ...] = (
    "constant", "uniform", "normal", "truncated_normal", "variance_scaling",
    "glorot_uniform", "glorot_normal", "xavier_uniform", "xavier_normal",
    "lecun_uniform", "lecun_normal", "he_uniform", "he_normal",
    "kaiming_uniform", "kaiming_normal", "orthogonal", "delta_orthogonal")
INITIALIZERS: tuple[str, ...] = ("zeros", "ones")
