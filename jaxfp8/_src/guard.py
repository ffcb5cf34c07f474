"""Guards JAX's constant lowering against formats the backend can't hold.

On JAX 0.10 a float6 NumPy constant that reaches ``jit`` lowering aborts the
whole process with an XLA check failure. After ``import jaxfp8`` the NumPy
constant handlers first check the dtype: formats the backend holds lower
unchanged; others raise a ``TypeError`` naming the format and pointing to
``jaxfp8.encode``.
"""
from __future__ import annotations


from jaxfp8._src import compat
from jaxfp8._src import formats

_ORIGINALS: dict[type, object] = {}


def _unlowerable(dtype) -> formats.Format | None:
  try:
    fmt = formats.get(dtype)
  except (TypeError, ValueError):
    return None
  return None if fmt.native else fmt


def _guarded(original):
  def handler(val, aval=None):
    fmt = _unlowerable(getattr(val, "dtype", None))
    if fmt is not None:
      raise TypeError(
          f"A NumPy constant of dtype {fmt.name} reached jit, but the installed "
          f"JAX/XLA backend has no {fmt.name} type (lowering it would abort "
          f"the process). Store it as codes with jaxfp8.encode(x, "
          f"'{fmt.name}') and read it with jaxfp8.decode, or cast it to a "
          f"wider dtype first.")
    return original(val, aval)
  handler.jaxfp8_guard = True
  return handler


def install() -> None:
  """Wraps the NumPy constant handlers once (idempotent)."""
  for t in compat.ndarray_constant_types():
    original = compat.get_constant_handler(t)
    if original is None or getattr(original, "jaxfp8_guard", False):
      continue
    _ORIGINALS[t] = original
    compat.register_constant_handler(t, _guarded(original))


def uninstall() -> None:
  """Restores JAX's own handlers."""
  for t, original in _ORIGINALS.items():
    compat.register_constant_handler(t, original)
  _ORIGINALS.clear()


def is_installed() -> bool:
  return bool(_ORIGINALS) and all(
      getattr(compat.get_constant_handler(t), "jaxfp8_guard", False)
      for t in _ORIGINALS)


__all__ = ["install", "uninstall", "is_installed"]
