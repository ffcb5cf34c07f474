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
from jax.custom_derivatives import SymbolicZero

from jaxfp8._src import compat

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


def source_children(leaves: tuple[Any, ...], source: Any, *,
                    carried: bool) -> tuple[Any, ...]:
  """The pytree children of a container of ``leaves`` and a ``source``.

  A traced source is one more child, so it crosses into ``jit``, ``vmap``
  and ``scan``, and through ``tree_map``, beside the codes it belongs to:
  a source of ``grad``, ``jvp`` or ``vmap`` always, and a source of a
  function being staged out (the body of ``jit``, ``scan``, ``cond``,
  ``checkpoint``) when it came into that body as a child (``carried``, as a
  scan carry does). A source the body made itself stays there: such a
  flatten is where the body hands back its results, and a source there
  would make every quantization under ``jit`` a float32 output beside its
  codes, and a loop that re-quantizes its carry a loop of two carry types.
  The leaves are then tied to it, so that differentiating them raises
  ``TypeError`` where the gradient would silently be zero. No source, or a
  concrete one (nothing will differentiate it), adds nothing.
  """
  if not isinstance(source, compat.Tracer):
    return leaves
  if carried or not compat.is_staged(source):
    return leaves + (source,)
  try:
    return _source_stays(leaves, source)
  except jax.errors.UnexpectedTracerError:  # its trace is over: nothing to tie
    return leaves


@jax.custom_jvp
def _source_stays(leaves, source):
  del source
  return leaves


def _source_stays_jvp(primals, tangents):
  if not isinstance(tangents[1], SymbolicZero):
    raise TypeError(
        "a quantized array (MXArray or CodeArray) made inside a staged "
        "function (the body of jit, scan, cond or checkpoint) left it "
        "without its straight-through source, so its codes carry no "
        "gradient; dequantize it (mx.dequantize, jaxfp8.decode) inside that "
        "function, or quantize it outside")
  return primals[0], tangents[0]


_source_stays.defjvp(_source_stays_jvp, symbolic_zeros=True)


def source_from_children(extra: tuple[Any, ...]) -> Any:
  """The source back from :func:`source_children`'s children, or None.

  A transformation that hands back concrete arrays (the result of ``jit``,
  eager ``vmap``) or placeholders (``eval_shape``, tree utilities) hands
  back no tracer: the source is dropped, not kept as a float32 copy.
  """
  if extra and isinstance(extra[0], compat.Tracer):
    return extra[0]
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
