"""MX training: recipes, ``fake_quantize`` and the MX ``dot_general``.

:func:`dot_general` is ``lax.dot_general`` with MX operands in all three
GEMMs of a training step (a ``custom_vjp``):

* forward ``y = x . w``: ``x`` and ``w`` blocked along the contracting dims;
* input gradient ``dx = dy . w``: ``dy`` blocked along the output dims that
  came from ``w`` (its free dims) and ``w`` along those same free dims;
* weight gradient ``dw = x . dy``: ``x`` blocked along its free dims and
  ``dy`` along the output dims that came from ``x``.

Every GEMM quantizes its own operands along *its own* contracting dims, from
the high-precision residuals ``x`` and ``w`` kept by the forward (as
torchao's MXFP8 linear does): a tensor blocked along one axis can't be
re-blocked along another without going back to its values, and re-quantizing
the dequantized forward operand would round twice. Several contracting dims
are blocked as one, flattened in ``dimension_numbers`` order; a length that is
not a multiple of the block is padded with zeros (the padding adds nothing).

Each MX GEMM multiplies exactly (exact products, float32 accumulation) on
the backend ``kernels.dispatch.mx_backend`` chooses: the dequantized values
in float32 at HIGHEST precision, the Pallas ``mx_matmul`` (mxfp8 on GPU) or
``lax.scaled_dot`` (asked for by name).
:class:`MXRecipe` chooses the formats per GEMM (or high precision), the scale
mode, the block size and stochastic rounding of the output gradient.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from typing import Any, Iterator

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.mx import array as mx_lib
from jaxfp8._src.mx import scales as scales_lib
from jaxfp8._src.numerics import rounding as rounding_lib
from jaxfp8._src.numerics.codes import device_array
from jaxfp8._src.numerics import validate
from jaxfp8._src.kernels import dispatch
from jaxfp8._src.mx.formats import get_format

_GEMMS = ("fwd", "dgrad", "wgrad")
# High precision in a recipe: the GEMM multiplies its operands as given.
_HIGH = ("none", "hp", "high", "f32", "float32", "bf16", "bfloat16")


def _check_fmt(fmt: Any, arg: str, fn: str) -> str | None:
  if fmt is None or (isinstance(fmt, str) and fmt.strip().lower() in _HIGH):
    return None
  return get_format(fmt, arg=arg, fn=fn).name


@dataclasses.dataclass(frozen=True)
class MXRecipe:
  """Which MX format each GEMM of a training step uses.

  Attributes:
    fwd: element format of the forward GEMM's operands (``x``, ``w``).
    dgrad: of the input-gradient GEMM's operands (``dy``, ``w``).
    wgrad: of the weight-gradient GEMM's operands (``x``, ``dy``).
      Each is an MX format name (``"mxfp8_e4m3"`` default; ``"mxfp8_e5m2"``,
      ``"mxfp6_e2m3"``, ``"mxfp6_e3m2"``, ``"mxfp4_e2m1"``, ``"nvfp4"``,
      ``"mxint8"``) or None for high precision (the operands as given, like
      torchao's high-precision weight gradient).
    scale_mode: ``"rceil"`` (default: the smallest power of two that never
      saturates, the round-up scale of the published MXFP8 recipes),
      ``"floor"`` (OCP), ``"ceil"`` or ``"even"``.
    block_size: elements per block; None for each format's own.
    stochastic_grad: round the output gradient ``dy`` stochastically in both
      backward GEMMs (``dot_general`` then needs a ``key``).

  >>> MXRecipe(wgrad=None)
  MXRecipe(fwd='mxfp8_e4m3', dgrad='mxfp8_e4m3', wgrad=None, scale_mode='rceil', block_size=None, stochastic_grad=False)
  """
  fwd: str | None = "mxfp8_e4m3"
  dgrad: str | None = "mxfp8_e4m3"
  wgrad: str | None = "mxfp8_e4m3"
  scale_mode: str = "rceil"
  block_size: int | None = None
  stochastic_grad: bool = False

  def __post_init__(self):
    fn = "MXRecipe"
    for g in _GEMMS:
      object.__setattr__(self, g, _check_fmt(getattr(self, g), g, fn))
    validate.check_choice(self.scale_mode, scales_lib.SCALE_MODES,
                          "scale_mode", fn)
    bs = self.block_size
    if bs is not None and (isinstance(bs, bool) or not isinstance(
        bs, (int, np.integer)) or bs < 1):
      raise ValueError(f"`block_size` argument to `{fn}` must be a positive "
                       f"integer or None, got {bs!r}")
    object.__setattr__(self, "stochastic_grad", bool(self.stochastic_grad))

  @property
  def quantized(self) -> bool:
    """Whether any GEMM runs in MX."""
    return any(getattr(self, g) is not None for g in _GEMMS)


_PRESETS = {
    "mxfp8": {}, "mxfp8_e4m3": {},
    "mxfp8_hp_wgrad": {"wgrad": None},
    "mxfp8_e5m2_grad": {"dgrad": "mxfp8_e5m2", "wgrad": "mxfp8_e5m2"},
}
_KEYS = {"fwd": "fwd", "f": "fwd", "dgrad": "dgrad", "d": "dgrad",
         "wgrad": "wgrad", "w": "wgrad", "scale": "scale_mode",
         "scale_mode": "scale_mode", "block": "block_size",
         "block_size": "block_size", "sr": "stochastic_grad",
         "stochastic_grad": "stochastic_grad"}


def get_recipe(recipe: Any = "mxfp8") -> MXRecipe:
  """An :class:`MXRecipe` from a recipe, a preset or a jmp-style string.

  Strings: a preset (``"mxfp8"``: e4m3 in all three GEMMs;
  ``"mxfp8_hp_wgrad"``: the weight gradient in high precision;
  ``"mxfp8_e5m2_grad"``: e5m2 in both backward GEMMs), any MX format name
  (that format in all three), or comma-separated ``key=value`` pairs with
  keys ``fwd``/``f``, ``dgrad``/``d``, ``wgrad``/``w``, ``scale``, ``block``
  and ``sr`` (``none`` or ``hp`` for high precision), e.g.
  ``"f=mxfp8_e4m3,d=mxfp8_e5m2,w=none,scale=floor"``.

  >>> get_recipe("f=mxfp4,w=none").fwd, get_recipe("mxfp8_hp_wgrad").wgrad
  ('mxfp4_e2m1', None)
  """
  fn = "get_recipe"
  if isinstance(recipe, MXRecipe):
    return recipe
  if recipe is None:
    return MXRecipe(fwd=None, dgrad=None, wgrad=None)
  if not isinstance(recipe, str):
    raise TypeError(f"`recipe` argument to `{fn}` must be an MXRecipe or a "
                    f"string, got {type(recipe).__name__}")
  text = recipe.strip().lower()
  if text in _PRESETS:
    return MXRecipe(**_PRESETS[text])
  if "=" not in text:
    f = _check_fmt(text, "recipe", fn)
    return MXRecipe(fwd=f, dgrad=f, wgrad=f)
  kwargs: dict[str, Any] = {}
  for part in text.split(","):
    key, sep, value = (s.strip() for s in part.partition("="))
    if not sep or key not in _KEYS:
      raise ValueError(f"`recipe` argument to `{fn}`: bad entry {part!r} in "
                       f"{recipe!r}; keys are {', '.join(sorted(_KEYS))}")
    name = _KEYS[key]
    if name == "block_size":
      value = None if value in ("none", "") else int(value)
    elif name == "stochastic_grad":
      value = value in ("1", "true", "yes", "on")
    kwargs[name] = value
  return MXRecipe(**kwargs)


# -- fake quantization along a set of axes -------------------------------------

def _float32(x, fn: str) -> jax.Array:
  """``x`` in float32: wide floats (bfloat16 too) converted, others checked."""
  dtype = getattr(x, "dtype", None)
  if (dtype is not None and jnp.issubdtype(dtype, jnp.floating)
      and np.dtype(dtype).itemsize >= 2):
    return device_array(x).astype(jnp.float32)
  return rounding_lib.to_float32(x, fn=fn)


def _qdq(x, axes: tuple[int, ...], fmt: str | None, recipe: MXRecipe, *,
         scale_mode: str | None = None, key=None) -> jax.Array:
  """float32 values of ``x`` quantized in ``fmt``, blocked along ``axes``.

  The axes are moved last and flattened (in the order given) into the one
  blocked axis; None is high precision (``x`` in float32).
  """
  x32 = _float32(x, "dot_general")
  if fmt is None:
    return x32
  axes = tuple(a % x32.ndim for a in axes)
  rest = tuple(a for a in range(x32.ndim) if a not in axes)
  perm = rest + axes
  xt = x32.transpose(perm)
  lead = xt.shape[:len(rest)]
  k = math.prod(xt.shape[len(rest):])
  q = mx_lib.quantize(
      xt.reshape(lead + (k,)), fmt, block_size=recipe.block_size,
      scale_mode=scale_mode or recipe.scale_mode,
      rounding="nearest" if key is None else "stochastic", key=key, pad=True)
  out = lax.stop_gradient(q.dequantize()).reshape(xt.shape)
  return out.transpose(np.argsort(perm))


def fake_quantize(x: Any, fmt: Any, *, block_size: int | None = None,
                  axis: int = -1, scale_mode: str = "floor",
                  rounding: str = "nearest", key: jax.Array | None = None,
                  pad: bool = False) -> jax.Array:
  """``quantize(x, ...).dequantize()`` in ``x``'s dtype, straight-through.

  For quantization-aware training: the forward value is exactly what the MX
  format holds; the gradient is the identity (a ``custom_vjp``, so it also
  crosses ``jit``, ``scan`` and ``remat`` boundaries), saturated elements
  included, as ``jaxfp8.cast`` does.

  Args:
    x: a real array (bfloat16/float16 results are rounded from float32).
    fmt, block_size, axis, scale_mode, rounding, key, pad: as for
      :func:`jaxfp8.mx.quantize`.

  Returns:
    An array of ``x``'s shape and dtype (float32 for non-float ``x``).

  >>> import jax, jax.numpy as jnp
  >>> x = jnp.array([960.0, 3.0, -1.0, 0.0] * 8)
  >>> fake_quantize(x, "mxfp8_e4m3")[:2]
  Array([896.,   3.], dtype=float32)
  >>> jax.grad(lambda v: fake_quantize(v, "mxfp4").sum())(x)[:2]
  Array([1., 1.], dtype=float32)
  """
  x32 = _float32(x, "fake_quantize")
  dtype = (x.dtype if hasattr(x, "dtype") and jnp.issubdtype(
      x.dtype, jnp.floating) and not isinstance(x, np.ndarray) else np.float32)
  q = mx_lib.quantize(lax.stop_gradient(x32), fmt, block_size=block_size,
                      axis=axis, scale_mode=scale_mode, rounding=rounding,
                      key=key, pad=pad)
  return _identity_grad(x32, q.dequantize()).astype(dtype)


@jax.custom_vjp
def _identity_grad(x, values):
  del x
  return values


def _identity_grad_fwd(x, values):
  del x
  return values, None


def _identity_grad_bwd(_, g):
  return g, None


_identity_grad.defvjp(_identity_grad_fwd, _identity_grad_bwd)


# -- which GEMMs ran in MX -----------------------------------------------------

_LOGS: list[list[tuple[str, str | None, tuple[int, ...], tuple[int, ...]]]] = []


@contextlib.contextmanager
def trace_gemms() -> Iterator[list[tuple[str, str | None, tuple, tuple]]]:
  """Records, while tracing, each GEMM :func:`dot_general` builds.

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


def _record(gemm: str, fmt: str | None, a, b) -> None:
  for log in _LOGS:
    log.append((gemm, fmt, tuple(a.shape), tuple(b.shape)))


# -- the MX dot_general --------------------------------------------------------

def _free(ndim: int, contract, batch) -> tuple[int, ...]:
  return tuple(d for d in range(ndim) if d not in contract and d not in batch)


def _dot(a, b, dims):
  return lax.dot_general(a, b, dims, precision=lax.Precision.HIGHEST,
                         preferred_element_type=jnp.float32)


@dataclasses.dataclass(frozen=True)
class _Run:
  """How the MX GEMMs run: the backend asked for and the Pallas mode."""
  backend: str = "auto"
  interpret: bool | None = None


def _blocked(x, batch, contract, fmt: str, recipe: MXRecipe, key):
  """``x`` as a (B, F, K) MXArray blocked along K: batch, free and contracting
  dims each flattened in order."""
  x32 = _float32(x, "dot_general")
  free = _free(x32.ndim, contract, batch)
  size = lambda dims: math.prod(x32.shape[d] for d in dims)
  xt = x32.transpose(batch + free + contract).reshape(
      size(batch), size(free), size(contract))
  return mx_lib.quantize(
      xt, fmt, block_size=recipe.block_size, scale_mode=recipe.scale_mode,
      rounding="nearest" if key is None else "stochastic", key=key, pad=True)


def _block(recipe: MXRecipe, fmt: str) -> int:
  """The block size of ``fmt``'s GEMMs: the recipe's, else the format's."""
  return recipe.block_size or get_format(fmt).block_size


def _gemm(a, b, dims, fmt, recipe: MXRecipe, run: _Run, key=None):
  """``dot_general(a, b, dims)`` of ``a`` and ``b`` quantized in ``fmt``
  along their contracting dims (``key``: stochastic rounding of ``a``)."""
  (ac, bc), (ab, bb) = dims
  if fmt is None:
    return _dot(_float32(a, "dot_general"), _float32(b, "dot_general"), dims)
  backend = dispatch.mx_backend(jax.default_backend(), fmt,
                                block_size=_block(recipe, fmt),
                                backend=run.backend)
  if backend == "dequantize":
    return _dot(_qdq(a, ac, fmt, recipe, key=key), _qdq(b, bc, fmt, recipe),
                dims)
  out = dispatch.mx_gemm(_blocked(a, ab, ac, fmt, recipe, key),
                         _blocked(b, bb, bc, fmt, recipe, None),
                         backend=backend, interpret=run.interpret)
  shape = ([a.shape[d] for d in ab] + [a.shape[d] for d in _free(
      a.ndim, ac, ab)] + [b.shape[d] for d in _free(b.ndim, bc, bb)])
  return out.reshape(shape)


def _ranges(*groups):
  start, out = 0, []
  for g in groups:
    out.append(tuple(range(start, start + len(g))))
    start += len(g)
  return out


def _transpose_dims(dims, lhs_ndim: int, rhs_ndim: int, *, of_rhs: bool):
  """The GEMM ``dot_general(g, other, dims')`` whose transpose by ``perm`` is
  the cotangent of lhs (or rhs): JAX's own dot_general transpose rule."""
  (lc, rc), (lb, rb) = dims
  if of_rhs:  # the rule for lhs, with the operands swapped
    lc, rc, lb, rb = rc, lc, rb, lb
    lhs_ndim, rhs_ndim = rhs_ndim, lhs_ndim
  lf, rf = _free(lhs_ndim, lc, lb), _free(rhs_ndim, rc, rb)
  if of_rhs:
    g_batch, g_other, _ = _ranges(lb, rf, lf)
  else:
    g_batch, _, g_other = _ranges(lb, lf, rf)
  contract_sorted = [lc[i] for i in np.argsort(rc)]
  perm = tuple(int(i) for i in np.argsort(list(lb) + list(lf)
                                          + contract_sorted))
  return ((g_other, rf), (g_batch, rb)), perm


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def _mx_dot(lhs, rhs, key, dims, recipe, run):
  return _mx_dot_fwd(lhs, rhs, key, dims, recipe, run)[0]


def _mx_dot_fwd(lhs, rhs, key, dims, recipe, run):
  _record("fwd", recipe.fwd, lhs, rhs)
  return _gemm(lhs, rhs, dims, recipe.fwd, recipe, run), (lhs, rhs, key)


def _mx_dot_bwd(dims, recipe, run, res, g):
  lhs, rhs, key = res
  kd = kw = None
  if recipe.stochastic_grad:
    kd, kw = jax.random.split(key)
  # dx = dy . w over w's free dims: both blocked along those dims.
  _record("dgrad", recipe.dgrad, g, rhs)
  d_dims, perm = _transpose_dims(dims, lhs.ndim, rhs.ndim, of_rhs=False)
  dx = _gemm(g, rhs, d_dims, recipe.dgrad, recipe, run, kd).transpose(perm)
  # dw = x . dy over x's free dims: both blocked along those dims.
  _record("wgrad", recipe.wgrad, lhs, g)
  w_dims, perm = _transpose_dims(dims, lhs.ndim, rhs.ndim, of_rhs=True)
  dw = _gemm(g, lhs, w_dims, recipe.wgrad, recipe, run, kw).transpose(perm)
  return dx.astype(lhs.dtype), dw.astype(rhs.dtype), None


_mx_dot.defvjp(_mx_dot_fwd, _mx_dot_bwd)


def _normalize_dims(dims, lhs_ndim: int, rhs_ndim: int, fn: str):
  try:
    (lc, rc), (lb, rb) = dims
    lc, rc, lb, rb = (tuple(int(d) % n for d in t) for t, n in (
        (lc, lhs_ndim), (rc, rhs_ndim), (lb, lhs_ndim), (rb, rhs_ndim)))
  except (TypeError, ValueError) as e:
    raise ValueError(f"`dimension_numbers` argument to `{fn}` must be "
                     f"((lhs_contract, rhs_contract), (lhs_batch, rhs_batch)), "
                     f"got {dims!r}") from e
  return (lc, rc), (lb, rb)


def dot_general(lhs: Any, rhs: Any, dimension_numbers: Any,
                precision: Any = None, preferred_element_type: Any = None, *,
                recipe: Any = "mxfp8", key: jax.Array | None = None,
                backend: str = "auto", interpret: bool | None = None,
                **kwargs: Any) -> jax.Array:
  """``lax.dot_general`` with MX operands in the forward and both gradients.

  A drop-in ``dot_general`` (Flax's ``nn.Dense(dot_general=...)`` takes
  ``functools.partial(dot_general, recipe=...)``). Forward, input-gradient
  and weight-gradient GEMMs each quantize their own two operands along their
  own contracting dims (see the module docstring) and multiply them exactly
  (exact products, float32 accumulation); gradients are those three products
  (no straight-through approximations beyond the quantization itself).

  ``rhs`` may also be an :class:`~jaxfp8._src.mx.array.MXArray` (packed weights,
  for serving): ``lhs`` is quantized with ``recipe.fwd`` (dynamic MX
  activations; None: weight-only, ``lhs`` as given) and multiplied with the
  packed weight; such a product has no gradient.

  Args:
    lhs, rhs: real arrays (any float dtype; they are rounded from float32).
    dimension_numbers: ``((lhs_contract, rhs_contract), (lhs_batch,
      rhs_batch))`` as ``lax.dot_general`` takes it.
    precision: ignored (the products are exact; accumulation is float32).
    preferred_element_type: the result dtype; default the operands'
      promoted float dtype.
    recipe: an :class:`MXRecipe` or a string for :func:`get_recipe`.
    key: a PRNG key, needed with ``recipe.stochastic_grad``.
    backend: how each MX GEMM multiplies: ``"auto"`` (the Pallas
      ``mx_matmul`` on GPU for mxfp8, else ``"dequantize"``),
      ``"dequantize"`` (exact dequantize, float32 dot at HIGHEST precision),
      ``"pallas"`` (mxfp8 only) or ``"scaled_dot"`` (``lax.scaled_dot``; not
      fp6). High-precision GEMMs always run as a float32 dot.
    interpret: the Pallas backend's mode (as ``jaxfp8.ops.mx_matmul`` takes
      it; True runs the kernel in Pallas' interpreter, on CPU too).
    **kwargs: other ``lax.dot_general`` options Flax passes
      (``out_sharding``); ignored.

  Returns:
    ``lax.dot_general``'s result shape, in ``preferred_element_type``.

  Raises:
    NotImplementedError: an explicit ``backend`` that can't take one of the
      recipe's formats.

  >>> import jax, jax.numpy as jnp
  >>> x, w = jnp.ones((4, 64)), jnp.full((64, 8), 0.5)
  >>> dot_general(x, w, (((1,), (0,)), ((), ())))[0, :2]
  Array([32., 32.], dtype=float32)
  >>> dot_general(x, w, (((1,), (0,)), ((), ())), backend="pallas",
  ...             interpret=True)[0, :2]
  Array([32., 32.], dtype=float32)
  """
  del precision, kwargs
  fn = "dot_general"
  recipe = get_recipe(recipe)
  if interpret is not None and not isinstance(interpret, bool):
    raise TypeError(f"`interpret` argument to `{fn}` must be None or a bool, "
                    f"got {interpret!r}")
  run = _Run(backend, interpret)
  if isinstance(rhs, mx_lib.MXArray):
    return _serve_dot(lhs, rhs, dimension_numbers, recipe,
                      preferred_element_type, run)
  platform = jax.default_backend()
  validate.check_choice(backend, dispatch.MX_BACKENDS, "backend", fn)
  for g in _GEMMS:  # an explicit backend that can't run a GEMM fails here
    fmt = getattr(recipe, g)
    if fmt is not None:
      dispatch.mx_backend(platform, fmt, backend=backend, fn=fn,
                          block_size=_block(recipe, fmt))
  validate.check_array(lhs, "lhs", fn)
  validate.check_array(rhs, "rhs", fn)
  lhs, rhs = device_array(lhs), device_array(rhs)
  dims = _normalize_dims(dimension_numbers, lhs.ndim, rhs.ndim, fn)
  # Integer operands multiply as float32; gradients come back in each
  # operand's (float) dtype, the result in the promoted one.
  if not jnp.issubdtype(lhs.dtype, jnp.floating):
    lhs = lhs.astype(jnp.float32)
  if not jnp.issubdtype(rhs.dtype, jnp.floating):
    rhs = rhs.astype(jnp.float32)
  out_dtype = (jnp.result_type(lhs.dtype, rhs.dtype)
               if preferred_element_type is None else preferred_element_type)
  if recipe.stochastic_grad:
    if key is None:
      raise ValueError(f"`{fn}` with a recipe of stochastic_grad=True needs "
                       "a `key` argument (a jax.random key)")
    key = validate.check_key(key, fn)
  else:
    key = None
  return _mx_dot(lhs, rhs, key, dims, recipe, run).astype(out_dtype)


def _serve_backend(lhs_fmt, rhs, dims, recipe, run: _Run) -> str:
  """The backend of a packed-weight product; a kernel needs both operands
  in one format and block size, ``rhs`` blocked along its one contracting
  dim and no batch dims."""
  fn = "dot_general"
  (_, rc), (lb, _) = dims
  validate.check_choice(run.backend, dispatch.MX_BACKENDS, "backend", fn)
  block = None if lhs_fmt is None else _block(recipe, lhs_fmt)
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
  return dispatch.mx_backend(jax.default_backend(), rhs.fmt.name,
                             block_size=rhs.block_size, backend=backend, fn=fn)


def _serve_dot(lhs, rhs, dims, recipe, preferred_element_type, run: _Run):
  lhs = jnp.asarray(lhs)
  dims = _normalize_dims(dims, lhs.ndim, rhs.ndim, "dot_general")
  (lc, rc), _ = dims
  _record("serve", recipe.fwd, lhs, rhs)
  dtype = (lhs.dtype if preferred_element_type is None
           and jnp.issubdtype(lhs.dtype, jnp.floating)
           else preferred_element_type or jnp.float32)
  backend = _serve_backend(recipe.fwd, rhs, dims, recipe, run)
  if backend == "dequantize":
    w = lax.stop_gradient(rhs.dequantize())
    return _dot(_qdq(lhs, lc, recipe.fwd, recipe), w, dims).astype(dtype)
  free = _free(rhs.ndim, rc, ())
  w = rhs.transpose(*free, rc[0])
  w = w.reshape(1, math.prod(w.shape[:-1]), w.shape[-1])
  a = _blocked(lax.stop_gradient(lhs), (), lc, recipe.fwd, recipe, None)
  out = dispatch.mx_gemm(a, w, backend=backend, interpret=run.interpret)
  shape = [lhs.shape[d] for d in _free(lhs.ndim, lc, ())] + [
      rhs.shape[d] for d in free]
  return out.reshape(shape).astype(dtype)
