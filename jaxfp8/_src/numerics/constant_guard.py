"""Guards JAX's constant lowering against formats the backend can't hold.

A float6 NumPy constant that reaches ``jit`` lowering aborts the whole
process with an XLA check failure: on JAX 0.10, which has no float6 type,
and on 0.11.2 and 0.12.0.1, which have one but can't lower its constants.
``import jaxfp8`` calls :func:`guard_constants`: the NumPy constant handlers first check the dtype;
formats the backend holds lower unchanged, others raise a ``TypeError``
naming the format and pointing to ``jaxfp8.encode``.
"""
from __future__ import annotations

from jaxfp8._src import compat
from jaxfp8._src.numerics import formats

# The handlers guard_constants replaced, by array type.
_ORIGINALS: dict[type, object] = {}


def _unlowerable(dtype) -> formats.Format | None:
  try:
    fmt = formats.get(dtype)
  except (TypeError, ValueError):
    return None
  # Native formats lower. Those the backend holds but doesn't compute with
  # (compat.HELD_BUT_NOT_COMPUTED_BITS) are not native: JAX 0.11.2 holds
  # float6 arrays, but lowering a float6 constant still aborts (XLA: "Check
  # failed ... (0 vs. 64)" in array.h), as on 0.10.
  return None if fmt.native else fmt


def _guarded(original):
  def handler(val, aval=None):
    fmt = _unlowerable(getattr(val, "dtype", None))
    if fmt is not None:
      raise TypeError(
          f"A NumPy constant of dtype {fmt.name} reached jit, but the installed "
          f"JAX/XLA backend can't lower {fmt.name} constants (lowering it "
          f"would abort the process). Store it as codes with jaxfp8.encode(x, "
          f"'{fmt.name}') and read it with jaxfp8.decode, or cast it to a "
          f"wider dtype first.")
    return original(val, aval)
  handler.jaxfp8_guard = True
  return handler


def guard_constants() -> None:
  """Wraps JAX's NumPy constant handlers in the format check (idempotent).

  >>> import jaxfp8
  >>> from jaxfp8._src.numerics import constant_guard
  >>> constant_guard.guard_constants(); constant_guard.constants_guarded()
  True
  """
  for t in compat.ndarray_constant_types():
    original = compat.get_constant_handler(t)
    if original is None or getattr(original, "jaxfp8_guard", False):
      continue
    _ORIGINALS[t] = original
    compat.register_constant_handler(t, _guarded(original))


def unguard_constants() -> None:
  """Gives JAX its own constant handlers back."""
  for t, original in _ORIGINALS.items():
    compat.register_constant_handler(t, original)
  _ORIGINALS.clear()


def constants_guarded() -> bool:
  """Whether every handler :func:`guard_constants` wrapped is still wrapped."""
  return bool(_ORIGINALS) and all(
      getattr(compat.get_constant_handler(t), "jaxfp8_guard", False)
      for t in _ORIGINALS)


__all__ = ["constants_guarded", "guard_constants", "unguard_constants"]
