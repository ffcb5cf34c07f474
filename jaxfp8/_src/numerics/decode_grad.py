"""The gradient of ``decode``: the straight-through rule and the casts' sources.

A narrow result's tangent must itself be narrow (JAX's rule), so a gradient
through it is rounded into the format, and a CodeArray's uint8 codes carry
none. So ``cast`` records, for traced results, the float32 array it rounded,
and ``decode`` of that result differentiates as the identity in it
(:func:`straight_through`). A CodeArray holds its source itself
(:func:`jaxfp8._src.numerics.codes.remember_source`); a native result, a
tracer that takes no attributes, is keyed here by identity and forgotten
when it dies.
"""
from __future__ import annotations

from typing import Any
import weakref

import jax

_SOURCES: dict[int, tuple[weakref.ref, Any]] = {}


def remember(out: Any, source: Any) -> Any:
  """Records the traced float32 ``source`` of ``out``, a native narrow array.

  Returns ``out``. An array type without weak references is not recorded:
  its ``decode`` has no shortcut.
  """
  key, pop = id(out), _SOURCES.pop
  try:
    ref = weakref.ref(out, lambda _: pop(key, None))
  except TypeError:  # an array type without weak references: no shortcut
    return out
  _SOURCES[key] = (ref, source)
  return out


def source_of(x: Any) -> Any:
  """The source :func:`remember` recorded for ``x`` while it lives, or None."""
  entry = _SOURCES.get(id(x))
  return entry[1] if entry is not None and entry[0]() is x else None


def live(fn: Any, source: Any) -> Any:
  """``fn(source)``, or None when there is no source or its trace is over."""
  if source is None:
    return None
  try:
    return fn(source)
  except jax.errors.UnexpectedTracerError:
    return None


@jax.custom_jvp
def straight_through(source, values):
  """``values``, differentiated as the identity in ``source`` (0 in values).

  The one straight-through rule: ``decode`` of a cast and MX ``dequantize``
  of a quantize differentiate through it.
  """
  del source
  return values


@straight_through.defjvp
def _straight_through_jvp(primals, tangents):
  source, values = primals
  return (straight_through(source, values),
          tangents[0].astype(values.dtype))
