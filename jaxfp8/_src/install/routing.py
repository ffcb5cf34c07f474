"""Routes the closures of ``jax.nn.initializers``, and the factories that
make them, to :func:`jaxfp8.install`'s answer, in place.

Flax, Haiku and user code hold JAX's initializer closures wherever they
like (Flax builds ``default_kernel_init = lecun_normal()`` at import), and
modules hold JAX's factories themselves (``from jax.nn.initializers import
normal``); no attribute replacement reaches them. So, while installed, each
such closure and factory runs a router's code instead of JAX's, and gets
its own code back on uninstalling.

Written against JAX 0.10.2, checked against the sources of JAX 0.11.2 and
run on JAX 0.10.2 and 0.12.0.1; ``tests/install/test_routing.py`` checks
every layout fact written below, so that an upgrade that changes one fails
there, by name, instead of install() silently doing nothing.

Closures and factories route together: a routed factory routes the closure
it makes, and a closure routed in a process that has learned nothing (one
unpickled there) learns the layout from JAX's own factories, behind their
routing.
"""
from __future__ import annotations

import dataclasses
import functools
import gc
import inspect
import threading
import types
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# ---------------------------------------------------------------------------
# The closures of jax.nn.initializers.
#
# JAX 0.10.2, 0.11.2 and 0.12.0.1: each factory below returns a closure
# ``init(key, shape, dtype=<the factory's dtype>, out_sharding=None)`` whose
# free variables are (some of) the factory's other arguments; glorot_*,
# lecun_*, he_* return variance_scaling's. Every closure of a factory shares
# its code object, so a closure is told by ``fn.__code__``, and its
# arguments are its cells. A closure's router is made from that code's own
# free variables (:func:`_make_router`): the same names, so the same cells in
# the same order (CPython orders free variables by name), and the same
# parameters; while installed, it is each closure's ``__code__``. It runs
# with JAX's module globals, so it reaches jaxfp8 by an import statement.
# Only the parameters are a fact routing relies on: which cells a closure
# holds is read from it, in whatever JAX is installed.

# The factories whose closures are routed, with the arguments of a sample
# closure (those with required arguments).
_SAMPLE_ARGUMENTS: dict[str, tuple[Any, ...]] = {
    "constant": (0.0,), "uniform": (), "normal": (), "truncated_normal": (),
    "variance_scaling": (1.0, "fan_in", "normal"), "orthogonal": (),
    "delta_orthogonal": (),
}
INIT_PARAMETERS = ("key", "shape", "dtype", "out_sharding")

_ROUTER_SOURCE = """
def make({cells}):
  def init(key, shape, dtype=None, out_sharding=None):
    from jaxfp8._src.install import routing as _jaxfp8_routing
    return _jaxfp8_routing.call_routed({factory!r}, ({values}), key, shape,
                                       dtype, out_sharding)
  return init
"""


def _make_router(factory: str, cells: tuple[str, ...]) -> types.CodeType:
  """The code of a router for closures of ``factory`` holding ``cells``
  (their names): it hands the cells' values, in order, to
  :func:`call_routed`. Made from source so that its free variables are the
  closure's own, whatever they are."""
  source = _ROUTER_SOURCE.format(
      cells=", ".join(cells), factory=factory,
      values="".join(f"{c}, " for c in cells))
  namespace: dict[str, Any] = {}
  exec(compile(source, f"<jaxfp8 router of {factory}>", "exec"), namespace)  # pylint: disable=exec-used
  return namespace["make"](*[None] * len(cells)).__code__


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


def _takes_init_parameters(code: types.CodeType) -> bool:
  """Whether ``code`` takes exactly ``(key, shape, dtype, out_sharding)``,
  positionally or by name: a router can stand in for it."""
  n = code.co_argcount
  return (code.co_varnames[:n] == INIT_PARAMETERS
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
    take ``(key, shape, dtype, out_sharding)`` as written above: a JAX that
    changed them).
  """
  found, unknown = [], []
  for name, sample in _SAMPLE_ARGUMENTS.items():
    closure = factories[name](*sample)
    code = getattr(closure, "__code__", None)
    if not isinstance(code, types.CodeType) or not _takes_init_parameters(
        code):
      unknown.append(name)
      continue
    router = _make_router(name, code.co_freevars)
    if router.co_freevars != code.co_freevars:  # a Python that orders them
      unknown.append(name)                      # otherwise: not routable
      continue
    # JAX's names, so that argument errors read as they do without jaxfp8.
    router = router.replace(co_name=code.co_name)
    if hasattr(code, "co_qualname"):  # Python 3.11+
      router = router.replace(co_qualname=code.co_qualname)
    found.append(InitClosure(name, code, router, closure.__globals__))
  return tuple(found), tuple(unknown)


# ---------------------------------------------------------------------------
# Routing the closures.


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
  run_jax)``: ``arguments`` the cells the closure holds, by name (the
  factory's arguments), ``args`` the call's ``(key, shape, dtype,
  out_sharding)``, ``run_jax()`` JAX's result (``run_jax(*other_args)``: JAX's
  closure called with other arguments).
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
                 for name in _SAMPLE_ARGUMENTS}
    kinds, _ = learn_init_closures(originals)
    _KNOWN.update({k.factory: k for k in kinds})
    kind = _KNOWN[factory]
  return kind


def call_routed(factory: str, values: tuple[Any, ...], *args: Any):
  """Where a routed closure of ``factory`` holding ``values`` goes."""
  kind = _kind(factory)
  answer = _ROUTING.get("answer")

  def run_jax(*call_args: Any):
    # JAX's own closure, called as it was or with other arguments.
    return kind.run_original(values, call_args or args)

  if answer is None:
    return run_jax()
  return answer(factory, dict(zip(kind.arguments, values)), args, run_jax)


# ---------------------------------------------------------------------------
# The factories themselves.
#
# A factory imported into a module before installing (``from
# jax.nn.initializers import normal``) is JAX's function object, which no
# attribute replacement reaches; its closures would carry JAX's code. So,
# while installed, each factory (a plain function, no free variables, in
# JAX 0.10.2, 0.11.2 and 0.12.0.1) runs `_factory_router`: it calls JAX's
# code and routes the closure it returns. The factory's name reaches the
# router as the default of a keyword-only argument (the function object's
# ``__kwdefaults__``, JAX's own being None); ``__signature__`` keeps
# ``inspect.signature`` JAX's.


def _factory_router(*args, _jaxfp8_factory=None, **kwargs):
  from jaxfp8._src.install import routing  # pylint: disable=g-import-not-at-top,import-self
  return routing.call_factory(_jaxfp8_factory, args, kwargs)


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


__all__ = [
    "INIT_PARAMETERS", "InitClosure", "call_factory", "call_routed",
    "learn_init_closures", "original_factory", "route_factories",
    "route_init_closure", "route_init_closures", "unroute_factories",
    "unroute_init_closures",
]
