"""The recipe core: one ``dot_general`` and one ``custom_vjp`` for every recipe.

:func:`dot_general` is ``lax.dot_general`` whose three GEMMs of a training
step (forward ``y = x . w``, input gradient ``dx = dy . w``, weight gradient
``dw = x . dy``) each quantize their two operands as a
:class:`~jaxfp8._src.recipes.spec.Recipe` says. Gradients are those three
products (a ``custom_vjp``): no straight-through approximation beyond the
quantization itself.

How a GEMM multiplies, by its operands' quantizers, is
:mod:`jaxfp8._src.recipes.gemm`: per-tensor codes multiplied and then
scaled, MX operands on the MX backends (the Mosaic GPU kernel on Hopper,
or dequantized), fp8 blockwise operands on the blockwise kernel where it
runs, everything else as the
exact dequantized values in float32 at HIGHEST precision, transformed first
where the recipe says (a random Hadamard transform, the same signs on both
operands).

Per-tensor and elementwise quantizations don't depend on the GEMM's
contracting axis, so an operand quantized so in the forward GEMM is kept as
its codes for the backward GEMM that quantizes it the same way; every other
backward GEMM quantizes the high-precision residual along its own axis.

Keys: stochastic rounding and the Hadamard signs need ``key``. When the
forward GEMM needs one, ``key`` is split into (forward, backward) keys, else
all of it goes backward; a backward key is split into (dgrad, wgrad) keys
(the MX ``dot_general``'s split); within a GEMM, a key serves the one
consumer that needs it, or is split among them in the order (Hadamard
signs, first operand, second operand) of the product (``dy`` first in
both backward GEMMs).

Delayed scaling: ``state`` is ``{role: DelayedScaling}`` for the roles
(``"x"``, ``"w"``, ``"dy"``) whose quantizer is delayed. It is an argument
of the ``custom_vjp`` and its gradient is the next state (Flax's *overwrite
with gradient* convention: Flax's ``TrainState`` replaces such a variable by
its gradient; see :mod:`jaxfp8._src.recipes.layer_state`).
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src.kernels.mx_matmul import api as mx_api
from jaxfp8._src.mx import array as mx_lib
from jaxfp8._src.recipes import mx_gemm as gemm_lib
from jaxfp8._src.recipes.mx_recipe import MXRecipe
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import rounding
from jaxfp8._src.numerics import validate
from jaxfp8._src.numerics.codes import as_float32
from jaxfp8._src.numerics.codes import CodeArray
from jaxfp8._src.numerics.host import device_array
from jaxfp8._src.recipes import gather
from jaxfp8._src.recipes import gemm
from jaxfp8._src.recipes import operand
from jaxfp8._src.recipes import registry
from jaxfp8._src.recipes import spec
from jaxfp8._src.recipes.state import check_state
from jaxfp8._src.recipes.spec import Quantizer
from jaxfp8._src.recipes.spec import Recipe


# -- the custom VJP ------------------------------------------------------------

def _ranges(*groups):
  start, out = 0, []
  for g in groups:
    out.append(tuple(range(start, start + len(g))))
    start += len(g)
  return out


def transpose_dims(dims, lhs_ndim: int, rhs_ndim: int, *, of_rhs: bool):
  """The GEMM ``dot_general(g, other, dims')`` whose transpose by ``perm`` is
  the cotangent of lhs (or rhs): JAX's own dot_general transpose rule."""
  (lc, rc), (lb, rb) = dims
  if of_rhs:  # the rule for lhs, with the operands swapped
    lc, rc, lb, rb = rc, lc, rb, lb
    lhs_ndim, rhs_ndim = rhs_ndim, lhs_ndim
  lf = gemm_lib.free_dims(lhs_ndim, lc, lb)
  rf = gemm_lib.free_dims(rhs_ndim, rc, rb)
  if of_rhs:
    g_batch, g_other, _ = _ranges(lb, rf, lf)
  else:
    g_batch, _, g_other = _ranges(lb, lf, rf)
  contract_sorted = [lc[i] for i in np.argsort(rc)]
  perm = tuple(int(i) for i in np.argsort(list(lb) + list(lf)
                                          + contract_sorted))
  return ((g_other, rf), (g_batch, rb)), perm


def to_dtype(x: jax.Array, dtype: Any) -> jax.Array:
  """``x.astype(dtype)``, saturating (jaxfp8.cast) into a narrow dtype, where
  ``astype`` would give NaN (e4m3fn) or Inf past the format's max."""
  if not formats.is_narrow(dtype):
    return x.astype(dtype)
  return rounding.round_to(x.astype(jnp.float32), dtype)


@dataclasses.dataclass(frozen=True)
class _Static:
  dims: Any
  recipe: Recipe
  run: gemm_lib.Run
  out_dtype: Any
  lhs_dtype: Any
  rhs_dtype: Any
  rhs_ndim: int = 2
  rhs_sharding: Any = None


def split_key(key, first: bool, second: bool):
  """(key of the first use, key of the second) of ``key``, split only when
  both need one."""
  if first and second:
    a, b = jax.random.split(key)
    return a, b
  return (key if first else None), (key if second else None)


def step_keys(key, recipe: Recipe):
  """(forward key, backward key) of a step's ``key`` (None: none), split
  as the module docstring says."""
  if key is None:
    return None, None
  bwd = any(recipe.gemm_needs_key(g) for g in ("dgrad", "wgrad"))
  return split_key(key, recipe.gemm_needs_key("fwd"), bwd)


def _kept(op: gemm.Op, q_bwd: Optional[Quantizer], raw):
  """What the forward keeps of an operand for the backward GEMM that
  quantizes it by ``q_bwd``: its codes where that GEMM multiplies the same
  codes, else the operand as given."""
  if gemm.same_elementwise(q_bwd, op.q):
    return (op.codes, op.scale)
  return raw


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _core(lhs, rhs, key, state, static: _Static):
  return _core_fwd(lhs, rhs, key, state, static)[0]


def _core_fwd(lhs, rhs, key, state, static: _Static):
  r = static.recipe
  states = state or {}
  kf, kb = step_keys(key, r)
  x32, w32 = operand.float32(lhs), operand.float32(rhs)
  nxt = {role: operand.next_state(v, states[role])
         for role, v in (("x", x32), ("w", w32)) if role in states}
  (_, rc), (_, rb) = static.dims
  a = gemm.prepare(x32, r.fwd[0], states.get("x"))
  b, gathered = gather.prepare(w32, r.fwd[1], states.get("w"),
                               static.rhs_sharding, rb, rc)
  gemm.record("fwd", r.fwd, lhs, rhs)
  out, w_values = gemm.multiply(a, b, static.dims, static.run, kf,
                                keep_b=True)
  # Square weight blocks: dgrad multiplies the same quantized values (kept
  # as the gathered codes where the weight was gathered narrow).
  share = gemm.shares_quantized(r.fwd[1], r.dgrad[1], rc)
  if share and gathered is not None:
    w_kept = gathered
  elif share and w_values is not None:
    w_kept = gemm.KeptQuantized(w_values)
  else:
    w_kept = _kept(b, r.dgrad[1], rhs)
  res = (_kept(a, r.wgrad[0], lhs), w_kept, kb, state, nxt)
  return to_dtype(out, static.out_dtype), res


def _residual(kept, q: Optional[Quantizer], state, sharding=None,
              dims=((), ())) -> gemm.Op:
  """The operand a backward GEMM multiplies from what the forward kept;
  a raw weight is quantized along that GEMM's ``dims`` (its batch and
  contracting dims) and gathered narrow to ``sharding``."""
  if isinstance(kept, gemm.KeptQuantized):
    return kept.op(q)
  if isinstance(kept, gather.Gathered):
    return gemm.Op(kept.values(), q, quantized=True)
  if isinstance(kept, tuple):
    return gemm.Op(None, q, *kept)
  return gather.prepare(operand.float32(kept), q, state, sharding,
                        *dims)[0]


def _core_bwd(static: _Static, res, g):
  x_kept, w_kept, kb, state, nxt = res
  r, dims = static.recipe, static.dims
  states = state or {}
  kd, kw = (None, None) if kb is None else split_key(kb, True, True)
  g32 = operand.float32(g)
  if "dy" in states:
    nxt = dict(nxt, dy=operand.next_state(g32, states["dy"]))
  dys = {}  # one quantization of dy per elementwise quantizer

  def dy_op(q):
    if gemm.elementwise(q):
      if q not in dys:
        dys[q] = gemm.prepare(g32, q, states.get("dy"))
      return dys[q]
    return gemm.Op(g32, q)

  x_op = _residual(x_kept, r.wgrad[0], states.get("x"))
  lhs_nd, rhs_nd = len(x_op.shape), static.rhs_ndim
  # dx = dy . w over w's free dims; dw = dy . x over x's free dims.
  d_dims, d_perm = transpose_dims(dims, lhs_nd, rhs_nd, of_rhs=False)
  w_op = _residual(w_kept, r.dgrad[1], states.get("w"), static.rhs_sharding,
                   (d_dims[1][1], d_dims[0][1]))
  gemm.record("dgrad", r.dgrad, g, w_op)
  dx = gemm.multiply(dy_op(r.dgrad[0]), w_op, d_dims, static.run, kd)
  dx = dx.transpose(d_perm)
  w_dims, w_perm = transpose_dims(dims, lhs_nd, rhs_nd, of_rhs=True)
  gemm.record("wgrad", r.wgrad, x_op, g)
  dw = gemm.multiply(dy_op(r.wgrad[1]), x_op, w_dims, static.run, kw)
  dw = dw.transpose(w_perm)
  return (to_dtype(dx, static.lhs_dtype), to_dtype(dw, static.rhs_dtype),
          None, None if state is None else nxt)


_core.defvjp(_core_fwd, _core_bwd)


# -- the public op -------------------------------------------------------------

def _gemm_shapes(lhs_shape, rhs_shape, dims):
  """(name, quantizer pair, contracting length) of the three GEMMs."""
  (lc, _), (lb, rb) = dims
  (_, rc) = dims[0]
  k = lambda shape, d: int(np.prod([shape[i] for i in d], dtype=np.int64))
  return {"fwd": k(lhs_shape, lc),
          "dgrad": k(rhs_shape, gemm_lib.free_dims(len(rhs_shape), rc, rb)),
          "wgrad": k(lhs_shape, gemm_lib.free_dims(len(lhs_shape), lc, lb))}


def apply(lhs: jax.Array, rhs: jax.Array, dims, recipe: Recipe, *,
          out_dtype: Any, key: Any = None, state: Optional[dict] = None,
          run: gemm_lib.Run = gemm_lib.Run(),
          rhs_sharding: Any = None) -> jax.Array:
  """The core on checked inputs: float arrays, normalized ``dims``, a key
  only where the recipe needs one and a state from :func:`check_state`.

  Package-internal: the public ``dot_general`` functions validate, then
  call this.
  """
  static = _Static(dims, recipe, run, np.dtype(out_dtype),
                   np.dtype(lhs.dtype), np.dtype(rhs.dtype), rhs.ndim,
                   rhs_sharding)
  return _core(lhs, rhs, key, state, static)


def check_operand(x: Any, arg: str, fn: str) -> jax.Array:
  """A real operand as a float array (CodeArrays and float6 decoded)."""
  if isinstance(x, CodeArray) or (
      isinstance(x, np.ndarray) and formats.is_narrow(x.dtype)
      and not formats.get(x.dtype).native):
    return as_float32(x)
  validate.check_array(x, arg, fn)
  x = device_array(x)
  if jnp.issubdtype(x.dtype, jnp.floating):
    return x
  if jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == bool:
    return x.astype(jnp.float32)
  raise TypeError(f"`{arg}` argument to `{fn}` must be a real array, got "
                  f"{x.dtype}")


def default_out_dtype(lhs_dtype, rhs_dtype) -> np.dtype:
  """The operands' dtype when they share one (a narrow one included), else
  the promoted dtype of the wide ones, float32 counting for narrow ones."""
  if lhs_dtype == rhs_dtype:
    return np.dtype(lhs_dtype)
  wide = [jnp.float32 if formats.is_narrow(d) else d
          for d in (lhs_dtype, rhs_dtype)]
  return np.dtype(jnp.result_type(*wide))


def run_options(backend: str, interpret: Any, preferred_element_type: Any, *,
                fn: str) -> tuple[gemm_lib.Run, Any]:
  """(how the MX GEMMs run, the checked result dtype or None) of a
  ``dot_general``'s options: ``interpret`` None or a bool."""
  if interpret is not None and not isinstance(interpret, bool):
    raise TypeError(f"`interpret` argument to `{fn}` must be None or a bool, "
                    f"got {interpret!r}")
  if preferred_element_type is not None:
    preferred_element_type = formats.result_dtype(preferred_element_type,
                                                  fn=fn)
  return gemm_lib.Run(backend, interpret), preferred_element_type


def check_backends(recipe: Recipe, backend: str, *, fn: str) -> None:
  """An explicit MX ``backend`` that can't run one of the recipe's MX GEMMs
  fails here (other GEMMs don't use it)."""
  validate.check_choice(backend, mx_api.MX_BACKENDS, "backend", fn)
  platform = jax.default_backend()
  for g in spec.GEMMS:
    qa, qb = getattr(recipe, g)
    if gemm.mx_pair(qa, qb):
      mx_api.mx_backend(platform, qa.format, backend=backend, fn=fn,
                          block_size=gemm_lib.block_size_of(
                              gemm.mx_recipe(qa), qa.format))


def _packed(lhs, rhs, dims, recipe: Recipe, preferred, run, fn: str):
  qx, qw = recipe.fwd
  if qx is not None and (qx.kind != "mx" or qx.stochastic or qx.transform):
    raise ValueError(f"`{fn}` with a packed MXArray rhs quantizes lhs with "
                     f"the recipe's forward x quantizer, which must be MX or "
                     f"None; recipe {recipe.name!r} has {qx}")
  del qw  # the packed weight is already quantized
  mx = (MXRecipe(None, None, None) if qx is None else gemm.mx_recipe(qx))
  return gemm_lib.packed_dot(lhs, rhs, dims, mx, preferred, run)


def key_users(recipe: Recipe) -> str:
  """What needs the key: "stochastic rounding of dgrad dy; a random
  Hadamard transform in wgrad"."""
  sr = [f"{g} {role}" for g in spec.GEMMS for q, role in zip(
      getattr(recipe, g), spec.OPERANDS[g]) if q is not None and q.stochastic]
  rht = [g for g in spec.GEMMS
         if any(q is not None and q.transform for q in getattr(recipe, g))]
  parts = ([f"stochastic rounding of {', '.join(sr)}"] if sr else []) + (
      [f"a random Hadamard transform in {', '.join(rht)}"] if rht else [])
  return "; ".join(parts)


def check_call(lhs: Any, rhs: Any, dimension_numbers: Any, recipe: Recipe,
               preferred_element_type: Any, key: Any, state: Any, *,
               fn: str):
  """``(lhs, rhs, dims, out_dtype, key, state)`` checked for the core:
  float operands, normalized dims that fit them, contracting lengths a
  Hadamard transform takes, a key where the recipe needs one (None
  elsewhere) and a state from :func:`check_state`."""
  lhs, rhs = check_operand(lhs, "lhs", fn), check_operand(rhs, "rhs", fn)
  dims = gemm_lib.check_dims(dimension_numbers, lhs.shape, rhs.shape, fn=fn)
  for g, k in _gemm_shapes(lhs.shape, rhs.shape, dims).items():
    if k % operand.RHT_SIZE and any(
        q is not None and q.transform for q in getattr(recipe, g)):
      raise ValueError(
          f"`{fn}`: recipe {recipe.name!r} applies a random Hadamard "
          f"transform in the {g} GEMM, whose contracting length must be a "
          f"multiple of {operand.RHT_SIZE}, got {k} (shapes {lhs.shape}, "
          f"{rhs.shape}, dims {dims})")
  out_dtype = (default_out_dtype(lhs.dtype, rhs.dtype)
               if preferred_element_type is None else preferred_element_type)
  if recipe.needs_key:
    if key is None:
      raise ValueError(f"`{fn}` with recipe {recipe.name!r} needs a `key` "
                       f"argument (a jax.random key) for {key_users(recipe)}")
    key = validate.check_single_key(key, fn)
  else:
    key = None
  state = check_state(state, recipe, fn=fn)
  return lhs, rhs, dims, out_dtype, key, state


def dot_general(lhs: Any, rhs: Any, dimension_numbers: Any,
                precision: Any = None, preferred_element_type: Any = None, *,
                recipe: Any = "fp8_current", key: Any = None,
                state: Any = None, backend: str = "auto",
                interpret: Optional[bool] = None, rhs_sharding: Any = None,
                **kwargs: Any) -> jax.Array:
  """``lax.dot_general`` whose training-step GEMMs a recipe quantizes.

  A drop-in ``dot_general`` (``flax.linen.Dense(dot_general=
  functools.partial(dot_general, recipe=...))``). The forward GEMM and,
  under ``jax.grad``, the input-gradient and weight-gradient GEMMs each
  quantize their two operands as ``recipe`` says, along their own
  contracting dims, and multiply them exactly (float32 accumulation; see
  the module docstring for how each kind multiplies).

  Args:
    lhs, rhs: real arrays (integers multiply as float32). ``rhs`` may be a
      packed :class:`~jaxfp8.mx.MXArray` (serving: no gradient) with a
      recipe whose forward ``x`` quantizer is MX or None.
    dimension_numbers: ``((lhs_contract, rhs_contract), (lhs_batch,
      rhs_batch))`` as ``lax.dot_general`` takes it.
    precision: ignored (products are exact; accumulation is float32).
    preferred_element_type: the result dtype. By default the operands'
      dtype when they share one, else their promoted wide dtype (narrow
      ones count as float32). A narrow result saturates, as do the
      gradients of narrow operands.
    recipe: a :class:`~jaxfp8.recipes.Recipe`, a name of
      :data:`~jaxfp8.recipes.RECIPES` (``"fp8_current"``,
      ``"fp8_delayed"``, ``"mxfp8"``, ``"fp8_blockwise"``, ``"nvfp4"``...),
      or None (high precision). A bare MX format name is that format in all
      three GEMMs, except ``"nvfp4"``: the NVFP4 training recipe (the format
      in every GEMM is ``"f=nvfp4,d=nvfp4,w=nvfp4"``).
    key: a PRNG key; needed by recipes that round stochastically or apply
      a random Hadamard transform (``recipe.needs_key``), ignored by others.
    state: for recipes with delayed scaling, ``init_state(recipe)`` or the
      next state a gradient returned; its gradient is the next state.
    backend: how MX GEMMs multiply: ``"auto"`` (the Mosaic GPU kernel on
      compute capability 9.x for mxfp8, else ``"dequantize"``),
      ``"dequantize"`` (exact values, float32 dot), ``"mosaic"``,
      ``"triton"`` (``"pallas"``, its older name) or ``"scaled_dot"``;
      fp8 blockwise GEMMs read ``"auto"``, ``"mosaic"`` (the Mosaic GPU
      ``blockwise_matmul``) and ``"dequantize"``, and dequantize for the
      MX-only names; per-tensor GEMMs ignore it.
    interpret: the kernels' mode (True: Pallas' interpreter).
    rhs_sharding: under FSDP, the sharding ``rhs`` (the weight) is
      gathered to for its GEMMs (a ``NamedSharding``, or a
      ``PartitionSpec`` resolved by the mesh in context): ``P()`` for a
      weight gathered whole, ``P(None, "model")`` for one left sharded over
      a tensor-parallel axis. The weight is then quantized where it is
      stored and its codes and scales are gathered instead of float32
      values (see :mod:`jaxfp8._src.recipes.gather`); the numbers are
      unchanged. None (the default): XLA gathers what the GEMM reads.
      A packed MXArray ``rhs`` is gathered as it is stored.
    **kwargs: other ``lax.dot_general`` options Flax passes
      (``out_sharding``); ignored.

  Returns:
    ``lax.dot_general``'s result shape, in ``preferred_element_type``.

  Raises:
    ValueError: an unknown recipe name, ``dimension_numbers`` that
      ``lax.dot_general`` would refuse (out of range, negative, repeated,
      or not fitting the operands), a recipe that needs a key without one,
      a batch of keys, a wrong state, a Hadamard-transformed GEMM whose
      contracting length is not a multiple of 16, an ``rhs_sharding`` with
      more entries than ``rhs`` has dims.
    TypeError: non-array operands, non-integer dims, a bad key or state
      type, an ``rhs_sharding`` that is not a sharding or spec.
    NotImplementedError: an explicit ``backend`` that can't take one of
      the recipe's MX formats.

  >>> import jax, jax.numpy as jnp
  >>> x, w = jnp.ones((4, 64)), jnp.full((64, 8), 0.5)
  >>> dims = (((1,), (0,)), ((), ()))
  >>> dot_general(x, w, dims, recipe="fp8_blockwise")[0, :2]
  Array([32., 32.], dtype=float32)
  >>> from jaxfp8.recipes import init_state
  >>> state = init_state("fp8_delayed", history_length=4)
  >>> g = jax.grad(lambda w, s: dot_general(x, w, dims, recipe="fp8_delayed",
  ...                                      state=s).sum(), (0, 1))(w, state)
  >>> g[1]["w"].amax_history  # the gradient of the state is the next state
  Array([0.5, 0. , 0. , 0. ], dtype=float32)
  """
  del precision, kwargs
  fn = "dot_general"
  recipe = registry.get_recipe(recipe)
  run, preferred_element_type = run_options(backend, interpret,
                                            preferred_element_type, fn=fn)
  if isinstance(rhs, mx_lib.MXArray):
    gather.check_sharding(rhs_sharding, rhs.ndim, fn=fn)
    return _packed(lhs, rhs, dimension_numbers, recipe,
                   preferred_element_type, run, fn)
  check_backends(recipe, backend, fn=fn)
  lhs, rhs, dims, out_dtype, key, state = check_call(
      lhs, rhs, dimension_numbers, recipe, preferred_element_type, key,
      state, fn=fn)
  rhs_sharding = gather.check_sharding(rhs_sharding, rhs.ndim, fn=fn)
  return apply(lhs, rhs, dims, recipe, out_dtype=out_dtype, key=key,
               state=state, run=run, rhs_sharding=rhs_sharding)
