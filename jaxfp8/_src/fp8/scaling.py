"""Per-tensor scaling into narrow formats: amax, scales, quantize.

A narrow format covers a small range (e4m3: 2^-9 .. 448), so a tensor is
divided by a *scale* before the cast and multiplied by it after:
``q = cast(x / scale)``, ``x ~ q * scale``. The scale maps the tensor's
largest magnitude (its *amax*) onto the format's max, less a safety margin of
``2^margin``: ``scale = amax * 2^margin / fmt.max``, or with ``power_of_two=True`` the
power of two at or above it, so that dividing by it is exact and values
already on the format's grid stay there.

* :class:`CurrentScaling` takes amax from the tensor being cast (one extra
  reduction per cast, never saturates).
* :class:`DelayedScaling` takes it from a history of the amaxes of earlier
  steps (reduced with ``max`` or ``most_recent``), so the cast needs no
  reduction first; the state is a pytree and :meth:`DelayedScaling.update`
  returns the next state, like ``jmp.DynamicLossScale.adjust``.

Both are pytrees with the same methods (``format``, ``scale_for``,
``update``, ``quantize``), so code that takes one takes the other.
Loss scaling (jmp's ``DynamicLossScale`` and friends) is another job: it
lives in :mod:`jaxfp8._src.fp8.loss_scaling`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Union

import jax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src import compat
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import rounding as rounding_lib
from jaxfp8._src.numerics import validate
from jaxfp8._src.numerics.cast import cast
from jaxfp8._src.numerics.codes import as_float32
from jaxfp8._src.numerics.codes import decode
from jaxfp8._src.numerics.rounding import to_float32

REDUCTIONS: tuple[str, ...] = ("max", "most_recent", "mean")
# Scales are kept at or above the smallest normal float32: XLA on CPU flushes
# subnormals to zero, and x / 0 would be Inf.
_MIN_SCALE = float(np.finfo(np.float32).tiny)
_MAX_SCALE = float(np.finfo(np.float32).max)
_MAX_MARGIN = 126


def signed_format(fmt: Any, *, arg: str, fn: str) -> formats.Format:
  """The signed narrow format ``fmt`` names, for a scaled tensor.

  Package-internal: every function taking the format of a scaled tensor
  reads it here (this module, the fp8 ``dot_general`` and its Flax modules),
  so they accept the same names and refuse the same formats.

  Args:
    fmt: a name, alias, dtype or Format.
    arg: argument name used in error messages.
    fn: function name used in error messages.

  Raises:
    TypeError, ValueError: as :func:`jaxfp8.formats.get`, or ValueError for
      float8_e8m0fnu, which holds scales (no zero, no sign), not tensors.

  >>> signed_format("e4m3", arg="fmt", fn="f").name
  'float8_e4m3fn'
  """
  f = formats.get_narrow(fmt, arg=arg, fn=fn)
  if not f.signed:
    raise ValueError(f"`{arg}` argument to `{fn}` must be a signed format for "
                     f"scaled tensors, got {f.name} (a scale format: no zero, "
                     "no sign)")
  return f


_SIGN = np.uint32(0x7FFFFFFF)
_INF_BITS = np.uint32(0x7F800000)
_MIN_NORMAL_BITS = np.uint32(0x00800000)
_TWO_64 = np.float32(2.0**64)
# Amaxes below 2^-100 are lifted by 2^64 before the product by 1 / max: the
# product stays normal (every scaled format's max is below 2^26), where XLA
# on CPU would flush a subnormal one and lose a scale that the margin
# brings back into range.
_SMALL_AMAX_BITS = 0x0D800000  # 2^-100


def _magnitude_bits(x32: jax.Array) -> jax.Array:
  return jax.lax.bitcast_convert_type(x32, jnp.uint32) & _SIGN


def _normalized(v: jax.Array, below: int = _MIN_NORMAL_BITS
                ) -> tuple[jax.Array, jax.Array]:
  """``(v * 2^k, k)``, exact: ``k`` is 64 where ``|v|`` is below the float32
  whose bits are ``below`` (at most 2^-64's; by default the subnormals),
  else 0.

  XLA on CPU flushes subnormal operands to zero, so the subnormal's value is
  rebuilt from its mantissa bits (``m * 2^-149 * 2^64 = m * 2^-85``, a normal
  float32) instead of multiplied.
  """
  bits = jax.lax.bitcast_convert_type(v, jnp.uint32)
  mag = bits & _SIGN
  sub = mag < _MIN_NORMAL_BITS
  rebuilt = mag.astype(jnp.float32) * np.float32(2.0**-85)
  rebuilt = jnp.where(bits >> 31 == 1, -rebuilt, rebuilt)
  if below == _MIN_NORMAL_BITS:
    return jnp.where(sub, rebuilt, v), jnp.where(sub, 64, 0)
  lift = mag < below
  return (jnp.where(sub, rebuilt, jnp.where(lift, v * _TWO_64, v)),
          jnp.where(lift, 64, 0))


def divide(x32: jax.Array, scale: jax.Array) -> jax.Array:
  """``x32 / scale`` in float32 as XLA computes it, subnormals included.

  Package-internal: XLA on CPU flushes float32 subnormals to zero, so a
  tensor whose values are subnormal (bf16 values near 1e-38) would divide to
  zeros. Both operands are brought into the normal range by exact powers of
  two first; a quotient that is itself subnormal still flushes, which no
  narrow format can tell from zero.

  The scale is a scalar, and XLA compiles a division by a broadcast scalar
  into a product by its reciprocal (eagerly and under ``jit``, on CPU at
  least): two roundings, which can differ from the IEEE quotient in the last
  bit (``mx.f32.divide`` is the IEEE one). Per-tensor scaling keeps this
  rule; the recipes' golden files pin its bits.

  >>> divide(jnp.float32(1e-39), jnp.float32(2.0**-126))  # NumPy's quotient
  Array(0.08507061, dtype=float32)
  """
  xn, kx = _normalized(x32)
  sn, ks = _normalized(jnp.asarray(scale, jnp.float32))
  q = xn / sn
  shift = ks - kx  # 64, 0 or -64: one exact power-of-two step
  return jnp.where(shift > 0, q * _TWO_64,
                   jnp.where(shift < 0, q * np.float32(2.0**-64), q))


def amax(x: Any) -> jax.Array:
  """Largest magnitude of ``x`` as a float32 scalar (NaN if ``x`` has NaN).

  The max is taken over the magnitudes' bit patterns (integers), so
  subnormal magnitudes count (XLA's float ``max`` on CPU flushes them), and
  NaN, whose patterns sort above Inf's, is never dropped (XLA's
  cross-device float ``max`` on CPU drops NaN; an integer one can't).

  Raises:
    ValueError: for an empty ``x`` (it has no largest magnitude).

  >>> amax(jnp.array([1.0, -3.0, 2.0]))
  Array(3., dtype=float32)
  """
  x32 = as_float32(x)
  if x32.size == 0:
    raise ValueError(f"`x` argument to `amax` must not be empty, got shape "
                     f"{x32.shape}")
  # One reduction, over int32 (< 2^31 here), which XLA on CPU vectorizes
  # better than uint32.
  top = jnp.max(_magnitude_bits(x32).astype(jnp.int32))
  return jnp.where(top > jnp.int32(_INF_BITS), jnp.float32(jnp.nan),
                   jax.lax.bitcast_convert_type(top, jnp.float32))


def _check_previous(previous: Any, fn: str) -> None:
  """ValueError for a concrete ``previous`` scale that is not a positive
  finite float32 (it is what a zero or non-finite amax hands out)."""
  if isinstance(previous, compat.Tracer):
    return
  try:
    p = np.asarray(previous, np.float64)
  except (TypeError, ValueError) as e:
    raise TypeError(f"`previous` argument to `{fn}` must be a number, got "
                    f"{type(previous).__name__}") from e
  if not np.all(np.isfinite(p) & (p > 0) & (p <= _MAX_SCALE)):
    raise ValueError(f"`previous` argument to `{fn}` must be a positive "
                     f"finite scale, got {p}")


def check_scale_value(value: Any, what: str) -> None:
  """TypeError or ValueError (``what`` names the argument) for a concrete
  scale that is not a positive, finite, normal float32 number: a zero,
  NaN, infinite or subnormal scale turns every quantized value into zeros
  or NaN. A traced ``value`` passes (its value is not known here)."""
  if isinstance(value, compat.Tracer):
    return
  try:
    v = np.asarray(value)
    ok_type = v.dtype.kind in "biuf" and v.dtype != bool
    v = v.astype(np.float64)
  except (TypeError, ValueError):
    ok_type = False
  if not ok_type:
    raise TypeError(f"{what} must be a number, got {value!r}")
  if v.size != 1 or not np.all(np.isfinite(v) & (v >= _MIN_SCALE)
                               & (v <= _MAX_SCALE)):
    raise ValueError(f"{what} must be a positive finite float32 scale in "
                     f"[2^-126, {_MAX_SCALE:.6g}] (a normal float32), got "
                     f"{v.tolist() if v.size != 1 else v.item()!r}")


def compute_scale(amax_value: Any, fmt: formats.FormatLike, *, margin: int = 0,
                  power_of_two: bool = False, previous: Any = 1.0) -> jax.Array:
  """The scale that maps ``amax_value`` onto the format's max.

  Args:
    amax_value: the magnitude to fit (a scalar).
    fmt: the narrow format.
    margin: headroom in powers of two: the scale is ``2^margin`` larger
      (an integer, ``|margin| <= 126``).
    power_of_two: round the scale up to a power of two.
    previous: returned where ``amax_value`` is zero or not finite.

  Returns:
    ``amax_value * 2^margin / fmt.max`` as a float32 scalar (the division
    as a product by float32's ``1 / fmt.max``, as XLA compiles it under
    ``jit``, so eager and jitted scales agree), kept within
    float32's normal range (a scale past float32's max is clamped to it, so
    the tensor saturates rather than becoming NaN or zero). A subnormal
    ``amax_value`` is a real amax (its scale is computed exactly, by powers
    of two; below 2^-126 it is clamped there).

  Raises:
    ValueError: for a concrete ``previous`` that is not a positive finite
      number, or a bad ``margin``.

  >>> compute_scale(jnp.float32(896.0), "e4m3")
  Array(2., dtype=float32)
  >>> compute_scale(jnp.float32(0.0), "e4m3", previous=0.5)
  Array(0.5, dtype=float32)
  >>> compute_scale(jnp.float32(500.0), "e4m3", power_of_two=True)
  Array(2., dtype=float32)
  """
  fn = "compute_scale"
  fmt = signed_format(fmt, arg="fmt", fn=fn)
  margin = check_margin(margin, fn)
  _check_previous(previous, fn)
  a = as_float32(amax_value)
  # Times float32(1 / max), then shifted by the margin exactly: no
  # overflowing factor; an amax below 2^-100 is first lifted by 2^64
  # (_SMALL_AMAX_BITS). XLA compiles a division by a constant (or by any
  # broadcast scalar) into this product under jit, while an eager scalar
  # division is exact: written as the product, jit and eager agree. The
  # shift works on the bits (jnp.ldexp and frexp are float chains around a
  # `pow`, a kernel of its own in XLA's program); a scale below 2^-126 comes
  # out 0, which the clip lifts as it lifts every smaller scale.
  an, k = _normalized(a, _SMALL_AMAX_BITS)
  base = jax.lax.bitcast_convert_type(
      an * (np.float32(1) / np.float32(fmt.max)), jnp.uint32) & _SIGN
  scale = jax.lax.bitcast_convert_type(
      rounding_lib.ldexp_or_zero(base, jnp.int32(margin) - k), jnp.float32)
  scale = jnp.clip(scale, _MIN_SCALE, _MAX_SCALE)
  if power_of_two:  # 2^ceil(log2(scale)), at most 2^127
    sb = jax.lax.bitcast_convert_type(scale, jnp.int32)
    e = (sb >> 23) + ((sb & 0x7FFFFF) != 0).astype(jnp.int32)
    scale = jax.lax.bitcast_convert_type(jnp.minimum(e, 254) << 23,
                                         jnp.float32)
  # Classified by bits only: XLA on CPU may treat a subnormal as 0 in one
  # fusion and not in another. Positive (the sign bit clear), not zero, finite.
  bits = jax.lax.bitcast_convert_type(a, jnp.uint32)
  ok = (bits > 0) & (bits < _INF_BITS)
  return jnp.where(ok, scale, jnp.asarray(previous, jnp.float32))


def quantize(x: Any, fmt: formats.FormatLike, scale: Any) -> Any:
  """``cast(x / scale, fmt)``: saturating, round to nearest.

  Returns a native narrow array, or a :class:`jaxfp8.CodeArray` for formats
  the backend can't hold. Gradients pass straight through to ``x / scale``.

  >>> quantize(jnp.array([1.0, 900.0]), "e4m3", 2.0)
  Array([0.5, 448], dtype=float8_e4m3fn)
  """
  fmt = signed_format(fmt, arg="fmt", fn="quantize")
  return cast(divide(as_float32(x), jnp.asarray(scale, jnp.float32)), fmt)


def dequantize(q: Any, scale: Any, dtype: Any = jnp.float32) -> jax.Array:
  """``q * scale`` in ``dtype`` (float32 by default), exact in float32.

  >>> dequantize(quantize(jnp.array([1.0, 900.0]), "e4m3", 2.0), 2.0)
  Array([  1., 896.], dtype=float32)
  """
  return (decode(q, jnp.float32) * jnp.asarray(scale, jnp.float32)).astype(
      dtype)


def check_margin(margin: Any, fn: str) -> int:
  """``margin`` as an int in [-126, 126], or TypeError/ValueError naming
  ``fn``."""
  if not isinstance(margin, (int, np.integer)) or isinstance(margin, bool):
    raise TypeError(f"`margin` argument to `{fn}` must be an integer, got "
                    f"{type(margin).__name__}")
  if abs(int(margin)) > _MAX_MARGIN:
    raise ValueError(f"`margin` argument to `{fn}` must be within "
                     f"[-{_MAX_MARGIN}, {_MAX_MARGIN}] (powers of two of "
                     f"headroom; float32 scales span 2^-126 .. 2^127), got "
                     f"{margin}")
  return int(margin)


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class CurrentScaling:
  """Scales each tensor by its own amax (no state).

  Attributes:
    format: the narrow format tensors are cast to (name, alias or dtype).
    margin: headroom in powers of two.
    power_of_two: round scales up to powers of two.

  >>> s = CurrentScaling("e4m3")
  >>> q, scale = s.quantize(jnp.array([0.5, -896.0]))
  >>> q, scale
  (Array([0.25, -448], dtype=float8_e4m3fn), Array(2., dtype=float32))
  >>> s.update(jnp.float32(7.0)) is s
  True
  """

  format: Any = "float8_e4m3fn"
  margin: int = 0
  power_of_two: bool = False

  def __post_init__(self):
    fmt = signed_format(self.format, arg="format", fn="CurrentScaling")
    object.__setattr__(self, "power_of_two", bool(self.power_of_two))
    object.__setattr__(self, "format", fmt.name)
    object.__setattr__(self, "margin", check_margin(self.margin,
                                                     "CurrentScaling"))

  def tree_flatten(self):
    return (), (self.format, self.margin, self.power_of_two)

  @classmethod
  def tree_unflatten(cls, aux, children):
    del children
    return cls(*aux)

  def scale_for(self, x: Any) -> jax.Array:
    """The scale for ``x``: from ``x``'s own amax (no gradient flows through
    it: quantize-dequantize is then a straight-through identity, as in
    Flax's fp8 ops)."""
    return jax.lax.stop_gradient(compute_scale(
        amax(x), self.format, margin=self.margin,
        power_of_two=self.power_of_two))

  def update(self, amax_value: Any) -> CurrentScaling:
    """Current scaling keeps no state: returns ``self``."""
    del amax_value
    return self

  def quantize(self, x: Any) -> tuple[Any, jax.Array]:
    """``(cast(x / scale), scale)`` with ``scale = scale_for(x)``."""
    scale = self.scale_for(x)
    return quantize(x, self.format, scale), scale


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class DelayedScaling:
  """Scales tensors by the amax seen in earlier steps (pytree state).

  ``scale`` is the scale to use now; ``amax_history[0]`` is the most recent
  amax. :meth:`update` records a new amax and recomputes the scale from the
  reduced history: a pure function returning the next state, usable under
  ``jit``. Create one with :meth:`create`.

  Attributes:
    amax_history: float32 array ``(history_length,)``, most recent first.
    scale: float32 scalar, the scale to quantize with.
    format: the narrow format (static).
    reduction: ``"max"``, ``"most_recent"``, ``"mean"`` or a function from
      the history to a scalar (static).
    margin: headroom in powers of two (static).
    power_of_two: round scales up to powers of two (static).

  >>> s = DelayedScaling.create("e4m3", history_length=4)
  >>> s.scale
  Array(1., dtype=float32)
  >>> s = jax.jit(DelayedScaling.update)(s, jnp.float32(896.0))
  >>> s.amax_history, s.scale
  (Array([896.,   0.,   0.,   0.], dtype=float32), Array(2., dtype=float32))
  >>> s.update(jnp.float32(224.0)).scale  # max over the history
  Array(2., dtype=float32)
  """

  amax_history: Any
  scale: Any
  format: Any = "float8_e4m3fn"
  reduction: Union[str, Callable[[jax.Array], jax.Array]] = "max"
  margin: int = 0
  power_of_two: bool = False

  def __post_init__(self):
    fmt = signed_format(self.format, arg="format", fn="DelayedScaling")
    object.__setattr__(self, "power_of_two", bool(self.power_of_two))
    object.__setattr__(self, "format", fmt.name)
    if not callable(self.reduction):
      validate.check_choice(self.reduction, REDUCTIONS, "reduction",
                            "DelayedScaling")
    object.__setattr__(self, "margin", check_margin(self.margin,
                                                     "DelayedScaling"))

  @classmethod
  def create(cls, format: Any = "float8_e4m3fn", *,  # pylint: disable=redefined-builtin
             history_length: int = 16,
             reduction: Union[str, Callable[[jax.Array], jax.Array]] = "max",
             margin: int = 0, power_of_two: bool = False,
             initial_scale: float = 1.0) -> DelayedScaling:
    """A fresh state: empty (zero) history and ``initial_scale``.

    Args:
      format: the narrow format.
      history_length: how many past amaxes to keep (at least 1).
      reduction: how the history becomes one amax: ``"max"`` (default),
        ``"most_recent"``, ``"mean"`` or a function of the history.
      margin: headroom in powers of two.
      power_of_two: round scales up to powers of two.
      initial_scale: the scale before any amax was seen.
    """
    if (not isinstance(history_length, (int, np.integer))
        or isinstance(history_length, bool) or history_length < 1):
      raise ValueError(f"`history_length` argument to `DelayedScaling.create` "
                       f"must be a positive integer, got {history_length!r}")
    check_scale_value(initial_scale,
                      "`initial_scale` argument to `DelayedScaling.create`")
    return cls(jnp.zeros((int(history_length),), jnp.float32),
               jnp.asarray(initial_scale, jnp.float32), format, reduction,
               margin, power_of_two)

  def tree_flatten(self):
    return ((self.amax_history, self.scale),
            (self.format, self.reduction, self.margin, self.power_of_two))

  @classmethod
  def tree_unflatten(cls, aux, children):
    obj = object.__new__(cls)
    for name, value in zip(("amax_history", "scale", "format", "reduction",
                            "margin", "power_of_two"),
                           (*children, *aux)):
      object.__setattr__(obj, name, value)
    return obj

  @property
  def history_length(self) -> int:
    return int(self.amax_history.shape[0])

  def reduced_amax(self, history: Any = None) -> jax.Array:
    """The history reduced to one amax."""
    h = self.amax_history if history is None else history
    if callable(self.reduction):
      return jnp.asarray(self.reduction(h), jnp.float32)
    if self.reduction == "max":
      # Over the bit patterns: amaxes are >= 0 (or NaN, whose pattern is the
      # largest), and XLA's float max on CPU flushes subnormal amaxes.
      top = jnp.max(jax.lax.bitcast_convert_type(h, jnp.int32))
      return jnp.where(top >= 0, jax.lax.bitcast_convert_type(top, jnp.float32),
                       jnp.max(h))
    if self.reduction == "mean":
      return jnp.mean(h)
    return h[0]

  def scale_for(self, x: Any) -> jax.Array:
    """The stored scale (``x`` is not looked at)."""
    del x
    return self.scale

  def update(self, amax_value: Any) -> DelayedScaling:
    """Records ``amax_value`` and recomputes the scale; returns a new state.

    A zero or non-finite amax is recorded, but a reduced amax that is zero
    or not finite keeps the previous scale.
    """
    a = to_float32(amax_value, fn="DelayedScaling.update", arg="amax_value")
    if a.size != 1:
      raise ValueError(f"`amax_value` argument to `DelayedScaling.update` "
                       f"must be a scalar, got shape {a.shape}")
    a = a.reshape(())
    history = jnp.roll(self.amax_history, 1).at[0].set(a)
    scale = compute_scale(self.reduced_amax(history), self.format,
                          margin=self.margin, power_of_two=self.power_of_two,
                          previous=self.scale)
    return dataclasses.replace(self, amax_history=history, scale=scale)

  def quantize(self, x: Any) -> tuple[Any, jax.Array]:
    """``(cast(x / scale), scale)`` with the stored scale."""
    return quantize(x, self.format, self.scale), self.scale


Scaling = Union[CurrentScaling, DelayedScaling]
