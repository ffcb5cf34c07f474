"""Shims over the JAX and Flax APIs jaxfp8 calls that are private or differ
between versions.

jaxfp8 runs on JAX 0.10, 0.11 and 0.12. It was written against JAX 0.10.2,
Flax 0.12.8 and Haiku 0.0.17, checked against the sources of JAX 0.11.2, and
its suite runs on JAX 0.10.2 and on 0.12.0.1 with Flax 0.12.12 (the table of
each internal per version is in docs/compat.md). Each internal used below
names the fact it relies on and the versions it was checked on, and a test
checks each (``tests/test_compat.py``, or the test docs/compat.md names),
so that an upgrade that moves one fails there, by name, instead of silently
doing nothing.

Holds: the JAX version and the class of traced values; the MLIR constant
handlers (for :mod:`jaxfp8._src.numerics.constant_guard`); which formats the
backend holds and computes with; ``jax.random``'s own sampler methods;
resharding, x64, the GPU lowering target; ``jnp.einsum``'s dot_general hook
and Flax's Einsum bias shape. What :func:`jaxfp8.install` patches in JAX,
Flax and Haiku is in :mod:`jaxfp8._src.install`.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from typing import Any

import jax
import ml_dtypes
import numpy as np

JAX_VERSION = tuple(int(p) for p in jax.__version__.split(".")[:3] if p.isdigit())

# The class of traced values (isinstance checks only). jax.core keeps it
# public today (0.10.2, 0.11.2, 0.12.0.1); JAX has been moving jax.core's names away.
try:
  Tracer = jax.core.Tracer
except AttributeError:  # pragma: no cover - a JAX that dropped it
  from jax._src.core import Tracer  # pylint: disable=g-import-not-at-top

# The tracer of a function being staged out to a jaxpr (the body of jit,
# scan, cond, checkpoint), as opposed to one of a transformation applied as
# it runs (grad's linearize and JVP tracers, vmap's batch tracer). Private
# in JAX 0.10.2, 0.11.2 and 0.12.0.1:
# jax._src.interpreters.partial_eval.DynamicJaxprTracer.
from jax._src.interpreters.partial_eval import DynamicJaxprTracer  # pylint: disable=g-import-not-at-top,wrong-import-position


def is_staged(x: Any) -> bool:
  """Whether ``x`` is a tracer of a function being staged out to a jaxpr."""
  return isinstance(x, DynamicJaxprTracer)


# ---------------------------------------------------------------------------
# MLIR constant handlers.


def get_constant_handler(type_):
  """Returns JAX's MLIR constant handler for ``type_`` (None if absent).

  JAX 0.10.2, 0.11.2 and 0.12.0.1:
  ``jax._src.interpreters.mlir.get_constant_handler``
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

  JAX 0.10.2, 0.11.2 and 0.12.0.1 lower ``jax._src.literals.TypedNdArray``
  (NumPy constants JAX made itself) with the same handler as ``np.ndarray``.
  """
  found = [np.ndarray]
  try:
    from jax._src import literals  # pylint: disable=g-import-not-at-top
    found.append(literals.TypedNdArray)
  except (ImportError, AttributeError):
    pass
  return tuple(found)


# Bit widths a backend may hold but not compute with: JAX 0.11.2's and
# 0.12.0.1's CPU backends take float6 arrays (0.10.2's refuses them), but
# converting one to float32 fails to compile (LLVM: "Invalid bitcast" of i6;
# on 0.11.2 concatenating two aborts the process), so no probe compiles
# float6 code, and float6 stays uint8 codes on every version.
# tests/numerics/test_formats.py checks that fact.
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
  if not _takes_keyword(name, "method"):
    return ()
  return ("exact", "approximate")


@functools.lru_cache(maxsize=None)
def _takes_keyword(name: str, arg: str) -> bool:
  """Whether ``jax.random.<name>`` has a keyword-only ``arg``."""
  fn = getattr(jax.random, name, None)
  param = None if fn is None else inspect.signature(fn).parameters.get(arg)
  return param is not None and param.kind is inspect.Parameter.KEYWORD_ONLY


# The values of jax.random's own ``mode`` (JAX 0.12.1) per sampler.
RANDOM_MODES = {"normal": (None, "low", "high", "highest"),
                "truncated_normal": ("low", "high")}


def jax_random_mode(name: str, mode: Any) -> dict[str, Any]:
  """``jax.random.<name>``'s own ``mode`` as its keyword arguments, checked.

  JAX 0.12.1 added ``mode`` (how many random bits the float draw converts:
  :data:`RANDOM_MODES`) to ``normal`` and ``truncated_normal``. Where the
  installed function has none its draw is its default, so only None and
  ``"low"`` are accepted there (``{}``).

  Raises:
    ValueError: for a ``mode`` that is not one of the sampler's.
    TypeError: for ``"high"`` or ``"highest"`` where JAX has no ``mode``.

  >>> jax_random_mode("normal", None) in ({}, {"mode": None})
  True
  """
  if mode not in RANDOM_MODES[name]:
    raise ValueError(f"`mode` argument to `{name}` must be one of "
                     f"{RANDOM_MODES[name]}, got {mode!r}")
  if _takes_keyword(name, "mode"):
    return {"mode": mode}
  if mode not in (None, "low"):
    raise TypeError(f"`mode` argument to `{name}`: {mode!r} needs "
                    f"jax.random.{name}'s own `mode` (JAX >= 0.12.1); JAX "
                    f"{jax.__version__} has none")
  return {}


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

  JAX 0.10.2 and 0.12.0.1 lower for CUDA on a machine without a GPU as is;
  JAX 0.11 raises ``RuntimeError: No supported GPU devices found, please
  specify an abstract GPU device using AbstractDevice``. Lowering inside an
  abstract one-device mesh of an abstract H200 works on all (0.10.2, 0.11.2,
  0.12.0.1:
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

  JAX 0.10.2, 0.11.2 and 0.12.0.1: ``jnp.einsum`` takes a private keyword
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

  Flax 0.12.8 and 0.12.12: ``flax.linen.Einsum._get_bias_shape(einsum_str, lhs, rhs)``
  (a private method) returns both; ``Einsum.__call__`` uses it for the bias
  parameter and for adding it to the output.
  """
  return module._get_bias_shape(einsum_str, lhs, rhs)  # pylint: disable=protected-access


# ---------------------------------------------------------------------------
# Mosaic GPU (Pallas' `plgpu`): the kernel launcher and its CPU interpreter.


def mosaic_gpu_interpret_params() -> Any:
  """The Mosaic GPU interpreter's parameters, or None where JAX has none.

  JAX 0.11.2 and 0.12.0.1 export ``InterpretGPUParams`` from
  ``jax.experimental.pallas.mosaic_gpu``; passed as ``interpret=`` to
  ``plgpu.kernel`` it runs the kernel on CPU, simulating shared memory,
  barriers, TMA and ``wgmma``. JAX 0.10.2 has no interpreter.
  """
  try:
    from jax.experimental.pallas import mosaic_gpu as plgpu  # pylint: disable=g-import-not-at-top
  except ImportError:  # pragma: no cover - a jaxlib without Mosaic GPU
    return None
  params = getattr(plgpu, "InterpretGPUParams", None)
  return None if params is None else params()


def mosaic_gpu_kernel(body: Callable, *, out_shape: Any, scratch: Any,
                      grid: tuple[int, ...], grid_names: tuple[str, ...],
                      interpret: Any, name: str) -> Callable:
  """``plgpu.kernel(body, ...)`` with the keyword names this JAX takes.

  JAX 0.12.0.1 names the output and scratch types ``out_type`` and
  ``scratch_types``; 0.10.2 takes those and ``out_shape`` and
  ``scratch_shapes`` too, older releases only the latter.
  ``interpret`` is None (compiled) or :func:`mosaic_gpu_interpret_params`.
  """
  from jax.experimental.pallas import mosaic_gpu as plgpu  # pylint: disable=g-import-not-at-top
  params = inspect.signature(plgpu.kernel).parameters
  out_kw = "out_type" if "out_type" in params else "out_shape"
  scratch_kw = "scratch_types" if "scratch_types" in params else "scratch_shapes"
  kwargs = {out_kw: out_shape, scratch_kw: scratch, "grid": grid,
            "grid_names": grid_names}
  if interpret is not None:
    kwargs["interpret"] = interpret
  if "name" in params:
    kwargs["name"] = name
  return plgpu.kernel(body, **kwargs)


def mosaic_gpu_transposed(ref: Any) -> Any:
  """A 2-D shared-memory ref viewed transposed (``ref.T``; JAX releases
  before ``TransformedRef.T`` had ``plgpu.transpose_ref(ref, (1, 0))``)."""
  if hasattr(ref, "T"):
    return ref.T
  from jax.experimental.pallas import mosaic_gpu as plgpu  # pylint: disable=g-import-not-at-top
  return plgpu.transpose_ref(ref, (1, 0))  # pragma: no cover - older JAX


def mosaic_gpu_load(ref: Any, layout: Any) -> Any:
  """``plgpu.load(ref, layout=layout)`` of the whole ref: JAX 0.12.0.1 takes
  the ref alone, 0.10.2 an index too (``()``: all of it)."""
  from jax.experimental.pallas import mosaic_gpu as plgpu  # pylint: disable=g-import-not-at-top
  if "idx" in inspect.signature(plgpu.load).parameters:
    return plgpu.load(ref, (), layout=layout)
  return plgpu.load(ref, layout=layout)


def mosaic_gpu_mixed_fp8() -> bool:
  """Whether ``plgpu.wgmma`` takes an e4m3 operand with an e5m2 one.

  JAX 0.12.0.1 does (wgmma has separate fp8 operand types); 0.10.2 raises
  "Mixed input dtypes for matrix multiplication unsupported". Not checked
  on 0.11.2, so counted as not taking it there.
  """
  return JAX_VERSION >= (0, 12, 0)


# ---------------------------------------------------------------------------
# Qwix (0.1.8): the provider hooks jaxfp8's Qwix face relies on. Three are
# private; tests/test_compat.py names each, so a Qwix that moves one fails
# there by name. Qwix is imported on first use (an optional extra).

QWIX_HOOKS = (
    "qwix.QtProvider._get_current_rule_and_op_id",
    "qwix._src.utils.flax_util.get_or_create_variable",
    "qwix._src.utils.flax_util.make_rng",
)


def qwix_rule_and_op_id(provider: Any, op_name: str) -> tuple[Any, Any]:
  """(the rule matching the running module and ``op_name``, a unique id of
  this call of it in the module): what Qwix's own providers read."""
  return provider._get_current_rule_and_op_id(op_name)  # pylint: disable=protected-access


def qwix_variable(collection: str, name: str, init: Callable[[], Any]) -> Any:
  """The value of the running module's variable (linen or nnx), made by
  ``init`` on first use (Qwix's helper: it also works in non-compact linen
  modules)."""
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from qwix._src.utils import flax_util  # pylint: disable=g-import-not-at-top
  var = flax_util.get_or_create_variable(collection, name, init)
  # nnx 0.12 deprecates .value for array variables; linen's has only .value.
  return var[...] if isinstance(var, nnx.Variable) else var.value


def qwix_make_rng(stream: str) -> Any:
  """A fresh key of the running module's ``stream`` (linen: its rng
  stream; nnx: the module's ``qwix_rngs``)."""
  from qwix._src.utils import flax_util  # pylint: disable=g-import-not-at-top
  return flax_util.make_rng(stream)
