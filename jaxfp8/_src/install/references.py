"""Where JAX, Flax and Haiku hold the functions :func:`jaxfp8.install`
replaces: ``jax.random``'s float samplers, every module attribute that holds
one of them or a ``jax.nn.initializers`` function, and Haiku's initializer
classes.

Written against JAX 0.10.2, Flax 0.12.8 and Haiku 0.0.17, and checked
against the sources of JAX 0.11.2; ``tests/install/test_references.py``
checks each place named below, so that an upgrade that moves one fails
there, by name, instead of install() silently missing it.
"""
from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable
from typing import Any

import jax


def float_samplers(known: Iterable[str]) -> dict[str, Callable]:
  """``jax.random``'s samplers of floats: the ``known`` names with a
  ``dtype`` argument, and any other whose ``dtype`` is annotated as a float
  dtype (JAX 0.10.2 and 0.11.2 spell it ``DTypeLikeFloat``)."""
  known = frozenset(known)
  out = {}
  for name in dir(jax.random):
    fn = getattr(jax.random, name, None)
    if not inspect.isfunction(fn) or name.startswith("_"):
      continue
    dtype = inspect.signature(fn).parameters.get("dtype")
    if dtype is not None and (name in known
                              or "Float" in str(dtype.annotation)):
      out[name] = fn
  return out


# The packages whose modules hold references install() replaces.
FRAMEWORKS = ("jax", "flax", "haiku")


def references(ids: Iterable[int]) -> list[tuple[Any, str, Any]]:
  """Every ``(module, attribute, value)`` in JAX, Flax and Haiku whose value
  is one of the objects ``ids`` names (by ``id``).

  Written against JAX 0.10.2 / Flax 0.12.8 / Haiku 0.0.17, where the copies
  that matter are ``jax.random`` and the private module JAX's initializers
  call through (``jax._src.random``), ``jax.nn.initializers`` and the
  private module it re-exports, and Flax's re-exports
  (``flax.linen.initializers``, ``flax.nnx.initializers``). Any module of
  these packages counts, so a copy that moves is found where it goes.
  """
  ids = frozenset(ids)
  found = []
  for mod_name, mod in list(sys.modules.items()):
    if mod_name.split(".")[0] not in FRAMEWORKS:
      continue
    namespace = getattr(mod, "__dict__", None)
    if not isinstance(namespace, dict):
      continue
    for attr, value in list(namespace.items()):
      if id(value) in ids and callable(value):
        found.append((mod, attr, value))
  return found


def haiku_initializer_classes() -> list[type]:
  """Haiku's initializer classes with their own ``__call__`` ([] when Haiku
  isn't imported).

  Haiku 0.0.17: ``haiku._src.initializers`` defines them (``Constant``,
  ``RandomNormal``, ``TruncatedNormal``, ``RandomUniform``,
  ``VarianceScaling``, ``UniformScaling``, ``Orthogonal``, ``Identity``);
  each ``__call__(self, shape, dtype)`` samples in ``dtype`` and then scales
  in ``dtype``.
  """
  module = sys.modules.get("haiku._src.initializers")
  if module is None:
    return []
  return [value for value in vars(module).values()
          if isinstance(value, type) and value.__module__ == module.__name__
          and "__call__" in vars(value)]


__all__ = ["FRAMEWORKS", "float_samplers", "haiku_initializer_classes",
           "references"]
