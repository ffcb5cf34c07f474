"""``jaxfp8.install()``: unchanged Flax and Haiku code initializes fp8 right.

Installing replaces, in the modules of JAX, Flax and Haiku, every reference to
a ``jax.random`` sampler of floats and to a ``jax.nn.initializers`` factory
by a shim with the same signature (``functools.wraps``). A shim looks at the
``dtype`` of each call: a wide dtype goes to the original function, untouched
(same samples bit for bit, same errors); a narrow format goes to jaxfp8
(:mod:`jaxfp8.random`, :mod:`jaxfp8.nn.initializers`). ``uninstall()`` puts
the original objects back.

Two kinds of code can't be reached by replacing module attributes, and get
their own route:

- Initializer closures built before installing: Flax builds
  ``default_kernel_init = initializers.lecun_normal()`` at import. Such a
  closure ends in ``return random.truncated_normal(...) * stddev`` with
  ``stddev`` already rounded into the narrow format (6% off in
  float8_e4m3fn, 12% in float8_e5m2) and the product rounded again. Its
  ``random.<sampler>`` is looked up at call time, so it reaches the shim,
  which recognizes the caller by its code object, checks in the bytecode that
  the sample is only multiplied by one value and returned, and answers with
  the whole initializer computed by jaxfp8 from the closure's own arguments,
  in a wrapper whose ``*`` returns it.
- Haiku's initializer classes compute ``s * unscaled + m`` in the narrow
  format after sampling; their ``__call__`` (a class attribute, so it covers
  instances made before installing) is replaced while installed: for narrow
  formats it runs in float32 and rounds once. Haiku must be imported first.

Formats the installed XLA can't hold (float6) come back as
:class:`jaxfp8.CodeArray`, which Flax and Haiku layers can't compute with:
called from inside Flax or Haiku, a float6 request raises a ``TypeError``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import dis
import functools
import inspect
import sys
import threading
import types
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src import formats
from jaxfp8._src import initializers as ours
from jaxfp8._src.cast import cast

# Modules whose references to the originals are replaced.
_PREFIXES = ("jax", "flax", "haiku")
_FRAMEWORKS = ("flax", "haiku")

_LOCK = threading.RLock()
# (owner, attribute, original) in the order they were replaced.
_PATCHES: list[tuple[Any, str, Any]] = []
# Pre-built jax.nn.initializers closures: code object -> how to answer them.
_SITES: dict[types.CodeType, "_Site"] = {}


def _is_active() -> bool:
  return bool(_PATCHES)


# ---------------------------------------------------------------------------
# Reading the dtype of a call.


def _narrow_call(sig: inspect.Signature, args, kwargs
                 ) -> tuple[inspect.BoundArguments, formats.Format] | None:
  """(arguments with defaults, narrow format) of a call asking for a narrow
  ``dtype``; None for a wide one, or a call the original will reject with
  its own error."""
  try:
    bound = sig.bind(*args, **kwargs)
  except TypeError:
    return None
  bound.apply_defaults()
  dtype = bound.arguments.get("dtype")
  try:
    dtype = None if dtype is None else np.dtype(dtype)
  except TypeError:
    return None
  if not formats.is_narrow(dtype):
    return None
  return bound, formats.get(dtype)


def _routed(original: Callable, narrow: Callable[..., Any]) -> Callable:
  """``original``'s twin (name, doc, signature): wide calls go to it,
  narrow ones (while installed) to ``narrow(bound, fmt, caller_frame)``."""
  sig = inspect.signature(original)

  @functools.wraps(original)
  def routed(*args, **kwargs):
    call = _narrow_call(sig, args, kwargs) if _is_active() else None
    if call is None:
      return original(*args, **kwargs)
    return narrow(*call, sys._getframe(1))  # pylint: disable=protected-access
  routed.jaxfp8_original = original
  return routed


def _refuse_unholdable(fmt: formats.Format, frame: types.FrameType | None,
                       what: str) -> None:
  """TypeError for a format XLA can't hold, requested from Flax or Haiku."""
  if fmt.native:
    return
  while frame is not None:
    module = frame.f_globals.get("__name__", "")
    framework = module.split(".")[0]
    if framework in _FRAMEWORKS:
      raise TypeError(
          f"{what} was asked for {fmt.name} parameters from {framework} "
          f"({module}). The installed JAX/XLA has no {fmt.name} type, so "
          f"jaxfp8 returns {fmt.name} as jaxfp8.CodeArray (uint8 codes), "
          f"which {framework} layers can't compute with. Use a format XLA "
          f"holds for param_dtype (float8_e4m3fn, float8_e5m2, "
          f"float4_e2m1fn...), or keep float32 parameters and store them "
          f"with jaxfp8.encode(params, '{fmt.name}').")
    frame = frame.f_back


# ---------------------------------------------------------------------------
# Shims.


def _cast_sampler(original: Callable) -> Callable:
  """A jax.random sampler drawn in float32 and rounded once (for samplers
  jaxfp8.random doesn't have, orthogonal say)."""
  sig = inspect.signature(original)

  @functools.wraps(original)
  def sample(*args, **kwargs):
    bound = sig.bind(*args, **kwargs)
    fmt = formats.get(bound.arguments["dtype"])
    bound.arguments["dtype"] = jnp.float32
    return cast(original(*bound.args, **bound.kwargs), fmt)
  return sample


class _Product:
  """The answer to a pre-built initializer closure: its ``sample * scale``
  returns the initializer's result, computed in full by jaxfp8."""
  __slots__ = ("value",)

  def __init__(self, value):
    self.value = value

  def __mul__(self, other):
    del other  # the closure's scale, already rounded: we used the exact one
    return self.value


def _random_shim(original: Callable, replacement: Callable) -> Callable:
  accepted = inspect.signature(replacement).parameters
  what = f"jax.random.{original.__name__}"

  def narrow(bound, fmt, caller):
    site = _SITES.get(caller.f_code)
    if site is not None and caller.f_lasti in site.offsets:
      return _Product(site.answer(caller, fmt))
    _refuse_unholdable(fmt, caller, what)
    # By name: jaxfp8's samplers take jax.random's arguments (an unset
    # option of JAX's that ours lacks is dropped).
    return replacement(**{k: v for k, v in bound.arguments.items()
                          if k in accepted or v is not None})
  return _routed(original, narrow)


def _routed_init(jax_init: Callable, narrow_init: Callable[[], Callable],
                 what: str) -> Callable:
  """An init like ``jax_init``: narrow dtypes go to ``narrow_init()``."""
  def narrow(bound, fmt, caller):
    _refuse_unholdable(fmt, caller, what)
    return narrow_init()(*bound.args, **bound.kwargs)
  return _routed(jax_init, narrow)


def _factory_shim(original: Callable, replacement: Callable) -> Callable:
  what = f"jax.nn.initializers.{original.__name__}"

  @functools.wraps(original)
  def factory(*args, **kwargs):
    return _routed_init(original(*args, **kwargs),
                        lambda: replacement(*args, **kwargs), what)
  factory.jaxfp8_original = original
  return factory


def _init_shim(original: Callable, replacement: Callable) -> Callable:
  return _routed_init(original, lambda: replacement,
                      f"jax.nn.initializers.{original.__name__}")


def _haiku_shim(original: Callable) -> Callable:
  """Haiku ``Initializer.__call__``: narrow formats in float32, rounded once."""
  def narrow(bound, fmt, caller):
    cls = type(next(iter(bound.arguments.values()))).__name__
    _refuse_unholdable(fmt, caller, f"haiku.initializers.{cls}")
    bound.arguments["dtype"] = jnp.float32
    return cast(original(*bound.args, **bound.kwargs), fmt)
  return _routed(original, narrow)


# ---------------------------------------------------------------------------
# Pre-built initializer closures.


def _returned_times_one_value(code: types.CodeType) -> frozenset[int]:
  """Bytecode offsets of the calls in ``code`` whose result ``r`` is only used
  as ``return r * <one expression>``, checked on the stack effects."""
  instrs = list(dis.get_instructions(code))
  found = set()
  for j, ins in enumerate(instrs):
    if not ins.opname.startswith("CALL"):
      continue
    depth = 0  # values pushed above the call's result
    for i, nxt in enumerate(instrs[j + 1:], start=j + 1):
      if nxt.opname == "BINARY_OP" and depth == 1:
        # The scale expression is complete: ``r * <it>`` then return.
        if (nxt.argrepr == "*" and i + 1 < len(instrs)
            and instrs[i + 1].opname == "RETURN_VALUE"):
          # A running frame's f_lasti may point into the call's inline
          # caches (CPython 3.11+): accept every offset up to the next one.
          found.update(range(ins.offset, instrs[j + 1].offset))
        break
      # Operations inside the scale expression (``jnp.sqrt(3 * variance)``)
      # act on values pushed after ``r``, never on ``r`` itself.
      if not (nxt.opname.startswith(("LOAD_", "CALL", "PRECALL"))
              or nxt.opname in ("KW_NAMES", "PUSH_NULL", "NOP", "CACHE",
                                "BINARY_OP")):
        break
      depth += dis.stack_effect(nxt.opcode, nxt.arg, jump=False)
      if depth < 0:
        break
  return frozenset(found)


@dataclasses.dataclass(frozen=True)
class _Site:
  """A jax.nn.initializers closure that samples once and scales the sample."""
  name: str
  offsets: frozenset[int]

  def answer(self, frame: types.FrameType, fmt: formats.Format):
    """The closure's result, by jaxfp8's factory of the same name, from the
    closure's free variables and arguments."""
    local = frame.f_locals
    _refuse_unholdable(fmt, frame, f"jax.nn.initializers.{self.name}")
    args = {v: local[v] for v in frame.f_code.co_freevars}
    init = getattr(ours, self.name)(**args)
    return init(local["key"], local["shape"], local["dtype"],
                local.get("out_sharding"))


# One closure of each kind, to learn its code object.
_SAMPLE_FACTORIES = {
    "normal": (), "uniform": (), "truncated_normal": (),
    "variance_scaling": (1.0, "fan_in", "normal"),
}


def _sites(originals: dict[str, Callable]) -> dict[types.CodeType, _Site]:
  sites = {}
  for name, args in _SAMPLE_FACTORIES.items():
    code = getattr(originals[name](*args), "__code__", None)
    if code is None:
      continue
    params = inspect.signature(getattr(ours, name)).parameters
    usable = (set(code.co_freevars) <= set(params)
              and {"key", "shape", "dtype"} <= set(code.co_varnames))
    offsets = _returned_times_one_value(code) if usable else frozenset()
    if offsets:  # else: plain routing of the sampler, which is still safe
      sites[code] = _Site(name, offsets)
  return sites


# ---------------------------------------------------------------------------
# What gets replaced, and where.


def _float_samplers(ours_random: frozenset[str]) -> dict[str, Callable]:
  """jax.random's samplers with a floating ``dtype`` argument."""
  out = {}
  for name in dir(jax.random):
    fn = getattr(jax.random, name, None)
    if not inspect.isfunction(fn) or name.startswith("_"):
      continue
    dtype = inspect.signature(fn).parameters.get("dtype")
    if dtype is not None and (name in ours_random
                              or "Float" in str(dtype.annotation)):
      out[name] = fn
  return out


def _shims() -> tuple[dict[int, Callable], dict[str, Callable]]:
  """(id of each original -> its shim, the jax.nn.initializers originals)."""
  from jaxfp8 import random as ours_random  # pylint: disable=g-import-not-at-top
  public = frozenset(ours_random.__all__)
  shims: dict[int, Callable] = {}
  for name, original in _float_samplers(public).items():
    replacement = (getattr(ours_random, name) if name in public
                   else _cast_sampler(original))
    shims[id(original)] = _random_shim(original, replacement)
  inits = {}
  for name in ours.FACTORIES + ours.INITIALIZERS:
    original = getattr(jax.nn.initializers, name)
    inits[name] = original
    if id(original) in shims:  # an alias (xavier_normal is glorot_normal)
      continue
    make = _init_shim if name in ours.INITIALIZERS else _factory_shim
    shims[id(original)] = make(original, getattr(ours, name))
  return shims, inits


def _references(shims: dict[int, Callable]) -> list[tuple[Any, str, Any]]:
  """Every (module, attribute, original) in JAX, Flax and Haiku."""
  found = []
  for mod_name, mod in list(sys.modules.items()):
    if not mod_name.split(".")[0] in _PREFIXES:
      continue
    namespace = getattr(mod, "__dict__", None)
    if not isinstance(namespace, dict):
      continue
    for attr, value in list(namespace.items()):
      if id(value) in shims and callable(value):
        found.append((mod, attr, value))
  return found


def _haiku_calls() -> list[tuple[Any, str, Any]]:
  """(class, "__call__", original) for Haiku's initializer classes."""
  hk_init = sys.modules.get("haiku._src.initializers")
  if hk_init is None:
    return []
  return [(value, "__call__", vars(value)["__call__"])
          for value in vars(hk_init).values()
          if isinstance(value, type) and value.__module__ == hk_init.__name__
          and "__call__" in vars(value)]


def install() -> None:
  """Routes narrow-format ``jax.random`` and ``jax.nn.initializers`` calls to
  jaxfp8, so unchanged Flax and Haiku code initializes fp8 weights right.

  Idempotent. Wide dtypes are untouched: same samples bit for bit, same
  errors, same signatures. Import Haiku before installing to route its
  initializer classes. See :func:`installed` for a scoped version.

  >>> import jax, jax.numpy as jnp, jaxfp8
  >>> jaxfp8.install()
  >>> w = jax.random.truncated_normal(jax.random.key(0), -2, 2, (1000,),
  ...                                 jnp.float8_e4m3fn)
  >>> bool(jnp.isnan(w.astype(jnp.float32)).any())
  False
  >>> jaxfp8.uninstall()
  """
  with _LOCK:
    if _PATCHES:
      return
    shims, inits = _shims()
    patches = [(owner, attr, original, shims[id(original)])
               for owner, attr, original in _references(shims)]
    patches += [(cls, attr, original, _haiku_shim(original))
                for cls, attr, original in _haiku_calls()]
    _SITES.update(_sites(inits))
    for owner, attr, original, shim in patches:
      setattr(owner, attr, shim)
      _PATCHES.append((owner, attr, original))


def uninstall() -> None:
  """Puts back every object :func:`install` replaced (no-op if not installed).

  >>> import jax, jaxfp8
  >>> before = jax.random.normal
  >>> jaxfp8.install(); jaxfp8.uninstall()
  >>> jax.random.normal is before
  True
  """
  with _LOCK:
    while _PATCHES:
      owner, attr, original = _PATCHES.pop()
      setattr(owner, attr, original)
    _SITES.clear()


def is_installed() -> bool:
  """Whether :func:`install` is in effect."""
  return _is_active()


@contextlib.contextmanager
def installed() -> Iterator[None]:
  """:func:`install` inside a ``with`` block; restores the previous state.

  >>> import jax, jax.numpy as jnp, flax.linen as nn, jaxfp8
  >>> with jaxfp8.installed():
  ...   params = nn.Dense(8, dtype=jnp.float32,
  ...                     param_dtype=jnp.float8_e4m3fn).init(
  ...       jax.random.key(0), jnp.ones((1, 16)))
  >>> k = params["params"]["kernel"].astype(jnp.float32)
  >>> bool(jnp.isnan(k).any())
  False
  """
  with _LOCK:
    was = _is_active()
    install()
  try:
    yield
  finally:
    if not was:
      uninstall()


__all__ = ["install", "installed", "is_installed", "uninstall"]
