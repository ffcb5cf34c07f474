"""A public module's ``__getattr__``: deprecated names that warn, and names
that load on first use.

A public module lists its deprecated names in a table ``name -> (module
under jaxfp8._src, attribute, replacement)`` and hands it to
:func:`module_getattr`: reading such a name (``jaxfp8.mx.dot_general``, or
``from jaxfp8.mx import dot_general``) emits a ``DeprecationWarning`` that
names the replacement, and returns the old object, which gives the same
numbers as before. Like JAX's own deprecations, the warning comes where the
name is read, so code that keeps a reference warns once.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping
import warnings

Table = Mapping[str, tuple[str, str, str]]


def message(old: str, new: str) -> str:
  """The warning's text: the old name, then its replacement.

  >>> message("jaxfp8.mx.dot_general", "jaxfp8.recipes.dot_general")
  'jaxfp8.mx.dot_general is deprecated; use jaxfp8.recipes.dot_general. The old name is an alias kept for this release (same numbers).'
  """
  return (f"{old} is deprecated; use {new}. The old name is an alias kept "
          "for this release (same numbers).")


def module_getattr(module: str, deprecated: Table,
                   lazy: Mapping[str, str] | None = None
                   ) -> Callable[[str], Any]:
  """A module ``__getattr__``: ``lazy`` names (name -> module) load on first
  use; ``deprecated`` names warn, then load.

  Args:
    module: the public module's name, for messages.
    deprecated: ``name -> (module, attribute, replacement)``.
    lazy: ``name -> module`` of names that load on first use without a
      warning (those defined in modules that import Flax).
  """
  lazy = dict(lazy or {})

  def __getattr__(name: str) -> Any:
    if name in lazy:
      return getattr(importlib.import_module(lazy[name]), name)
    if name in deprecated:
      source, attr, new = deprecated[name]
      warnings.warn(message(f"{module}.{name}", new), DeprecationWarning,
                    stacklevel=2)
      return getattr(importlib.import_module(source), attr)
    raise AttributeError(f"module {module!r} has no attribute {name!r}")

  return __getattr__
