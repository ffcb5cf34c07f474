"""Everything that depends on JAX, Flax or Haiku internals lives here.

jaxfp8 runs on JAX 0.10 and 0.11. It was written against JAX 0.10.2, Flax
0.12.8 and Haiku 0.0.17, and checked against the sources of JAX 0.11.2. Each
internal used below names the fact it relies on and the version it was
written against, and ``tests/test_compat.py`` checks every one of them, so
that an upgrade that moves one fails there, by name, instead of silently
doing nothing.

Sections: version and traced values; the MLIR constant handlers (for
:mod:`jaxfp8._src.numerics.constant_guard`); the closures of ``jax.nn.initializers``,
where JAX, Flax and Haiku hold the functions :func:`jaxfp8.install` replaces,
and Haiku's initializer classes (for :mod:`jaxfp8._src.install.api`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import inspect
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jax
import ml_dtypes
import numpy as np

JAX_VERSION = tuple(int(p) for p in jax.__version__.split(".")[:3] if p.isdigit())

# The class of traced values (isinstance checks only). jax.core keeps it
# public today (0.10.2, 0.11.2); JAX has been moving jax.core's names away.
try:
  Tracer = jax.core.Tracer
except AttributeError:  # pragma: no cover - a JAX that dropped it
  from jax._src.core import Tracer  # pylint: disable=g-import-not-at-top


# ---------------------------------------------------------------------------
# MLIR constant handlers.


def get_constant_handler(type_):
  """Returns JAX's MLIR constant handler for ``type_`` (None if absent).

  JAX 0.10.2 and 0.11.2: ``jax._src.interpreters.mlir.get_constant_handler``
  (the public ``jax.interpreters.mlir`` only registers handlers).
  """
  from jax._src.interpreters import mlir  # pylint: disable=g-import-not-at-top
  try:
    return mlir.get_constant_handler(type_)
  except KeyError:
    return None


def register_constant_handler(type_, handler) -> None:
  """Makes ``handler`` JAX's MLIR constant handler for ``type_`` (public)."""
  from jax.interpreters import mlir  # pylint: disable=g-import-not-at-top
  mlir.register_constant_handler(type_, handler)


def ndarray_constant_types() -> tuple[type, ...]:
  """The array types whose constants JAX lowers with its ndarray handler.

  JAX 0.10.2 and 0.11.2 lower ``jax._src.literals.TypedNdArray`` (NumPy
  constants JAX made itself) with the same handler as ``np.ndarray``.
  """
  found = [np.ndarray]
  try:
    from jax._src import literals  # pylint: disable=g-import-not-at-top
    found.append(literals.TypedNdArray)
  except (ImportError, AttributeError):
    pass
  return tuple(found)


# Bit widths a backend may hold but not compute with: JAX 0.11.2's CPU
# backend takes float6 arrays (0.10.2's refuses them), but converting one to
# float32 fails to compile (LLVM: "Invalid bitcast" of i6) and concatenating
# two aborts the process, so no probe compiles float6 code, and float6 stays
# uint8 codes on both. tests/numerics/test_formats.py checks that fact.
HELD_BUT_NOT_COMPUTED_BITS = frozenset({6})


@functools.lru_cache(maxsize=None)
def backend_holds(dtype: np.dtype, computes: bool = True) -> bool:
  """Whether arrays of ``dtype`` survive a round trip through the backend (a
  failed transfer raises, it never aborts) and, with ``computes``, are not of
  a bit width in ``HELD_BUT_NOT_COMPUTED_BITS``. Run once per dtype."""
  try:
    if computes and ml_dtypes.finfo(dtype).bits in HELD_BUT_NOT_COMPUTED_BITS:
      return False
  except ValueError:  # not one of ml_dtypes' floats
    pass
  try:
    x = np.zeros((2,), dtype)
    with jax.ensure_compile_time_eval():
      back = np.asarray(jax.device_put(x))
    return back.dtype == x.dtype
  except Exception:  # pylint: disable=broad-except
    return False


@functools.lru_cache(maxsize=None)
def jax_sampler_methods(name: str) -> tuple[str, ...]:
  """The values of ``jax.random.<name>``'s own keyword-only ``method``.

  JAX 0.11 added ``method='exact'`` (the rejection sampler, as before) or
  ``'approximate'`` (loop-free, slightly biased) to ``gamma``, ``beta``,
  ``chisquare`` and ``loggamma`` (and ``poisson``); JAX 0.10.2 has none, so
  ``()`` there. ``multivariate_normal``'s positional ``method`` (how ``cov``
  is factored) is another argument and gives ``()``.

  >>> jax_sampler_methods("uniform")
  ()
  """
  fn = getattr(jax.random, name, None)
  param = None if fn is None else inspect.signature(fn).parameters.get(
      "method")
  if param is None or param.kind is not inspect.Parameter.KEYWORD_ONLY:
    return ()
  return ("exact", "approximate")


def reshard(x, sharding):
  """Places ``x`` on ``sharding``: ``jax.sharding.reshard`` where it exists."""
  fn = getattr(jax.sharding, "reshard", None)
  if fn is not None:
    return fn(x, sharding)
  return jax.lax.with_sharding_constraint(x, sharding)


def x64_enabled() -> bool:
  """Whether 64-bit types are on (``jax_enable_x64``)."""
  return bool(jax.config.read("jax_enable_x64"))


def gpu_lowering_target() -> contextlib.AbstractContextManager:
  """A context in which ``lower(lowering_platforms=("cuda",))`` works anywhere.

  JAX 0.10.2 lowers for CUDA on a machine without a GPU as is; since JAX
  0.11.0 that raises ``RuntimeError: No supported GPU devices found, please
  specify an abstract GPU device using AbstractDevice``. Lowering inside an
  abstract one-device mesh of an abstract H200 works on both (0.10.2, 0.11.2:
  public ``jax.sharding.AbstractMesh(..., abstract_device=AbstractDevice(
  kind, cores, platform))`` and ``use_abstract_mesh``). A no-op where a GPU
  backend is present (the real device is the target) or where JAX has no
  ``AbstractDevice``.

  >>> with gpu_lowering_target():
  ...   pass
  """
  sh = jax.sharding
  if (jax.default_backend() == "gpu" or not hasattr(sh, "AbstractDevice")
      or not hasattr(sh, "use_abstract_mesh")):
    return contextlib.nullcontext()
  mesh = sh.AbstractMesh(
      (1,), ("_",), (sh.AxisType.Explicit,),
      abstract_device=sh.AbstractDevice("NVIDIA H200", 1, "cuda"))
  return sh.use_abstract_mesh(mesh)


def einsum(subscripts: str, lhs: Any, rhs: Any, *, dot_general: Callable,
           precision: Any = None, preferred_element_type: Any = None,
           out_sharding: Any = None) -> jax.Array:
  """``jnp.einsum`` of two operands whose contractions call ``dot_general``.

  JAX 0.10.2 and 0.11.2: ``jnp.einsum`` takes a private keyword
  ``_dot_general`` (default ``lax.dot_general``, a static argument of its
  jit, so it must be hashable) and calls it as ``dot_general(a, b,
  dimension_numbers, precision, preferred_element_type=...)``, with the
  operands in either order.
  """
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  return jnp.einsum(subscripts, lhs, rhs, precision=precision,
                    preferred_element_type=preferred_element_type,
                    out_sharding=out_sharding, _dot_general=dot_general)


def linen_einsum_bias_shape(module: Any, einsum_str: str, lhs: Any,
                            rhs: Any) -> tuple[list[int], list[int]]:
  """(bias shape, broadcast bias shape) of a linen ``Einsum`` layer.

  Flax 0.12.8: ``flax.linen.Einsum._get_bias_shape(einsum_str, lhs, rhs)``
  (a private method) returns both; ``Einsum.__call__`` uses it for the bias
  parameter and for adding it to the output.
  """
  return module._get_bias_shape(einsum_str, lhs, rhs)  # pylint: disable=protected-access


# ---------------------------------------------------------------------------
# The closures of jax.nn.initializers.
#
# JAX 0.10.2 (the same in 0.11.2): each factory below returns a closure
# ``init(key, shape, dtype=<the factory's dtype>, out_sharding=None)`` whose
# free variables are the factory's other arguments; glorot_*, lecun_*, he_*
# return variance_scaling's. Every closure of a factory shares its code
# object, so a closure is told by ``fn.__code__``, and its arguments are its
# cells. A router below has the same free variables (CPython lays them out
# sorted by name) and parameters; while installed, it is each closure's
# ``__code__``. It runs with JAX's module globals, so it reaches jaxfp8 by an
# import statement.


def _route_constant(value):
  def init(key, shape, dtype=None, out_sharding=None):
    from jaxfp8._src import compat  # pylint: disable=g-import-not-at-top,import-self
    return compat.call_routed("constant", (value,), key, shape, dtype,
                              out_sharding)
  return init


def _route_uniform(scale):
  def init(key, shape, dtype=None, out_sharding=None):
    from jaxfp8._src import compat  # pylint: disable=g-import-not-at-top,import-self
    return compat.call_routed("uniform", (scale,), key, shape, dtype,
                              out_sharding)
  return init


def _route_normal(stddev):
  def init(key, shape, dtype=None, out_sharding=None):
    from jaxfp8._src import compat  # pylint: disable=g-import-not-at-top,import-self
    return compat.call_routed("normal", (stddev,), key, shape, dtype,
                              out_sharding)
  return init


def _route_truncated_normal(lower, stddev, upper):
  def init(key, shape, dtype=None, out_sharding=None):
    from jaxfp8._src import compat  # pylint: disable=g-import-not-at-top,import-self
    return compat.call_routed("truncated_normal", (lower, stddev, upper), key,
                              shape, dtype, out_sharding)
  return init


def _route_variance_scaling(batch_axis, distribution, in_axis, mode, out_axis,
                            scale):
  def init(key, shape, dtype=None, out_sharding=None):
    from jaxfp8._src import compat  # pylint: disable=g-import-not-at-top,import-self
    return compat.call_routed(
        "variance_scaling",
        (batch_axis, distribution, in_axis, mode, out_axis, scale), key,
        shape, dtype, out_sharding)
  return init


def _route_orthogonal(column_axis, scale):
  def init(key, shape, dtype=None, out_sharding=None):
    from jaxfp8._src import compat  # pylint: disable=g-import-not-at-top,import-self
    return compat.call_routed("orthogonal", (column_axis, scale), key, shape,
                              dtype, out_sharding)
  return init


def _route_delta_orthogonal(column_axis, scale):
  def init(key, shape, dtype=None, out_sharding=None):
    from jaxfp8._src import compat  # pylint: disable=g-import-not-at-top,import-self
    return compat.call_routed("delta_orthogonal", (column_axis, scale), key,
                              shape, dtype, out_sharding)
  return init


_ROUTERS: dict[str, Callable[..., Callable]] = {
    "constant": _route_constant, "uniform": _route_uniform,
    "normal": _route_normal, "truncated_normal": _route_truncated_normal,
    "variance_scaling": _route_variance_scaling,
    "orthogonal": _route_orthogonal,
    "delta_orthogonal": _route_delta_orthogonal,
}
# Factories that have required arguments: the arguments of one sample.
_SAMPLE_ARGUMENTS = {"constant": (0.0,),
                     "variance_scaling": (1.0, "fan_in", "normal")}
INIT_PARAMETERS = ("key", "shape", "dtype", "out_sharding")


@dataclasses.dataclass(frozen=True, eq=False)
class InitClosure:
  """The closures one ``jax.nn.initializers`` factory makes, and their router.

  Attributes:
    factory: the factory's name (``"variance_scaling"`` for glorot_* too).
    code: JAX's code object, shared by all of them.
    router: the code a routed closure runs instead.
    namespace: the globals they run with (JAX's module).
  """
  factory: str
  code: types.CodeType
  router: types.CodeType
  namespace: dict[str, Any]

  @property
  def arguments(self) -> tuple[str, ...]:
    """The names of the factory arguments a closure holds, in cell order."""
    return self.code.co_freevars

  def run_original(self, values: tuple[Any, ...], args: tuple[Any, ...]):
    """JAX's own closure holding ``values``, called with ``args``."""
    cells = tuple(types.CellType(v) for v in values)
    fn = types.FunctionType(self.code, self.namespace, self.code.co_name,
                            None, cells)
    return fn(*args)


def _same_layout(code: types.CodeType, router: types.CodeType) -> bool:
  n = code.co_argcount
  return (code.co_freevars == router.co_freevars
          and code.co_varnames[:n] == INIT_PARAMETERS
          and router.co_varnames[:router.co_argcount] == INIT_PARAMETERS
          and code.co_posonlyargcount == code.co_kwonlyargcount == 0
          and not code.co_flags & (inspect.CO_VARARGS
                                   | inspect.CO_VARKEYWORDS))


def learn_init_closures(factories: Mapping[str, Callable]
                        ) -> tuple[tuple[InitClosure, ...], tuple[str, ...]]:
  """What each factory's closures look like, from one closure of each.

  Args:
    factories: JAX's own factories by name (not install()'s shims).

  Returns:
    (the closures a router can answer, the factories whose closures don't
    have the layout written above: a JAX that changed them).
  """
  found, unknown = [], []
  for name, make_router in _ROUTERS.items():
    closure = factories[name](*_SAMPLE_ARGUMENTS.get(name, ()))
    code = getattr(closure, "__code__", None)
    n_cells = len(inspect.signature(make_router).parameters)
    router = make_router(*[None] * n_cells).__code__
    if not isinstance(code, types.CodeType) or not _same_layout(code, router):
      unknown.append(name)
      continue
    # JAX's names, so that argument errors read as they do without jaxfp8.
    router = router.replace(co_name=code.co_name)
    if hasattr(code, "co_qualname"):  # Python 3.11+
      router = router.replace(co_qualname=code.co_qualname)
    found.append(InitClosure(name, code, router, closure.__globals__))
  return tuple(found), tuple(unknown)


# What routed closures answer to: set by route_init_closures.
_ROUTING: dict[str, Any] = {}
# factory -> its InitClosure, kept after unrouting: a closure that entered
# its router just before can still run JAX's code.
_KNOWN: dict[str, InitClosure] = {}
# The closures routed now (weakly: routing keeps nothing alive), so that
# unrouting needs no heap scan.
_ROUTED: "weakref.WeakSet[types.FunctionType]" = weakref.WeakSet()
_ROUTE_LOCK = threading.RLock()


def _functions_running(codes: Iterable[types.CodeType]
                       ) -> list[types.FunctionType]:
  """Every live function whose ``__code__`` is one of ``codes``.

  ``gc.get_referrers`` (documented, CPython) finds the functions that hold a
  code object: every closure of a factory, wherever it is stored.
  """
  codes = tuple(codes)
  ids = {id(c) for c in codes}
  return [r for r in gc.get_referrers(*codes)
          if isinstance(r, types.FunctionType) and id(r.__code__) in ids]


def route_init_closures(kinds: Iterable[InitClosure],
                        answer: Callable[..., Any]) -> int:
  """Routes every existing closure of ``kinds``, and later ones passed to
  :func:`route_init_closure`, to ``answer``.

  A routed closure's call becomes ``answer(factory, arguments, args,
  original)``: ``arguments`` the factory's arguments by name, ``args`` the
  call's ``(key, shape, dtype, out_sharding)``, ``original()`` JAX's result.
  Pass the same ``kinds`` to every call (learn them once): a closure routed
  by an earlier install then shares the routers this one unroutes.

  Returns:
    How many existing closures were routed.
  """
  kinds = tuple(kinds)
  by_code = {id(k.code): k for k in kinds}
  with _ROUTE_LOCK:
    _KNOWN.update({k.factory: k for k in kinds})
    _ROUTING.update(answer=answer, by_code=by_code,
                    by_router={id(k.router): k for k in kinds})
    closures = _functions_running(k.code for k in kinds)
    for fn in closures:
      fn.__code__ = by_code[id(fn.__code__)].router
      _ROUTED.add(fn)
  return len(closures)


def route_init_closure(fn: Any) -> Any:
  """Routes ``fn`` if it is a closure of a routed kind; returns ``fn``."""
  with _ROUTE_LOCK:
    kind = _ROUTING.get("by_code", {}).get(id(getattr(fn, "__code__", None)))
    if kind is not None and isinstance(fn, types.FunctionType):
      fn.__code__ = kind.router
      _ROUTED.add(fn)
  return fn


def unroute_init_closures() -> None:
  """Gives every routed closure its own code back."""
  with _ROUTE_LOCK:
    by_router = _ROUTING.get("by_router", {})
    for fn in list(_ROUTED):
      kind = by_router.get(id(fn.__code__))
      if kind is not None:
        fn.__code__ = kind.code
    _ROUTED.clear()
    _ROUTING.clear()


def _kind(factory: str) -> InitClosure:
  """The InitClosure of ``factory``, learned here if this process has not
  routed yet (a routed closure unpickled into a fresh process)."""
  kind = _KNOWN.get(factory)
  if kind is None:
    import jax.nn.initializers as jax_inits  # pylint: disable=g-import-not-at-top
    originals = {name: original_factory(getattr(jax_inits, name))
                 for name in _ROUTERS}
    kinds, _ = learn_init_closures(originals)
    _KNOWN.update({k.factory: k for k in kinds})
    kind = _KNOWN[factory]
  return kind


def call_routed(factory: str, values: tuple[Any, ...], *args: Any):
  """Where a routed closure of ``factory`` holding ``values`` goes."""
  kind = _kind(factory)
  answer = _ROUTING.get("answer")
  original = functools.partial(kind.run_original, values, args)
  if answer is None:
    return original()
  return answer(factory, dict(zip(kind.arguments, values)), args, original)


# ---------------------------------------------------------------------------
# The factories themselves.
#
# A factory imported into a module before installing (``from
# jax.nn.initializers import normal``) is JAX's function object, which no
# attribute replacement reaches; its closures would carry JAX's code. So,
# while installed, each factory (a plain function, no free variables, in
# JAX 0.10.2 and 0.11.2) runs `_factory_router`: it calls JAX's code and
# routes the closure it returns. The factory's name reaches the router as
# the default of a keyword-only argument (the function object's
# ``__kwdefaults__``, JAX's own being None); ``__signature__`` keeps
# ``inspect.signature`` JAX's.


def _factory_router(*args, _jaxfp8_factory=None, **kwargs):
  from jaxfp8._src import compat  # pylint: disable=g-import-not-at-top,import-self
  return compat.call_factory(_jaxfp8_factory, args, kwargs)


@dataclasses.dataclass(frozen=True, eq=False)
class _Factory:
  fn: types.FunctionType
  code: types.CodeType
  defaults: Any
  kwdefaults: Any

  def original(self) -> types.FunctionType:
    fn = types.FunctionType(self.code, self.fn.__globals__, self.fn.__name__,
                            self.defaults, None)
    fn.__kwdefaults__ = self.kwdefaults
    return fn


# name -> JAX's factory, kept after unrouting (a call may be under way).
_FACTORIES: dict[str, _Factory] = {}
_ROUTED_FACTORIES: list[str] = []


def original_factory(fn: Any) -> Any:
  """JAX's own factory behind ``fn`` (install()'s shim or a routed one)."""
  fn = getattr(fn, "jaxfp8_original", fn)
  if getattr(fn, "__code__", None) is _factory_router.__code__:
    return _FACTORIES[fn.__kwdefaults__["_jaxfp8_factory"]].original()
  return fn


def route_factories(factories: Mapping[str, Any]) -> None:
  """While installed, the closures ``factories`` make are routed."""
  with _ROUTE_LOCK:
    for name, fn in factories.items():
      if (not isinstance(fn, types.FunctionType) or fn.__code__.co_freevars
          or fn.__code__ is _factory_router.__code__):
        continue  # a shim, an alias already routed, or not a plain function
      _FACTORIES[name] = _Factory(fn, fn.__code__, fn.__defaults__,
                                  fn.__kwdefaults__)
      fn.__signature__ = inspect.signature(fn)
      fn.__code__ = _factory_router.__code__
      fn.__kwdefaults__ = {"_jaxfp8_factory": name}
      _ROUTED_FACTORIES.append(name)


def unroute_factories() -> None:
  """Gives every routed factory its own code, defaults and signature back."""
  with _ROUTE_LOCK:
    while _ROUTED_FACTORIES:
      f = _FACTORIES[_ROUTED_FACTORIES.pop()]
      f.fn.__code__, f.fn.__kwdefaults__ = f.code, f.kwdefaults
      del f.fn.__signature__


def call_factory(name: str, args: tuple, kwargs: dict) -> Any:
  """A routed factory's call: JAX's factory, its closure routed."""
  return route_init_closure(_FACTORIES[name].original()(*args, **kwargs))


# ---------------------------------------------------------------------------
# Where JAX, Flax and Haiku hold the functions install() replaces.


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
