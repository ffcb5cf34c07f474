"""Grouped GEMMs under a recipe: :func:`ragged_dot` (mixture-of-experts).

A mixture-of-experts FFN multiplies tokens sorted by expert, ``lhs (m, k)``,
by a stack of expert weights, ``rhs (G, k, n)``: rows of group ``g`` (the
``group_sizes[g]`` rows after those of groups ``< g``) multiply
``rhs[g]``. :func:`ragged_dot` is ``lax.ragged_dot`` whose three GEMMs of a
training step each quantize their operands as a recipe says, with **every
expert a tensor of its own**: group ``g``'s GEMMs equal the dense
recipe's GEMMs (:func:`~jaxfp8._src.recipes.core.dot_general`) of its own
rows and its own weight.

* Forward ``y_g = x_g . w_g`` and input gradient ``dx_g = dy_g . w_g^T``:
  ``x_g`` and ``dy_g`` quantized along ``k`` and ``n``; ``w_g`` along its
  own contracting axis.
* Weight gradient ``dw_g = x_g^T . dy_g``: both quantized along the
  tokens, the group's rows only. Blocks along the tokens (1x128, 1x32,
  1x16) and the 16-point Hadamard transform start at each group's first
  row; a group's last partial block holds its own rows padded with zeros
  (as Transformer Engine pads), so any ``group_sizes`` is exact, 0 included.
* Tensor-level quantities are per group: a per-tensor scale (current or
  delayed: one :class:`~jaxfp8.policy.DelayedScaling` per expert) and the
  NVFP4 tensor scale of ``x_g``, ``dy_g`` and ``w_g``.

How it runs: the weight is quantized per expert (``vmap``); a token operand
is quantized in one pass where its quantizer has no tensor-level quantity
(MX, fp8 blockwise, casts), else once per group with the other groups'
rows masked to zero (a ``fori_loop``: the program holds one quantizer).
Where a GEMM's blocks run along the tokens, its operands are laid out
**group-aligned**: group ``g`` starts at row ``A_g = sum_{h<g}
ceil(n_h / B) B``, where ``B`` is the least common multiple of the
token-axis block lengths (16 with a Hadamard transform), in a buffer of
``round_up(m + G (B - 1), B)`` rows. The quantized values are multiplied
exactly in float32 at HIGHEST precision by ``lax.ragged_dot`` and
``lax.ragged_dot_general`` (no fused grouped fp8 kernel yet), back in the
rows' own layout (the padding rows are zeros), except where a Hadamard
transform has mixed them into a group's last chunk.

Stochastic rounding reads one 32-bit word per element of the GEMM's view of
the whole operand in that layout (drawn once with the GEMM's key, as the
dense recipe draws them for its view): ``(m, K)`` rows for the forward and
input-gradient operands, ``(n or k, rows of the aligned buffer)`` for the
weight gradient's. Keys split as the dense core's (its module docstring);
a stochastically rounded weight takes ``split(key, G)[g]`` for expert ``g``.

Rows are assigned to groups as ``lax.ragged_dot`` assigns them: row ``r``
belongs to the number of running sums ``cumsum(group_sizes)`` at or below
``r`` (rows past the total belong to none: their outputs and input
gradients are zero, and they are in no tensor).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Optional

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src import compat
from jaxfp8._src.fp8 import scaling
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import validate
from jaxfp8._src.recipes import core
from jaxfp8._src.recipes import gemm
from jaxfp8._src.recipes import groups
from jaxfp8._src.recipes import operand
from jaxfp8._src.recipes import registry
from jaxfp8._src.recipes.spec import Quantizer
from jaxfp8._src.recipes.spec import Recipe
from jaxfp8._src.recipes.state import check_state

# -- quantizing per group ----------------------------------------------------------

def _tensor_level(q: Quantizer) -> bool:
  """Whether ``q`` reads a quantity of the whole tensor (a per-tensor
  scale, the NVFP4 tensor scale)."""
  return q.kind in ("tensor", "nvfp4")


def _quantize(x: jax.Array, axis: int, q: Quantizer, key, state) -> jax.Array:
  """The dense rule: float32 values of matrix ``x`` quantized by ``q``
  along its contracting ``axis``."""
  if q.kind in ("cast", "tensor"):
    return operand.dequantize_elementwise(
        *operand.quantize_tensor(x, q, state))
  return operand.quantize_along(x, axis, q, key)


def quantize_rows(x: jax.Array, axis: int, q: Optional[Quantizer],
                  seg: jax.Array, n_groups: int, key=None,
                  state=None) -> jax.Array:
  """float32 values of ``x`` (rows, c), each group's rows (``seg``)
  quantized by ``q`` along ``axis`` as a tensor of its own (``state``:
  per-expert leaves); rows of no group as anything."""
  if q is None:
    return x
  if not _tensor_level(q):
    return _quantize(x, axis, q, key, None)

  def body(g, out):
    mask = (seg == g)[:, None]
    st = None if state is None else jax.tree.map(lambda a: a[g], state)
    v = _quantize(jnp.where(mask, x, 0.0), axis, q, key, st)
    return jnp.where(mask, v, out)

  return lax.fori_loop(0, n_groups, body, jnp.zeros_like(x))


def quantize_experts(w: jax.Array, axis: int, q: Optional[Quantizer],
                     key=None, state=None) -> jax.Array:
  """float32 values of each expert ``w[g]`` (G, k, n) quantized by ``q``
  along its ``axis`` (0: k, 1: n) as a tensor of its own."""
  if q is None:
    return w
  keys = None if key is None else jax.random.split(key, w.shape[0])
  return jax.vmap(lambda wg, kg, sg: _quantize(wg, axis, q, kg, sg),
                  in_axes=(0, None if keys is None else 0,
                           None if state is None else 0))(w, keys, state)


def _next_rows(x32, seg, n_groups, state):
  """Per-expert delayed states after recording each group's amax."""
  def amax(g):
    if x32.size == 0:
      return jnp.float32(0)
    return scaling.amax(jnp.where((seg == g)[:, None], x32, 0.0))
  amaxes = jax.vmap(amax)(lax.iota(jnp.int32, n_groups))
  return jax.vmap(lambda s, a: s.update(a))(state, amaxes)


def _keys(key, users: list) -> dict:
  """``{user: key}``: the key to its one user, or split among them in
  order (the dense core's rule)."""
  if not users:
    return {}
  if len(users) == 1:
    return {users[0]: key}
  return dict(zip(users, jax.random.split(key, len(users))))


def _gemm_keys(key, pair, roles) -> dict:
  """Keys of one GEMM's consumers: (Hadamard signs, first operand, second
  operand), each where it needs one."""
  if key is None:
    return {}
  users = (["rht"] if any(q is not None and q.transform for q in pair)
           else []) + [role for q, role in zip(pair, roles)
                       if q is not None and q.stochastic]
  return _keys(key, users)


# -- the custom VJP ------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Static:
  recipe: Recipe
  out_dtype: Any
  lhs_dtype: Any
  rhs_dtype: Any


def _aligns(r: Recipe) -> tuple[int, int, int]:
  """The row alignment of the forward, input-gradient and weight-gradient
  GEMMs' token operands."""
  wg = [groups.token_block(q) for q in r.wgrad]
  if any(q is not None and q.transform for q in r.wgrad):
    wg.append(operand.RHT_SIZE)
  return (groups.row_block(r.fwd[0]), groups.row_block(r.dgrad[0]),
          math.lcm(*wg))


def _transformed(a, b, signs, axis_a, axis_b):
  """Both operands of a GEMM by its Hadamard transform (None: as given)."""
  if signs is None:
    return a, b
  return operand.rht(a, signs, axis_a), operand.rht(b, signs, axis_b)


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _core(lhs, rhs, group_sizes, key, state, static: _Static):
  return _core_fwd(lhs, rhs, group_sizes, key, state, static)[0]


def _core_fwd(lhs, rhs, group_sizes, key, state, static: _Static):
  r = static.recipe
  states = state or {}
  n_groups = rhs.shape[0]
  bwd_key = any(r.gemm_needs_key(g) for g in ("dgrad", "wgrad"))
  kf, kb = (None, None) if key is None else core.split_key(
      key, r.gemm_needs_key("fwd"), bwd_key)
  x32, w32 = operand.float32(lhs), operand.float32(rhs)
  seg = groups.segments(group_sizes, x32.shape[0])
  n = groups.counts(seg, n_groups)
  nxt = {}
  if "x" in states:
    nxt["x"] = _next_rows(x32, seg, n_groups, states["x"])
  if "w" in states:
    nxt["w"] = jax.vmap(operand.next_state)(w32, states["w"])
  qx, qw = r.fwd
  keys = _gemm_keys(kf, r.fwd, ("x", "w"))
  signs = operand.rht_signs(keys["rht"]) if "rht" in keys else None
  lay = groups.Layout.of(seg, n, _aligns(r)[0])
  a, b = _transformed(lay.put(x32), w32, signs, 1, 1)
  # Quantized in the group-aligned layout, multiplied in the rows' own:
  # the padding rows are zeros, and nothing here mixes rows.
  xq = lay.take(quantize_rows(a, 1, qx, lay.seg, n_groups, keys.get("x"),
                              states.get("x")))
  wq = quantize_experts(b, 0, qw, keys.get("w"), states.get("w"))
  out = groups.grouped_dot(xq, wq, n)
  # What the backward GEMMs can reuse: values quantized alike (elementwise
  # quantizers, or square weight blocks), untransformed, in the rows layout.
  plain = signs is None
  plain_w = signs is None and not any(q is not None and q.transform
                                      for q in r.dgrad)
  x_kept = xq if (plain and gemm.elementwise(qx) and qx == r.wgrad[0]
                  and not any(q is not None and q.transform
                              for q in r.wgrad)) else None
  w_kept = wq if plain_w and qw is not None and (
      (gemm.elementwise(qw) and qw == r.dgrad[1])
      or gemm.shares_quantized(qw, r.dgrad[1], (0,))) else None
  res = (lhs if x_kept is None else None, x_kept,
         rhs if w_kept is None else None, w_kept, seg, n, kb, state, nxt)
  return core.to_dtype(out, static.out_dtype), res


def _core_bwd(static: _Static, res, g):
  lhs, x_kept, rhs, w_kept, seg, n, kb, state, nxt = res
  r = static.recipe
  states = state or {}
  n_groups = n.shape[0]
  kd, kw = (None, None) if kb is None else core.split_key(kb, True, True)
  g32 = operand.float32(g)
  if "dy" in states:
    nxt = dict(nxt, dy=_next_rows(g32, seg, n_groups, states["dy"]))
  _, align_d, align_w = _aligns(r)

  # dx_g = dy_g . w_g^T, contracting n.
  qd, qwd = r.dgrad
  keys = _gemm_keys(kd, r.dgrad, ("dy", "w"))
  signs = operand.rht_signs(keys["rht"]) if "rht" in keys else None
  lay = groups.Layout.of(seg, n, align_d)
  w_src = w_kept if w_kept is not None else operand.float32(rhs)
  a, b = _transformed(lay.put(g32), w_src, signs, 1, 2)
  dyq = lay.take(quantize_rows(a, 1, qd, lay.seg, n_groups, keys.get("dy"),
                               states.get("dy")))
  wq = b if w_kept is not None else quantize_experts(
      b, 1, qwd, keys.get("w"), states.get("w"))
  dx = groups.grouped_dot(dyq, wq.transpose(0, 2, 1), n)
  reuse_dy = signs is None and gemm.elementwise(qd) and qd == r.wgrad[1]

  # dw_g = x_g^T . dy_g, contracting the group's rows.
  qx, qdw = r.wgrad
  keys = _gemm_keys(kw, (qdw, qx), ("dy", "x"))
  signs = operand.rht_signs(keys["rht"]) if "rht" in keys else None
  lay = groups.Layout.of(seg, n, align_w)
  x_src = x_kept if x_kept is not None else operand.float32(lhs)
  xa, da = lay.put(x_src), lay.put(dyq if reuse_dy else g32)
  xa, da = _transformed(xa, da, signs, 0, 0)
  if x_kept is None:
    xa = quantize_rows(xa, 0, qx, lay.seg, n_groups, keys.get("x"),
                       states.get("x"))
  if not reuse_dy:
    da = quantize_rows(da, 0, qdw, lay.seg, n_groups, keys.get("dy"),
                       states.get("dy"))
  if signs is None:  # multiplied in the rows' own layout (no padding)
    dw = groups.grouped_wgrad(lay.take(xa), lay.take(da), n)
  else:  # the transform mixes a group's padding rows in: all are summed
    dw = groups.grouped_wgrad(xa, da, lay.sizes)
  return (core.to_dtype(dx, static.lhs_dtype),
          core.to_dtype(dw, static.rhs_dtype), None, None,
          None if state is None else nxt)


_core.defvjp(_core_fwd, _core_bwd)


# -- the public op ---------------------------------------------------------------

def _check_group_sizes(group_sizes: Any, n_groups: int, m: int,
                       fn: str) -> jax.Array:
  """``group_sizes`` as an int32 array of shape (G,); a concrete one also
  non-negative and summing to at most ``m``."""
  dtype = getattr(group_sizes, "dtype", None)
  if dtype is None or not np.issubdtype(np.dtype(dtype), np.integer):
    raise TypeError(f"`group_sizes` argument to `{fn}` must be an integer "
                    f"array, got {type(group_sizes).__name__}"
                    f"{'' if dtype is None else ' of dtype ' + str(dtype)}")
  shape = tuple(group_sizes.shape)
  if shape != (n_groups,):
    raise ValueError(f"`group_sizes` argument to `{fn}` must have shape "
                     f"({n_groups},), one size per expert of `rhs`, got "
                     f"{shape}")
  if not isinstance(group_sizes, compat.Tracer):
    v = np.asarray(group_sizes).astype(np.int64)
    if (v < 0).any():
      raise ValueError(f"`group_sizes` argument to `{fn}` must be "
                       f"non-negative, got {v.tolist()}")
    if v.sum() > m:
      raise ValueError(f"`group_sizes` argument to `{fn}` sums to "
                       f"{int(v.sum())}, past the {m} rows of `lhs`")
  return jnp.asarray(group_sizes).astype(jnp.int32)


def ragged_dot(lhs: Any, rhs: Any, group_sizes: Any, precision: Any = None,
               preferred_element_type: Any = None, group_offset: Any = None,
               *, recipe: Any = "fp8_current", key: Any = None,
               state: Any = None) -> jax.Array:
  """``lax.ragged_dot`` whose training-step GEMMs a recipe quantizes.

  Rows of ``lhs`` grouped by expert (``group_sizes[g]`` rows of group
  ``g``, in order) multiply their expert's weight ``rhs[g]``. The forward,
  input-gradient and weight-gradient grouped GEMMs each quantize their two
  operands as ``recipe`` says, every expert's operands as tensors of
  their own: group ``g``'s three GEMMs are the dense
  :func:`~jaxfp8.recipes.dot_general`'s of its rows and ``rhs[g]`` (blocks
  along the tokens restart at each group's first row; see the module
  docstring for the layout and for stochastic rounding's bits).

  Args:
    lhs: ``(m, k)`` real array, tokens sorted by group.
    rhs: ``(G, k, n)`` real array, one weight per expert.
    group_sizes: ``(G,)`` integer array. Concrete sizes must be
      non-negative and sum to at most ``m``. Traced ones (under ``jit``)
      can't be checked: rows are assigned by the running sums as
      ``lax.ragged_dot`` assigns them (a row belongs to the number of
      running sums at or below its index), and rows past the last running
      sum belong to no group (zero output, zero gradient).
    precision: ignored (products are exact; accumulation is float32).
    preferred_element_type: the result dtype (default as
      :func:`~jaxfp8.recipes.dot_general`).
    group_offset: must be None (``lax.ragged_dot`` doesn't implement it).
    recipe: as for :func:`~jaxfp8.recipes.dot_general`.
    key: a jax.random key where the recipe needs one (stochastic rounding,
      Hadamard signs), split as the dense core splits it.
    state: a delayed recipe's state with one DelayedScaling per expert:
      ``init_state(recipe, experts=G)``; its gradient is the next state.

  Returns:
    ``(m, n)``: row ``r`` of group ``g`` is ``lhs[r] . rhs[g]`` of the
    quantized operands, exact products accumulated in float32.

  Raises:
    TypeError: non-array operands, non-integer ``group_sizes``, a bad key
      or state type.
    ValueError: ``lhs`` not 2-D, ``rhs`` not 3-D, contracting lengths that
      differ, ``group_sizes`` of the wrong shape, negative or summing past
      ``m``, a recipe with a Hadamard transform in a GEMM whose contracting
      length is not a multiple of 16, a missing key or state.
    NotImplementedError: a ``group_offset``.

  >>> import jax.numpy as jnp
  >>> x = jnp.ones((6, 32))
  >>> w = jnp.stack([jnp.full((32, 4), 0.5), jnp.full((32, 4), 0.25)])
  >>> ragged_dot(x, w, jnp.array([2, 4]), recipe="mxfp8")[:, 0]
  Array([16., 16.,  8.,  8.,  8.,  8.], dtype=float32)
  """
  del precision
  fn = "ragged_dot"
  recipe = registry.get_recipe(recipe)
  if group_offset is not None:
    raise NotImplementedError(f"`group_offset` argument to `{fn}` must be "
                              f"None (lax.ragged_dot doesn't implement it)")
  if preferred_element_type is not None:
    preferred_element_type = formats.result_dtype(preferred_element_type,
                                                  fn=fn)
  lhs = core.check_operand(lhs, "lhs", fn)
  rhs = core.check_operand(rhs, "rhs", fn)
  if lhs.ndim != 2 or rhs.ndim != 3:
    raise ValueError(f"`{fn}` takes lhs (m, k) and rhs (G, k, n), got "
                     f"shapes {lhs.shape} and {rhs.shape}")
  if rhs.shape[0] < 1:
    raise ValueError(f"`rhs` argument to `{fn}` must hold at least one "
                     f"expert, got shape {rhs.shape}")
  if lhs.shape[1] != rhs.shape[1]:
    raise ValueError(f"`{fn}`: lhs {lhs.shape} and rhs {rhs.shape} contract "
                     f"lengths {lhs.shape[1]} and {rhs.shape[1]}, which "
                     f"must be equal")
  group_sizes = _check_group_sizes(group_sizes, rhs.shape[0], lhs.shape[0],
                                   fn)
  for g, k in (("fwd", lhs.shape[1]), ("dgrad", rhs.shape[2])):
    if k % operand.RHT_SIZE and any(
        q is not None and q.transform for q in getattr(recipe, g)):
      raise ValueError(
          f"`{fn}`: recipe {recipe.name!r} applies a random Hadamard "
          f"transform in the {g} GEMM, whose contracting length must be a "
          f"multiple of {operand.RHT_SIZE}, got {k}")
  out_dtype = (core.default_out_dtype(lhs.dtype, rhs.dtype)
               if preferred_element_type is None else preferred_element_type)
  if recipe.needs_key:
    if key is None:
      raise ValueError(f"`{fn}` with recipe {recipe.name!r} needs a `key` "
                       f"argument (a jax.random key) for "
                       f"{core.key_users(recipe)}")
    key = validate.check_single_key(key, fn)
  else:
    key = None
  # A delayed recipe's state is per expert: leaves with a leading G.
  state = check_state(state, recipe, fn=fn, experts=rhs.shape[0])
  static = _Static(recipe, np.dtype(out_dtype), np.dtype(lhs.dtype),
                   np.dtype(rhs.dtype))
  return _core(lhs, rhs, group_sizes, key, state, static)
