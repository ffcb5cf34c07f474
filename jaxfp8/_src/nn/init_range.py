"""Does a format hold an initializer's weights? The range check and its advice.

An initializer for a narrow format draws float32 weights and rounds them once
(:mod:`jaxfp8._src.nn.initializers`). When the format can't honour the request
(most weights would round to zero, or a visible share would saturate at the
format's largest value) :func:`check_range` warns with a
:class:`FormatRangeWarning`, suggesting a power-of-two scale and formats that
would fit. The masses come from the law of the float32 weights (:class:`Law`),
measured with the CDFs of the distribution table
(:mod:`jaxfp8._src.random.distributions`).

>>> law = Law("normal", 1e-3)  # weights of std 1e-3: share rounding to zero
>>> round(law.zero_mass(formats.get("float8_e5m2")), 4)
0.0061
>>> round(law.zero_mass(formats.get("float8_e4m3fn")), 4)
0.6712
"""
from __future__ import annotations

import dataclasses
import math
import sys
import warnings
from typing import Literal

from jaxfp8._src.numerics import formats
from jaxfp8._src.random import cdfs
from jaxfp8._src.random import distributions

# Share of weights rounding to zero / saturating above which we warn.
ZERO_LIMIT = 0.5
SATURATION_LIMIT = 0.01
# A format "fits" a law (for the advice in the warning) below these.
_FIT_ZERO, _FIT_SATURATION = 0.05, 1e-4


class FormatRangeWarning(UserWarning):
  """An initializer's weights don't fit the range of the requested format."""


@dataclasses.dataclass(frozen=True)
class Law:
  """A symmetric-enough description of float32 weights: enough for range.

  ``kind`` is ``"normal"`` (``scale`` is the std; ``lower``/``upper`` in units
  of it truncate, infinite when not truncated), ``"uniform"`` on
  ``[lower, upper)`` (``scale`` unused) or ``"constant"`` (``lower`` is the
  value).
  """
  kind: Literal["normal", "uniform", "constant"]
  scale: float = 1.0
  lower: float = -math.inf
  upper: float = math.inf

  def _atom(self) -> float | None:
    """Where the weights all are, for a law that is a single point."""
    if self.kind == "constant":
      return self.lower
    if self.kind == "uniform" and self.upper <= self.lower:
      return self.lower
    if self.kind == "normal" and self.scale == 0:
      return 0.0
    return None

  def _table(self) -> tuple[str, dict[str, float], float]:
    """(distribution of the table, its parameters, the unit of ``x``)."""
    if self.kind == "uniform":
      return "uniform", {"minval": self.lower, "maxval": self.upper}, 1.0
    if math.isinf(self.lower) and math.isinf(self.upper):
      return "normal", {}, self.scale
    return ("truncated_normal", {"lower": self.lower, "upper": self.upper},
            self.scale)

  def cdf(self, x: float) -> float:
    """P(X <= x) in float64."""
    atom = self._atom()
    if atom is not None:
      return 1.0 if x >= atom else 0.0
    name, params, unit = self._table()
    return float(distributions.cdf(name, x / unit, **params))

  def sf(self, x: float) -> float:
    """P(X > x) in float64, accurate in the right tail."""
    atom = self._atom()
    if atom is not None:
      return 0.0 if x >= atom else 1.0
    name, params, unit = self._table()
    return float(distributions.sf(name, x / unit, **params))

  def mass_between(self, a: float, b: float) -> float:
    return max(self.cdf(b) - self.cdf(a), 0.0)

  def std(self) -> float:
    if self.kind == "constant":
      return 0.0
    if self.kind == "uniform":
      return (self.upper - self.lower) / math.sqrt(12.0)
    if math.isinf(self.lower) and math.isinf(self.upper):
      return self.scale
    a, b = self.lower, self.upper
    pa, pb = math.exp(-a * a / 2), math.exp(-b * b / 2)
    z = math.sqrt(2 * math.pi) * (cdfs.ndtr(b) - cdfs.ndtr(a))
    mean = (pa - pb) / z
    var = 1 + (a * pa - b * pb) / z - mean**2
    return self.scale * math.sqrt(max(var, 0.0))

  def atom_at_zero(self) -> float:
    """P(X == 0): 1 for a law that is exactly zero (a zero scale)."""
    return float(self._atom() == 0)

  def zero_mass(self, fmt: formats.Format) -> float:
    """Share of nonzero weights that round to zero (ties at the boundary
    don't); weights that are exactly zero are held exactly."""
    h = fmt.min_subnormal / 2
    if self.kind == "constant":
      return float(self.lower != 0 and abs(self.lower) <= h)
    return self.mass_between(-h, h) - self.atom_at_zero()

  def saturated_mass(self, fmt: formats.Format) -> float:
    """Share of weights beyond the format's largest value (clipped to it)."""
    if self.kind == "constant":
      return float(abs(self.lower) > fmt.max)
    return self.cdf(-fmt.max) + self.sf(fmt.max)

  def negative_mass(self) -> float:
    """Share of weights that are negative or zero (E8M0 can't hold them)."""
    return self.cdf(0.0)

  def describe(self) -> str:
    if self.kind == "constant":
      return f"the constant {self.lower:.6g}"
    if self.kind == "uniform":
      return f"uniform on [{self.lower:.4g}, {self.upper:.4g})"
    text = f"a normal with std {self.scale:.4g}"
    if math.isinf(self.lower) and math.isinf(self.upper):
      return text
    return f"{text} truncated to [{self.lower:.3g}, {self.upper:.3g}] std"


def _suggested_shift(law: Law, fmt: formats.Format) -> int:
  """k such that weights times 2^k sit mid-range of ``fmt`` (geometrically)."""
  spread = abs(law.lower) if law.kind == "constant" else law.std()
  if not (spread > 0 and math.isfinite(spread)):
    return 0
  target = math.sqrt(fmt.min_normal * fmt.max) if fmt.max > 1 else fmt.max / 4
  # In logs: target / spread overflows for a subnormal spread (5e-324).
  return round(math.log2(target) - math.log2(spread))


def _fitting_formats(law: Law, fmt: formats.Format) -> list[str]:
  return [f.name for f in formats.all_formats(narrow=True)
          if f is not fmt and f.signed and f.native
          and law.zero_mass(f) < _FIT_ZERO
          and law.saturated_mass(f) < _FIT_SATURATION]


def _caller_stacklevel() -> int:
  """``warnings.warn`` stacklevel of the first frame outside jaxfp8 and JAX
  (user code, or the Flax/Haiku layer), seen from :func:`check_range`."""
  level, frame = 1, sys._getframe(1)  # pylint: disable=protected-access
  while frame is not None and frame.f_globals.get(
      "__name__", "").split(".")[0] in ("jaxfp8", "jax"):
    frame, level = frame.f_back, level + 1
  return level


def check_range(fn: str, law: Law | None, fmt: formats.Format) -> None:
  """Warns (or raises for E8M0) when ``law`` doesn't fit ``fmt``.

  Args:
    fn: the initializer named in the message.
    law: the law of the float32 weights; None (unknown: traced parameters)
      checks nothing.
    fmt: the narrow format the weights are rounded into.

  Raises:
    ValueError: for an unsigned format (E8M0) and weights that can be zero or
      negative: it can hold neither.

  >>> import warnings
  >>> with warnings.catch_warnings(record=True) as w:
  ...   warnings.simplefilter("always")
  ...   check_range("normal", Law("normal", 100.0), formats.get("e2m1"))
  >>> "saturate at +-6" in str(w[0].message)
  True
  """
  if law is None:
    return
  if law.kind == "constant" and math.isnan(law.lower):
    if fmt.has_nan:
      return  # asked for, and held
    raise ValueError(f"`value` argument to `{fn}` is NaN, which {fmt.name} "
                     "can't hold (it has no NaN encoding)")
  if not fmt.signed and law.negative_mass() > 0:
    raise ValueError(
        f"`{fn}` can't draw {law.describe()} in {fmt.name}: it is a scale "
        f"format (powers of two, no zero, no sign). Use a signed format such "
        f"as float8_e4m3fn for weights.")
  zero, sat = law.zero_mass(fmt), law.saturated_mass(fmt)
  if zero < ZERO_LIMIT and sat < SATURATION_LIMIT:
    return
  problem = (f"{zero:.1%} of them round to zero" if zero >= ZERO_LIMIT else
             f"{sat:.2%} of them saturate at +-{fmt.max:g}")
  k = _suggested_shift(law, fmt)
  fits = _fitting_formats(law, fmt)
  advice = (f"Multiply the weights by 2^{k} (keep the inverse as a per-tensor "
            f"scale)" if k else "Use a scale of your own")
  if fits:
    advice += f", or use a format that holds this range: {', '.join(fits)}"
  warnings.warn(
      f"`{fn}` was asked for weights from {law.describe()} in {fmt.name}, "
      f"but {problem}: {fmt.name} holds magnitudes from "
      f"{fmt.min_subnormal:g} (smallest nonzero) to {fmt.max:g}. {advice}.",
      FormatRangeWarning, stacklevel=_caller_stacklevel())
