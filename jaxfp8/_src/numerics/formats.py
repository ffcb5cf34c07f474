"""The format registry: one table, everything else derived from it.

Each row names a format and its aliases; bits, exponent and mantissa widths,
bias, limits, special values and the table of every exact value come from
``ml_dtypes`` (the dtype's ``finfo`` and an enumeration of its codes), so the
registry can never disagree with the numbers NumPy and JAX use.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import math
from typing import Any, Union
import warnings

import ml_dtypes
import numpy as np

from jaxfp8._src import compat

# name, aliases, narrow.  "e4m3" means the OCP E4M3 format (float8_e4m3fn),
# the one every fp8 paper and accelerator means; the IEEE-style float8_e4m3
# (with infinities) is "e4m3ieee".
_TABLE: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("float8_e4m3fn", ("e4m3fn", "e4m3", "fp8_e4m3", "f8e4m3fn"), True),
    ("float8_e5m2", ("e5m2", "fp8_e5m2", "f8e5m2"), True),
    ("float8_e4m3fnuz", ("e4m3fnuz", "f8e4m3fnuz"), True),
    ("float8_e5m2fnuz", ("e5m2fnuz", "f8e5m2fnuz"), True),
    ("float8_e4m3b11fnuz", ("e4m3b11fnuz", "e4m3b11", "f8e4m3b11fnuz"), True),
    ("float8_e4m3", ("e4m3ieee", "f8e4m3"), True),
    ("float8_e3m4", ("e3m4", "f8e3m4"), True),
    ("float8_e8m0fnu", ("e8m0fnu", "e8m0", "f8e8m0fnu"), True),
    ("float6_e2m3fn", ("e2m3fn", "e2m3", "fp6_e2m3", "f6e2m3fn"), True),
    ("float6_e3m2fn", ("e3m2fn", "e3m2", "fp6_e3m2", "f6e3m2fn"), True),
    ("float4_e2m1fn", ("e2m1fn", "e2m1", "fp4", "fp4_e2m1", "f4e2m1fn"), True),
    ("bfloat16", ("bf16",), False),
    ("float16", ("f16", "half"), False),
    ("float32", ("f32", "float", "full", "single"), False),
)


def _np_dtype(name: str) -> np.dtype:
  if hasattr(ml_dtypes, name):
    return np.dtype(getattr(ml_dtypes, name))
  return np.dtype(name)


@dataclasses.dataclass(frozen=True, eq=False)
class Format:
  """A floating-point format: its layout, limits and exact values.

  Formats are singletons obtained with :func:`get`; compare them with ``is``
  or ``==``.

  >>> fmt = get("e4m3")
  >>> fmt.name, fmt.bits, fmt.exponent_bits, fmt.mantissa_bits, fmt.bias
  ('float8_e4m3fn', 8, 4, 3, 7)
  >>> fmt.max, fmt.min_normal, fmt.min_subnormal
  (448.0, 0.015625, 0.001953125)
  >>> fmt.has_inf, fmt.has_nan, len(fmt.values)
  (False, True, 253)
  """

  name: str
  aliases: tuple[str, ...]
  narrow: bool
  dtype: np.dtype

  # -- layout -----------------------------------------------------------------
  @functools.cached_property
  def _finfo(self):
    return ml_dtypes.finfo(self.dtype)

  @property
  def bits(self) -> int:
    """Total width in bits."""
    return int(self._finfo.bits)

  @property
  def exponent_bits(self) -> int:
    return int(self._finfo.nexp)

  @property
  def mantissa_bits(self) -> int:
    """Explicit (stored) mantissa bits."""
    return int(self._finfo.nmant)

  @property
  def signed(self) -> bool:
    """Whether the format has a sign bit (E8M0 has none)."""
    return self.exponent_bits + self.mantissa_bits < self.bits

  @property
  def min_exponent(self) -> int:
    """Exponent of the smallest normal number."""
    return int(math.log2(self.min_normal))

  @property
  def bias(self) -> int:
    """Exponent bias: a normal value is 2^(e - bias) * 1.m."""
    return 1 - self.min_exponent if self.mantissa_bits else -self.min_exponent

  @property
  def max(self) -> float:
    return float(self._finfo.max)

  @property
  def min_normal(self) -> float:
    return float(self._finfo.smallest_normal)

  @property
  def min_subnormal(self) -> float:
    """Smallest positive value (the smallest normal if there are no subnormals)."""
    return float(self._finfo.smallest_subnormal)

  @property
  def eps(self) -> float:
    """Distance from 1 to the next larger value."""
    return float(self._finfo.eps)

  # -- special values -----------------------------------------------------------
  @functools.cached_property
  def _all_codes_f64(self) -> np.ndarray:
    """The value of every code; float32 stands in by its IEEE specials."""
    if self.bits > 16:
      return np.array([0.0, -0.0, np.inf, -np.inf, np.nan])
    codes = np.arange(2**self.bits, dtype=np.uint32)
    codes = codes.astype(np.uint16 if self.bits > 8 else np.uint8)
    with np.errstate(invalid="ignore"):
      return codes.view(self.dtype).astype(np.float64)

  def _code_of(self, x: float) -> int:
    # Sub-byte formats are stored one value per byte, so 4 and 6 bits view as
    # uint8; 16- and 32-bit formats need an unsigned integer of their width.
    width = np.dtype(f"uint{max(8, self.bits)}")
    return int(np.array([x], np.float32).astype(self.dtype).view(width)[0])

  @property
  def has_inf(self) -> bool:
    return bool(np.isinf(self._all_codes_f64).any())

  @property
  def has_nan(self) -> bool:
    return bool(np.isnan(self._all_codes_f64).any())

  @property
  def has_negative_zero(self) -> bool:
    return bool(np.signbit(self._all_codes_f64[self._all_codes_f64 == 0]).any())

  @property
  def nan_code(self) -> int | None:
    """The code a float32 NaN converts to, or None without a NaN encoding."""
    return self._code_of(np.nan) if self.has_nan else None

  @property
  def nan_codes(self) -> tuple[int, ...]:
    return tuple(int(c) for c in np.flatnonzero(np.isnan(self._all_codes_f64)))

  @property
  def inf_code(self) -> int | None:
    """The code of +Inf, or None without infinities."""
    return self._code_of(np.inf) if self.has_inf else None

  # -- exact value tables (narrow formats and 16-bit formats) --------------------
  @functools.cached_property
  def _value_table(self) -> tuple[np.ndarray, np.ndarray]:
    if self.bits > 16:
      raise ValueError(f"{self.name} has too many values to enumerate")
    codes = np.arange(2**self.bits, dtype=np.uint32)
    vals = self._all_codes_f64
    keep = np.isfinite(vals) & ~((vals == 0) & np.signbit(vals))
    order = np.argsort(vals[keep], kind="stable")
    values, codes = vals[keep][order], codes[keep][order]
    for a in (values, codes):
      a.setflags(write=False)
    return values, codes

  @property
  def values(self) -> np.ndarray:
    """Every finite value, sorted ascending, as float64 (zero once, as +0)."""
    return self._value_table[0]

  @property
  def codes(self) -> np.ndarray:
    """The bit pattern of each entry of :attr:`values`, as uint32."""
    return self._value_table[1]

  @functools.cached_property
  def code_table(self) -> np.ndarray:
    """float32 value of every code 0 .. 2^bits - 1 (NaN and Inf included)."""
    table = self._all_codes_f64.astype(np.float32)
    table.setflags(write=False)
    return table

  # -- what the installed JAX can do ----------------------------------------------
  @property
  def native(self) -> bool:
    """Whether the installed JAX/XLA backend holds and computes with arrays
    of this format.

    Found out once per process by a transfer that fails with an exception,
    never an abort (:func:`compat.backend_holds`: float6, which JAX 0.11.2's
    CPU backend holds but can't compute with, is not native). Formats that
    are not native are stored as uint8 codes (:class:`jaxfp8.CodeArray`).
    """
    return compat.backend_holds(self.dtype)

  @property
  def storage_dtype(self) -> np.dtype:
    """dtype of the arrays that hold this format: itself, or uint8 codes."""
    return self.dtype if self.native else np.dtype(np.uint8)

  def __repr__(self) -> str:
    return f"Format({self.name})"

  def __reduce__(self):
    # Copies and unpickled Formats are the registry's own (``==`` is ``is``).
    return get, (self.name,)

  def __str__(self) -> str:
    return self.name


FormatLike = Union[str, np.dtype, type, Format, Any]

_FORMATS: dict[str, Format] = {
    name: Format(name, aliases, narrow, _np_dtype(name))
    for name, aliases, narrow in _TABLE
}
_BY_NAME: dict[str, Format] = {}
for _f in _FORMATS.values():
  for _n in (_f.name, *_f.aliases):
    _BY_NAME[_n] = _f
_BY_DTYPE: dict[np.dtype, Format] = {f.dtype: f for f in _FORMATS.values()}


def names(*, narrow: bool | None = None) -> tuple[str, ...]:
  """Canonical names of the registered formats, narrow ones first.

  Args:
    narrow: True for the narrow formats only, False for the wide ones only.

  >>> names(narrow=True)[:3]
  ('float8_e4m3fn', 'float8_e5m2', 'float8_e4m3fnuz')
  """
  return tuple(f.name for f in _FORMATS.values()
               if narrow is None or f.narrow == narrow)


def all_names() -> tuple[str, ...]:
  """Every accepted name: canonical names and aliases."""
  return tuple(_BY_NAME)


def _describe(x: Any) -> str:
  return repr(x) if isinstance(x, str) else f"{type(x).__name__} {x!r}"


def get(fmt: FormatLike, *, arg: str = "fmt", fn: str = "get") -> Format:
  """Looks up a format by name, alias, dtype, scalar type or Format.

  Args:
    fmt: a registered name or alias (``"float8_e4m3fn"``, ``"e4m3"``,
      ``"bf16"``, ``"float32"``; see :func:`all_names`), a dtype or scalar type
      (``jnp.float8_e4m3fn``, ``np.dtype("float16")``) or a :class:`Format`.
    arg: argument name used in error messages.
    fn: function name used in error messages.

  Returns:
    The registered :class:`Format`.

  Raises:
    ValueError: for a string that is not a registered name or alias (the
      message lists the nearest names). NumPy type codes such as ``"f4"``
      are not names: pass the dtype itself.
    TypeError: for a dtype that is not a registered format (int8, say), or
      something that is not a dtype (None, a list).

  >>> get("e5m2").name
  'float8_e5m2'
  >>> import jax.numpy as jnp
  >>> get(jnp.float4_e2m1fn).bits
  4
  >>> get("e4m2")
  Traceback (most recent call last):
  ...
  ValueError: Unknown format 'e4m2' for argument `fmt` of `get`; did you mean ...
  """
  if isinstance(fmt, Format):
    return fmt
  if isinstance(fmt, str):
    key = fmt.strip().lower()
    if key in _BY_NAME:
      return _BY_NAME[key]
    close = difflib.get_close_matches(key, all_names(), n=5, cutoff=0.5)
    hint = f"did you mean {', '.join(map(repr, close))}? " if close else ""
    # NumPy's type codes are not format names: "f4" (float32) is a typo for
    # "fp4" as often as not, so only dtype objects reach NumPy's parser.
    try:
      with warnings.catch_warnings():  # NumPy 2 deprecates some codes ("a")
        warnings.simplefilter("ignore")
        numpy_dtype = np.dtype(key)
    except (TypeError, ValueError):
      numpy_dtype = None
    numpy_hint = (f"({fmt!r} is NumPy's code for {numpy_dtype.name}: pass the "
                  f"dtype, not a string, to mean that) "
                  if numpy_dtype in _BY_DTYPE else "")
    if numpy_dtype is not None and numpy_dtype.name == key:
      # A real dtype's full name ("float64", "int32"): the wrong kind of
      # type, as the dtype object itself would be.
      raise TypeError(
          f"`{arg}` argument to `{fn}` must be a floating format "
          f"({', '.join(names())}), got {key}")
    raise ValueError(
        f"Unknown format {fmt!r} for argument `{arg}` of `{fn}`; {hint}"
        f"{numpy_hint}valid names: {', '.join(names())}")
  if fmt is None:
    raise TypeError(f"`{arg}` argument to `{fn}` must be a format name, dtype "
                    f"or Format, got None (None is not a format)")
  try:
    dtype = np.dtype(fmt)
  except (TypeError, ValueError) as e:
    raise TypeError(
        f"`{arg}` argument to `{fn}` must be a format name, dtype or Format, "
        f"got {_describe(fmt)}") from e
  if dtype not in _BY_DTYPE:
    raise TypeError(
        f"`{arg}` argument to `{fn}` must be a floating format "
        f"({', '.join(names())}), got {dtype.name}")
  return _BY_DTYPE[dtype]


def get_narrow(fmt: FormatLike, *, arg: str = "dtype", fn: str = "get") -> Format:
  """Like :func:`get`, but only narrow (sub-16-bit) formats are accepted."""
  f = get(fmt, arg=arg, fn=fn)
  if not f.narrow:
    raise TypeError(f"`{arg}` argument to `{fn}` must be a narrow format "
                    f"({', '.join(names(narrow=True))}), got {f.name}")
  return f


def get_dtype(dtype: Any, *, arg: str = "dtype", fn: str = "get",
              float64: bool = True) -> np.dtype:
  """The one rule for a ``dtype`` argument: the registry's, plus float64.

  Every function that takes a dtype or format reads it here, so every alias
  (``"bf16"``, ``"f16"``, ``"e4m3"``) works everywhere. Accepted: whatever
  :func:`get` accepts (registered names, aliases, dtypes, scalar types and
  Formats), Python's ``float`` (JAX's default float: float32 unless x64 is
  on), and, where ``float64`` is True, float64 as a dtype or the names
  ``"float64"``/``"f64"``.

  Returns:
    The NumPy dtype (``np.dtype``).

  Raises:
    TypeError, ValueError: as :func:`get`, naming ``fn`` and ``arg``.

  >>> get_dtype("bf16"), get_dtype("e4m3"), get_dtype("f64")
  (dtype(bfloat16), dtype(float8_e4m3fn), dtype('float64'))
  """
  if dtype is float:  # JAX's default float, as jnp.dtype(float) reads it
    return np.dtype(np.float64 if compat.x64_enabled() else np.float32)
  if float64 and _is_float64(dtype):
    return np.dtype(np.float64)
  return get(dtype, arg=arg, fn=fn).dtype


def result_dtype(dtype: Any, *, fn: str,
                 arg: str = "preferred_element_type") -> np.dtype:
  """The one rule for a product's result dtype (``preferred_element_type``).

  As :func:`get_dtype` (every name and alias, float64), plus NumPy's integer
  and bool dtypes; a narrow format must be one XLA holds.

  Raises:
    ValueError: an unknown name (``"bogus"``), naming ``fn`` and ``arg``.
    TypeError: something that is no dtype, or a format XLA can't hold
      (float6: take float32 and round it with ``jaxfp8.cast``).

  >>> result_dtype("bf16", fn="matmul"), result_dtype("int32", fn="matmul")
  (dtype(bfloat16), dtype('int32'))
  """
  try:
    out = get_dtype(dtype, arg=arg, fn=fn)
  except TypeError:
    try:
      out = np.dtype(dtype)
    except TypeError:
      out = None
    if out is None or out.kind not in "biu":
      raise
  if is_narrow(out) and not get(out).native:
    raise TypeError(
        f"`{arg}` argument to `{fn}` is {out.name}, which XLA can't hold; "
        f"take float32 and round it with jaxfp8.cast (or jaxfp8.encode)")
  return out


def _is_float64(dtype: Any) -> bool:
  if isinstance(dtype, str):
    return dtype.strip().lower() in ("float64", "f64", "double")
  if isinstance(dtype, Format) or dtype is None:
    return False
  try:
    return np.dtype(dtype) == np.float64
  except (TypeError, ValueError):
    return False


def is_narrow(dtype: Any) -> bool:
  """Whether ``dtype`` names a registered narrow format (never raises).

  >>> import jax.numpy as jnp
  >>> is_narrow(jnp.float8_e4m3fn), is_narrow(jnp.float32), is_narrow("e2m1")
  (True, False, True)
  """
  try:
    return get(dtype).narrow
  except (TypeError, ValueError):
    return False


def all_formats(*, narrow: bool | None = None) -> tuple[Format, ...]:
  """The registered Format objects (see :func:`names`)."""
  return tuple(_FORMATS[n] for n in names(narrow=narrow))
