"""``jaxfp8.install()``: unchanged Flax and Haiku code initializes fp8 right.

Installing routes every call of JAX's initialization API whose ``dtype`` is
a narrow format to jaxfp8, and leaves every other call to JAX, untouched
(same results bit for bit, same errors, same signatures):

- ``jax.random``'s float samplers, in every JAX, Flax and Haiku module that
  holds one, are replaced by a shim (``functools.wraps``) that sends narrow
  dtypes to the :mod:`jaxfp8.random` namesake (:data:`SAMPLERS`), or, for a
  sampler jaxfp8 lacks, draws float32 and rounds once.
- ``jax.nn.initializers``' factories and ``zeros``/``ones`` are replaced the
  same way (also Flax's re-exports).
- The closures JAX's factories return, including those built before
  installing (Flax builds ``default_kernel_init = lecun_normal()`` at
  import), are routed as a whole: while installed, each closure runs a
  router (:mod:`jaxfp8._src.install.routing`) that reads the closure's own
  arguments and answers a narrow dtype with jaxfp8's factory of the same
  name built from them (the initializer computed in float32, rounded once),
  and runs JAX's code for any other dtype. JAX's closures would scale the
  sample in the narrow format instead: the scale rounded first (off by up
  to 6.25% in float8_e4m3fn, 12.5% in float8_e5m2: half a step of their 3
  and 2 mantissa bits), the product rounded again, and NaN for truncated
  normals in float8_e4m3fn.
- Haiku's initializer classes scale their samples in the narrow format too;
  their ``__call__`` (a class attribute, so it covers instances made before
  installing) runs in float32 and rounds once. Import Haiku first.

:func:`uninstall` puts every replaced attribute and every closure's code
back. Nothing here reads frames, bytecode or locals: narrow calls are told by
their ``dtype`` argument alone.

Formats XLA can't hold (float6): JAX's samplers answer them with a
:class:`jaxfp8.CodeArray`, as :mod:`jaxfp8.random` does. An initializer
(``jax.nn.initializers``, Haiku's classes) makes layer parameters, which
Flax, Haiku and JAX code compute with, and a CodeArray can't be computed
with; so an initializer asked for such a format raises a ``TypeError`` that
points to formats XLA holds and to ``jaxfp8.encode``, wherever it is called
from (:mod:`jaxfp8.nn.initializers` gives the codes to those who want them).

- The factories themselves, wherever they are held (a module that did
  ``from jax.nn.initializers import normal`` before installing), route the
  closures they make while installed (:func:`routing.route_factories`).

Only references held by JAX, Flax and Haiku modules are replaced; closures
and factories are routed wherever they are held.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import threading
import warnings
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src.install import references
from jaxfp8._src.install import routing
from jaxfp8._src.nn import initializers as ours
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics.cast import cast
from jaxfp8._src.random import continuous
from jaxfp8._src.random import discrete
from jaxfp8._src.random import multivariate

# The modules that declare jaxfp8.random's samplers in their ``__all__``.
_SAMPLER_MODULES = (continuous, discrete, multivariate)
# The samplers install() routes to their jaxfp8 namesakes: every sampler of
# jaxfp8.random.
SAMPLERS: tuple[str, ...] = tuple(sorted(
    name for module in _SAMPLER_MODULES for name in module.__all__))

_LOCK = threading.RLock()
# (owner, attribute, original) in the order they were replaced.
_PATCHES: list[tuple[Any, str, Any]] = []


def _is_active() -> bool:
  return bool(_PATCHES)


@functools.lru_cache(maxsize=None)
def _our_samplers() -> dict[str, Callable]:
  """name -> jaxfp8's sampler, for the :data:`SAMPLERS` jax.random has.

  Each must take every argument of its jax.random namesake: install() passes
  them by name.
  """
  found = {}
  for module in _SAMPLER_MODULES:
    for name in module.__all__:
      theirs = getattr(jax.random, name, None)
      if theirs is None:
        continue
      fn = getattr(module, name)
      missing = (set(inspect.signature(theirs).parameters)
                 - set(inspect.signature(fn).parameters))
      if missing:
        raise RuntimeError(
            f"jaxfp8.install(): the sampler `{name}` of {module.__name__} "
            f"must take jax.random.{name}'s arguments, but lacks "
            f"{sorted(missing)}")
      found[name] = fn
  return found


# ---------------------------------------------------------------------------
# Reading the dtype of a call.


def _narrow_format(dtype) -> formats.Format | None:
  """The narrow format ``dtype`` asks for; None for a wide one, or one the
  original will reject with its own error."""
  try:
    dtype = None if dtype is None else np.dtype(dtype)
  except TypeError:
    return None
  return formats.get(dtype) if formats.is_narrow(dtype) else None


def _routed(original: Callable, narrow: Callable[..., Any]) -> Callable:
  """``original``'s twin (name, doc, signature): wide calls go to it,
  narrow ones (while installed) to ``narrow(bound_arguments, fmt)``."""
  sig = inspect.signature(original)

  @functools.wraps(original)
  def routed(*args, **kwargs):
    if _is_active():
      try:
        bound = sig.bind(*args, **kwargs)
      except TypeError:
        bound = None  # the original raises its own error
      if bound is not None:
        bound.apply_defaults()
        fmt = _narrow_format(bound.arguments.get("dtype"))
        if fmt is not None:
          return narrow(bound, fmt)
    return original(*args, **kwargs)
  routed.jaxfp8_original = original
  return routed


def _refuse_unholdable(fmt: formats.Format, what: str, ours_name: str) -> None:
  """TypeError for an initializer asked for a format XLA can't hold."""
  if fmt.native:
    return
  raise TypeError(
      f"{what} was asked for {fmt.name} parameters. The installed JAX/XLA "
      f"has no {fmt.name} type, so jaxfp8 holds {fmt.name} as "
      f"jaxfp8.CodeArray (uint8 codes), which Flax, Haiku and JAX layers "
      f"can't compute with. Use a format XLA holds for param_dtype "
      f"(float8_e4m3fn, float8_e5m2, float4_e2m1fn...), or keep float32 "
      f"parameters and store them with jaxfp8.encode(params, "
      f"'{fmt.name}'). For the codes themselves, call {ours_name}.")


# ---------------------------------------------------------------------------
# Shims.


def _cast_sampler(original: Callable) -> Callable:
  """A jax.random sampler drawn in float32 and rounded once (for samplers
  jaxfp8.random doesn't have)."""
  sig = inspect.signature(original)

  @functools.wraps(original)
  def sample(*args, **kwargs):
    bound = sig.bind(*args, **kwargs)
    fmt = formats.get(bound.arguments["dtype"])
    bound.arguments["dtype"] = jnp.float32
    return cast(original(*bound.args, **bound.kwargs), fmt)
  return sample


def _random_shim(original: Callable, replacement: Callable) -> Callable:
  defaults = {k: p.default
              for k, p in inspect.signature(original).parameters.items()}

  def narrow(bound, fmt):
    del fmt  # in bound.arguments["dtype"]
    # By name: jaxfp8's samplers take jax.random's arguments. One left at
    # JAX's default is left to ours (the same but for JAX 0.11's method=
    # "exact" of gamma, beta, chisquare, loggamma: ours is None, which
    # draws as it does), so an unset option ours lacks is dropped too.
    return replacement(**{k: v for k, v in bound.arguments.items()
                          if v is not defaults[k]})
  return _routed(original, narrow)


def _init_shim(original: Callable, replacement: Callable) -> Callable:
  """``zeros`` / ``ones``: narrow dtypes go to jaxfp8's."""
  name = original.__name__

  def narrow(bound, fmt):
    _refuse_unholdable(fmt, f"jax.nn.initializers.{name}",
                       f"jaxfp8.nn.initializers.{name}")
    return replacement(*bound.args, **bound.kwargs)
  return _routed(original, narrow)


def _factory_shim(original: Callable) -> Callable:
  """A factory whose closures are routed (see :func:`_initialize`)."""
  @functools.wraps(original)
  def factory(*args, **kwargs):
    return routing.route_init_closure(original(*args, **kwargs))
  factory.jaxfp8_original = original
  return factory


@functools.lru_cache(maxsize=None)
def _factory_parameters(factory: str) -> frozenset[str]:
  return frozenset(inspect.signature(getattr(ours, factory)).parameters)


def _initialize(factory: str, arguments: dict[str, Any], args: tuple,
                run_jax: Callable[..., Any]):
  """The answer of a routed ``jax.nn.initializers`` closure of ``factory``
  holding ``arguments``, called with ``(key, shape, dtype, out_sharding)``:
  JAX's own for a wide dtype; for a narrow one, jaxfp8's initializer of the
  same name built from ``arguments``, or, where they are not all arguments
  of jaxfp8's (a JAX whose closures hold other cells), JAX's closure called
  in float32 and rounded once: the same weights, without the range check."""
  fmt = _narrow_format(args[2]) if _is_active() else None
  if fmt is None:
    return run_jax()
  _refuse_unholdable(fmt, f"A jax.nn.initializers.{factory} initializer",
                     f"jaxfp8.nn.initializers.{factory}")
  if set(arguments) <= _factory_parameters(factory):
    return getattr(ours, factory)(**arguments)(*args)
  key, shape, _, out_sharding = args
  return cast(run_jax(key, shape, jnp.float32, out_sharding), fmt)


def _haiku_shim(original: Callable) -> Callable:
  """Haiku ``Initializer.__call__``: narrow formats in float32, rounded once."""
  def narrow(bound, fmt):
    cls = type(next(iter(bound.arguments.values()))).__name__
    _refuse_unholdable(fmt, f"haiku.initializers.{cls}",
                       "jaxfp8.nn.initializers")
    bound.arguments["dtype"] = jnp.float32
    return cast(original(*bound.args, **bound.kwargs), fmt)
  return _routed(original, narrow)


def _shims(jax_inits: dict[str, Callable]) -> dict[int, Callable]:
  """id of each original -> its shim."""
  samplers = _our_samplers()
  shims: dict[int, Callable] = {}
  for name, original in references.float_samplers(samplers).items():
    replacement = samplers.get(name) or _cast_sampler(original)
    shims[id(original)] = _random_shim(original, replacement)
  for name, original in jax_inits.items():
    if id(original) in shims:  # an alias (xavier_normal is glorot_normal)
      continue
    shims[id(original)] = (_init_shim(original, getattr(ours, name))
                           if name in ours.INITIALIZERS
                           else _factory_shim(original))
  return shims


_LEARNED: list[tuple[tuple[Any, ...], tuple[str, ...]]] = []


def _init_closures(jax_inits: dict[str, Callable]):
  """What JAX's closures look like: learned once, so that every install
  routes with the same router code (a closure routed by an earlier install
  is unrouted by a later uninstall)."""
  if not _LEARNED:
    _LEARNED.append(routing.learn_init_closures(
        {name: routing.original_factory(fn) for name, fn in jax_inits.items()}))
  return _LEARNED[0]


# ---------------------------------------------------------------------------
# The public functions.


def install() -> None:
  """Routes narrow-format ``jax.random`` and ``jax.nn.initializers`` calls to
  jaxfp8, so unchanged Flax and Haiku code initializes fp8 weights right.

  Idempotent. Wide dtypes are untouched: same samples bit for bit, same
  errors, same signatures. Import Haiku before installing to route its
  initializer classes. See :func:`installed` for a scoped version.

  >>> import jax, jax.numpy as jnp, jaxfp8
  >>> init = jax.nn.initializers.lecun_normal()  # built before installing
  >>> jaxfp8.install()
  >>> w = init(jax.random.key(0), (64, 64), jnp.float8_e4m3fn)
  >>> bool(jnp.isnan(w.astype(jnp.float32)).any())
  False
  >>> jaxfp8.uninstall()
  """
  with _LOCK:
    if _PATCHES:
      return
    jax_inits = {name: getattr(jax.nn.initializers, name)
                 for name in ours.FACTORIES + ours.INITIALIZERS}
    kinds, unknown = _init_closures(jax_inits)
    if unknown:
      warnings.warn(
          f"jaxfp8.install(): this JAX's jax.nn.initializers closures of "
          f"{', '.join(unknown)} don't take (key, shape, dtype, "
          f"out_sharding) as jaxfp8 expects, so they are not routed: in a "
          f"narrow format they run JAX's own arithmetic there (their samples "
          f"are jaxfp8's, the scale is rounded twice, and the result may be "
          f"NaN). Use jaxfp8.nn.initializers for them.", RuntimeWarning,
          stacklevel=2)
    shims = _shims(jax_inits)
    patches = [(owner, attr, original, shims[id(original)])
               for owner, attr, original in references.references(shims)]
    patches += [(cls, "__call__", vars(cls)["__call__"],
                 _haiku_shim(vars(cls)["__call__"]))
                for cls in references.haiku_initializer_classes()]
    for owner, attr, original, shim in patches:
      setattr(owner, attr, shim)
      _PATCHES.append((owner, attr, original))
    routing.route_init_closures(kinds, _initialize)
    routing.route_factories({name: jax_inits[name] for name in ours.FACTORIES})


def uninstall() -> None:
  """Puts back every object :func:`install` replaced and every closure's
  code (no-op if not installed).

  >>> import jax, jaxfp8
  >>> before = jax.random.normal
  >>> jaxfp8.install(); jaxfp8.uninstall()
  >>> jax.random.normal is before
  True
  """
  with _LOCK:
    routing.unroute_factories()
    routing.unroute_init_closures()
    while _PATCHES:
      owner, attr, original = _PATCHES.pop()
      setattr(owner, attr, original)


def is_installed() -> bool:
  """Whether :func:`install` is in effect.

  >>> import jaxfp8
  >>> with jaxfp8.installed():
  ...   jaxfp8.is_installed()
  True
  """
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


__all__ = ["SAMPLERS", "install", "installed", "is_installed", "uninstall"]
