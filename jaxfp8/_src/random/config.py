"""The default sampling method: a process-wide setting and a context manager."""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator, Literal

from jaxfp8._src.numerics import validate

Method = Literal["exact", "table", "cast"]
METHODS: tuple[str, ...] = ("exact", "table", "cast")

_state = threading.local()
_GLOBAL = {"method": "exact"}


def get_default_method() -> str:
  """The method used when a sampler is called with ``method=None``.

  >>> get_default_method()
  'exact'
  """
  stack = getattr(_state, "stack", None)
  return stack[-1] if stack else _GLOBAL["method"]


def set_default_method(method: Method) -> None:
  """Sets the process-wide default method (``"exact"`` until changed).

  Args:
    method: ``"exact"``, ``"table"`` or ``"cast"``.

  Raises:
    ValueError: for another value.

  >>> set_default_method("table"); get_default_method()
  'table'
  >>> set_default_method("exact")
  """
  _GLOBAL["method"] = validate.check_choice(method, METHODS, "method",
                                            "set_default_method")


@contextlib.contextmanager
def default_method(method: Method) -> Iterator[str]:
  """Uses ``method`` as the default inside a ``with`` block (this thread).

  >>> with default_method("cast"):
  ...   get_default_method()
  'cast'
  >>> get_default_method()
  'exact'
  """
  validate.check_choice(method, METHODS, "method", "default_method")
  stack = getattr(_state, "stack", None)
  if stack is None:
    stack = _state.stack = []
  stack.append(method)
  try:
    yield method
  finally:
    stack.pop()
