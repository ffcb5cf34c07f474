"""jaxfp8: FP8, FP6, FP4 and MX (OCP Microscaling) numbers, first-class in JAX.

>>> import jax.numpy as jnp, jaxfp8
>>> jaxfp8.cast(jnp.array([1000.0]), "e4m3")
Array([448], dtype=float8_e4m3fn)
"""
from __future__ import annotations

import importlib

from jaxfp8 import formats as formats
from jaxfp8._src.numerics import constant_guard as _constant_guard
from jaxfp8._src.numerics.cast import cast as cast
from jaxfp8._src.numerics.cast import encode as encode
from jaxfp8._src.numerics.cast import ROUNDINGS as ROUNDINGS
from jaxfp8._src.numerics.codes import CodeArray as CodeArray
from jaxfp8._src.numerics.codes import decode as decode
from jaxfp8._src.numerics.formats import Format as Format

__version__ = "0.1.0"

_constant_guard.guard_constants()

# Submodules and names from heavier modules load on first use.
_LAZY_MODULES = ("random", "nn", "mx", "ops", "es", "policy", "scaling",
                 "optim", "checkpoint", "recipes")
_LAZY_NAMES = {
    "install": "jaxfp8._src.install.api",
    "uninstall": "jaxfp8._src.install.api",
    "installed": "jaxfp8._src.install.api",
    "is_installed": "jaxfp8._src.install.api",
    "Policy": "jaxfp8._src.fp8.policy",
    "get_policy": "jaxfp8._src.fp8.policy",
}


def __getattr__(name: str):
  if name in _LAZY_MODULES:
    return importlib.import_module(f"jaxfp8.{name}")
  if name in _LAZY_NAMES:
    return getattr(importlib.import_module(_LAZY_NAMES[name]), name)
  raise AttributeError(f"module 'jaxfp8' has no attribute {name!r}")


__all__ = [
    "CodeArray", "Format", "Policy", "ROUNDINGS", "cast", "decode", "encode",
    "formats", "get_policy", "install", "installed", "is_installed",
    "uninstall",
]
