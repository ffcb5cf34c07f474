"""One MX GEMM of the recipe core (:mod:`jaxfp8._src.recipes.gemm`), on its backend.

A GEMM multiplies two operands quantized in one MX format along their own
contracting dims (:func:`gemm`), or a plain operand and a packed weight, an
:class:`~jaxfp8._src.mx.array.MXArray` (:func:`packed_dot`, for serving). It
multiplies exactly (exact products, float32 accumulation) on the backend
``kernels.mx_matmul.api.mx_backend`` chooses: the dequantized values in float32
at HIGHEST precision, the Mosaic GPU ``mx_matmul_mgpu`` (mxfp8 on compute
capability 9.x), or, asked for by name, the Triton ``mx_matmul`` or
``lax.scaled_dot``.

Several contracting dims are blocked as one, flattened in
``dimension_numbers`` order; a length that is not a multiple of the block is
padded with zeros (the padding adds nothing). :func:`trace_gemms` records
which GEMMs a traced function builds, in which format.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import operator
from typing import Any, Iterator

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.kernels.mx_matmul import api as mx_api
from jaxfp8._src.mx import array as mx_lib
from jaxfp8._src.mx import quantize as mx_quantize
from jaxfp8._src.mx.formats import get_format
from jaxfp8._src.recipes.mx_recipe import MXRecipe
from jaxfp8._src.numerics.rounding import operand_float32
from jaxfp8._src.numerics import validate


# -- which GEMMs ran in MX -----------------------------------------------------

_LOGS: list[list[tuple[str, str | None, tuple[int, ...], tuple[int, ...]]]] = []


@contextlib.contextmanager
def trace_gemms() -> Iterator[list[tuple[str, str | None, tuple, tuple]]]:
  """Records, while tracing, each GEMM the MX ``dot_general`` builds.

  Yields a list that fills with ``(gemm, format, lhs_shape, rhs_shape)``
  entries (``gemm`` is ``"fwd"``, ``"dgrad"``, ``"wgrad"`` or ``"serve"``;
  ``format`` None for high precision) as functions are traced (so trace a
  fresh function, or lower one, inside the block).
  """
  log: list = []
  _LOGS.append(log)
  try:
    yield log
  finally:
    _LOGS.remove(log)


def record(gemm: str, fmt: str | None, a: Any, b: Any) -> None:
  """Adds a GEMM to the logs :func:`trace_gemms` keeps open."""
  for log in _LOGS:
    log.append((gemm, fmt, tuple(a.shape), tuple(b.shape)))


# -- one GEMM ------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Run:
  """How the MX GEMMs run: the backend asked for and the Pallas mode."""
  backend: str = "auto"
  interpret: bool | None = None


def free_dims(ndim: int, contract, batch) -> tuple[int, ...]:
  """The dims of an operand that are neither contracted nor batch dims."""
  return tuple(d for d in range(ndim) if d not in contract and d not in batch)


def _dim_tuple(t: Any, ndim: int, what: str) -> tuple[int, ...]:
  """``t`` as a tuple of dims of an operand with ``ndim`` axes, checked as
  ``lax.dot_general`` checks them: integers (no bools, no floats) in
  ``[0, ndim)``; raises TypeError or ValueError naming ``what``."""
  try:
    items = tuple(t)
  except TypeError as e:
    raise TypeError(f"{what} must be a sequence of ints, got {t!r}") from e
  out = []
  for d in items:
    try:  # an index, as lax takes it; 1.7 is refused, not truncated
      if isinstance(d, (bool, np.bool_)):
        raise TypeError
      d = operator.index(d)
    except TypeError:
      raise TypeError(f"{what} must hold ints, got {d!r} in {t!r}") from None
    if not 0 <= d < ndim:
      raise ValueError(f"{what} must be in [0, {ndim}) for an operand with "
                       f"{ndim} axes, got {d} in {t!r}")
    out.append(d)
  return tuple(out)


def normalize_dims(dims: Any, lhs_ndim: int, rhs_ndim: int, *, fn: str):
  """``dimension_numbers`` as tuples of non-negative ints, validated as
  ``lax.dot_general`` validates them (in range, no negative, float or bool
  dims); raises naming ``fn`` for anything that is not ``((lc, rc), (lb,
  rb))``."""
  arg = f"`dimension_numbers` argument to `{fn}`"
  try:
    (lc, rc), (lb, rb) = dims
  except (TypeError, ValueError) as e:
    raise ValueError(f"{arg} must be ((lhs_contract, rhs_contract), "
                     f"(lhs_batch, rhs_batch)), got {dims!r}") from e
  return ((_dim_tuple(lc, lhs_ndim, f"{arg}: the lhs contracting dims"),
           _dim_tuple(rc, rhs_ndim, f"{arg}: the rhs contracting dims")),
          (_dim_tuple(lb, lhs_ndim, f"{arg}: the lhs batch dims"),
           _dim_tuple(rb, rhs_ndim, f"{arg}: the rhs batch dims")))


def check_dims(dims: Any, lhs_shape, rhs_shape, *, fn: str):
  """:func:`normalize_dims` of ``dims`` for operands of these shapes, and
  checked to fit them as ``lax.dot_general`` checks (distinct dims, equal
  contracting and batch lengths); raises ValueError naming ``fn``."""
  lhs_shape, rhs_shape = tuple(lhs_shape), tuple(rhs_shape)
  norm = normalize_dims(dims, len(lhs_shape), len(rhs_shape), fn=fn)
  try:
    jax.eval_shape(lambda a, b: lax.dot_general(a, b, norm),
                   jax.ShapeDtypeStruct(lhs_shape, jnp.float32),
                   jax.ShapeDtypeStruct(rhs_shape, jnp.float32))
  except (TypeError, ValueError) as e:
    raise ValueError(f"`dimension_numbers` argument to `{fn}` ({dims!r}) "
                     f"does not fit `lhs` {lhs_shape} and `rhs` {rhs_shape}: "
                     f"{e}") from e
  return norm


def block_size_of(recipe: MXRecipe, fmt: str) -> int:
  """The block size of ``fmt``'s GEMMs: the recipe's, else the format's."""
  return recipe.block_size or get_format(fmt).block_size


def _dot(a, b, dims):
  return lax.dot_general(a, b, dims, precision=lax.Precision.HIGHEST,
                         preferred_element_type=jnp.float32)


def _qdq(x, axes: tuple[int, ...], fmt: str | None, recipe: MXRecipe, *,
         key=None) -> jax.Array:
  """float32 values of ``x`` quantized in ``fmt``, blocked along ``axes``.

  The axes are moved last and flattened (in the order given) into the one
  blocked axis; None is high precision (``x`` in float32).
  """
  x32 = operand_float32(x, fn="dot_general")
  if fmt is None:
    return x32
  axes = tuple(a % x32.ndim for a in axes)
  if key is None and len(axes) == 1:  # in place: no transposes
    return lax.stop_gradient(mx_quantize.values(
        x32, get_format(fmt), block_size=block_size_of(recipe, fmt),
        axis=axes[0], scale_mode=recipe.scale_mode))
  rest = tuple(a for a in range(x32.ndim) if a not in axes)
  perm = rest + axes
  xt = x32.transpose(perm)
  lead = xt.shape[:len(rest)]
  k = math.prod(xt.shape[len(rest):])
  flat = xt.reshape(lead + (k,))
  if key is None:  # decoded in one pass, no packed storage
    out = mx_quantize.values(flat, get_format(fmt),
                             block_size=block_size_of(recipe, fmt), axis=-1,
                             scale_mode=recipe.scale_mode)
  else:
    out = mx_lib.quantize(flat, fmt, block_size=recipe.block_size,
                          scale_mode=recipe.scale_mode,
                          rounding="stochastic", key=key,
                          pad=True).dequantize()
  out = lax.stop_gradient(out).reshape(xt.shape)
  return out.transpose(np.argsort(perm))


def _blocked(x, batch, contract, fmt: str, recipe: MXRecipe, key):
  """``x`` as a (B, F, K) MXArray blocked along K: batch, free and contracting
  dims each flattened in order."""
  x32 = operand_float32(x, fn="dot_general")
  free = free_dims(x32.ndim, contract, batch)
  size = lambda dims: math.prod(x32.shape[d] for d in dims)
  xt = x32.transpose(batch + free + contract).reshape(
      size(batch), size(free), size(contract))
  return mx_lib.quantize(
      xt, fmt, block_size=recipe.block_size, scale_mode=recipe.scale_mode,
      rounding="nearest" if key is None else "stochastic", key=key, pad=True)


def gemm(a: Any, b: Any, dims, fmt: str | None, recipe: MXRecipe, run: Run,
         key: jax.Array | None = None) -> jax.Array:
  """``dot_general(a, b, dims)`` of ``a`` and ``b`` quantized in ``fmt``
  along their contracting dims (``key``: stochastic rounding of ``a``), in
  float32; ``fmt`` None multiplies them in float32 as given.

  ``dims`` is normalized (:func:`normalize_dims`).
  """
  (ac, bc), (ab, bb) = dims
  if fmt is None:
    return _dot(operand_float32(a, fn="dot_general"),
                operand_float32(b, fn="dot_general"), dims)
  backend = mx_api.mx_backend(jax.default_backend(), fmt,
                                block_size=block_size_of(recipe, fmt),
                                backend=run.backend)
  if backend == "dequantize":
    return _dot(_qdq(a, ac, fmt, recipe, key=key), _qdq(b, bc, fmt, recipe),
                dims)
  out = mx_api.mx_gemm(_blocked(a, ab, ac, fmt, recipe, key),
                         _blocked(b, bb, bc, fmt, recipe, None),
                         backend=backend, interpret=run.interpret)
  shape = ([a.shape[d] for d in ab] + [a.shape[d] for d in free_dims(
      a.ndim, ac, ab)] + [b.shape[d] for d in free_dims(b.ndim, bc, bb)])
  return out.reshape(shape)


# -- a GEMM with a packed weight (serving) -------------------------------------

def _packed_backend(lhs_fmt, rhs, dims, recipe, run: Run) -> str:
  """The backend of a packed-weight product; a kernel needs both operands
  in one format and block size, ``rhs`` blocked along its one contracting
  dim and no batch dims."""
  fn = "dot_general"
  (_, rc), (lb, _) = dims
  validate.check_choice(run.backend, mx_api.MX_BACKENDS, "backend", fn)
  block = None if lhs_fmt is None else block_size_of(recipe, lhs_fmt)
  fits = (lhs_fmt == rhs.fmt.name and block == rhs.block_size and not lb
          and rc == (rhs.axis % rhs.ndim,))
  if run.backend in ("auto", "dequantize"):
    backend = run.backend
  elif not fits:
    raise NotImplementedError(
        f"`{fn}` with backend={run.backend!r} and a packed rhs needs dynamic "
        f"MX activations in the weight's format and block size "
        f"({rhs.fmt.name}, {rhs.block_size}), no batch dims and the weight "
        f"blocked along its one contracting dim; got recipe.fwd={lhs_fmt!r}, "
        f"dims {dims}, weight axis {rhs.axis}")
  else:
    backend = run.backend
  if not fits:
    return "dequantize"
  return mx_api.mx_backend(jax.default_backend(), rhs.fmt.name,
                             block_size=rhs.block_size, backend=backend, fn=fn)


def packed_dot(lhs: Any, rhs: mx_lib.MXArray, dims: Any, recipe: MXRecipe,
               preferred_element_type: Any, run: Run) -> jax.Array:
  """``dot_general(lhs, rhs, dims)`` with ``rhs`` a packed weight.

  ``lhs`` is quantized with ``recipe.fwd`` (dynamic MX activations; None:
  weight-only, ``lhs`` as given); the product has no gradient. The result
  dtype is ``preferred_element_type``, else ``lhs``'s float dtype, else
  float32.
  """
  lhs = jnp.asarray(lhs)
  dims = check_dims(dims, lhs.shape, rhs.shape, fn="dot_general")
  (lc, rc), _ = dims
  record("serve", recipe.fwd, lhs, rhs)
  dtype = (lhs.dtype if preferred_element_type is None
           and jnp.issubdtype(lhs.dtype, jnp.floating)
           else preferred_element_type or jnp.float32)
  backend = _packed_backend(recipe.fwd, rhs, dims, recipe, run)
  if backend == "dequantize":
    w = lax.stop_gradient(rhs.dequantize())
    return _dot(_qdq(lhs, lc, recipe.fwd, recipe), w, dims).astype(dtype)
  free = free_dims(rhs.ndim, rc, ())
  w = rhs.transpose(*free, rc[0])
  w = w.reshape(1, math.prod(w.shape[:-1]), w.shape[-1])
  a = _blocked(lax.stop_gradient(lhs), (), lc, recipe.fwd, recipe, None)
  out = mx_api.mx_gemm(a, w, backend=backend, interpret=run.interpret)
  shape = [lhs.shape[d] for d in free_dims(lhs.ndim, lc, ())] + [
      rhs.shape[d] for d in free]
  return out.reshape(shape).astype(dtype)
