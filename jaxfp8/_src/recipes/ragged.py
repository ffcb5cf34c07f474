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
in one pass over all groups (per-tensor scales and NVFP4's tensor amax
taken per group, by segment, and gathered to each group's rows or tiles:
``groups.quantize_rows``).
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
import numpy as np

from jaxfp8._src import compat
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

# -- the two grouped products -------------------------------------------------

def rows_by_experts(x, w, seg, n, align: int, qx: Optional[Quantizer],
                    qw: Optional[Quantizer], keys: tuple, states: tuple,
                    signs, *, w_axis: int):
  """``x_g . w_g`` for each group: token operand ``x (m, c)`` quantized by
  ``qx`` along ``c``, group by group in the layout aligned to ``align``;
  expert operand ``w`` (G, c, f) (``w_axis`` 0) or (G, f, c) (1) by ``qw``
  along ``c``, expert by expert (None: as given). ``keys`` and ``states``:
  (of ``x``, of ``w``); ``signs``: a Hadamard transform along ``c``.

  Returns ``(out (m, f), x quantized in the rows' layout, w quantized)``.
  """
  n_groups = n.shape[0]
  lay = groups.Layout.of(seg, n, align)
  a, b = groups.transformed(lay.put(x), w, signs, 1, 1 + w_axis)
  # Quantized in the group-aligned layout, multiplied in the rows' own:
  # the padding rows are zeros, and nothing here mixes rows.
  xq = lay.take(groups.quantize_rows(a, 1, qx, lay.seg, n_groups, keys[0],
                                     states[0]))
  wq = groups.quantize_experts(b, w_axis, qw, keys[1], states[1])
  out = groups.grouped_dot(xq, wq if w_axis == 0 else wq.transpose(0, 2, 1),
                           n)
  return out, xq, wq


def rows_contracted(a, b, seg, n, align: int, qa: Optional[Quantizer],
                    qb: Optional[Quantizer], keys: tuple, states: tuple,
                    signs):
  """``a_g^T . b_g`` (G, p, q) for each group: token operands ``a (m, p)``
  and ``b (m, q)`` quantized by ``qa`` and ``qb`` (None: as given) along
  the group's rows, in the layout aligned to ``align``. ``keys`` and
  ``states``: (of ``a``, of ``b``); ``signs``: a Hadamard transform along
  the rows (16-row chunks of the aligned layout)."""
  n_groups = n.shape[0]
  lay = groups.Layout.of(seg, n, align)
  a, b = groups.transformed(lay.put(a), lay.put(b), signs, 0, 0)
  a = groups.quantize_rows(a, 0, qa, lay.seg, n_groups, keys[0], states[0])
  b = groups.quantize_rows(b, 0, qb, lay.seg, n_groups, keys[1], states[1])
  if signs is None:  # multiplied in the rows' own layout (no padding)
    return groups.grouped_wgrad(lay.take(a), lay.take(b), n)
  # The transform mixes a group's padding rows in: all of them are summed.
  return groups.grouped_wgrad(a, b, lay.sizes)


def token_align(pair) -> int:
  """The row alignment of a GEMM contracting the tokens: the least common
  multiple of its quantizers' blocks along them (16 with a transform)."""
  lengths = [groups.token_block(q) for q in pair]
  if groups.transforms(pair):
    lengths.append(operand.RHT_SIZE)
  return math.lcm(*lengths)


def signs_of(keys: dict):
  """The Hadamard signs of a GEMM whose keys are ``keys`` (None: none)."""
  return operand.rht_signs(keys["rht"]) if "rht" in keys else None


# -- the custom VJP ------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Static:
  """What a grouped core's custom VJP holds static."""
  recipe: Recipe
  out_dtype: Any
  lhs_dtype: Any
  rhs_dtype: Any


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _core(lhs, rhs, group_sizes, key, state, static: Static):
  return _core_fwd(lhs, rhs, group_sizes, key, state, static)[0]


def _core_fwd(lhs, rhs, group_sizes, key, state, static: Static):
  r = static.recipe
  states = state or {}
  n_groups = rhs.shape[0]
  kf, kb = core.step_keys(key, r)
  x32, w32 = operand.float32(lhs), operand.float32(rhs)
  seg = groups.segments(group_sizes, x32.shape[0])
  n = groups.counts(seg, n_groups)
  nxt = {}
  if "x" in states:
    nxt["x"] = groups.next_rows(x32, seg, n_groups, states["x"])
  if "w" in states:
    nxt["w"] = jax.vmap(operand.next_state)(w32, states["w"])
  qx, qw = r.fwd
  keys = groups.gemm_keys(kf, r.fwd, ("x", "w"))
  signs = signs_of(keys)
  out, xq, wq = rows_by_experts(
      x32, w32, seg, n, groups.row_block(qx), qx, qw,
      (keys.get("x"), keys.get("w")), (states.get("x"), states.get("w")),
      signs, w_axis=0)
  # What the backward GEMMs can reuse: values quantized alike (elementwise
  # quantizers, or square weight blocks), untransformed, in the rows layout.
  x_kept = xq if gemm.same_elementwise(qx, r.wgrad[0]) else None
  w_kept = wq if gemm.same_elementwise(qw, r.dgrad[1]) or (
      gemm.shares_quantized(qw, r.dgrad[1], (0,))) else None
  res = (lhs if x_kept is None else None, x_kept,
         rhs if w_kept is None else None, w_kept, seg, n, kb, state, nxt)
  return core.to_dtype(out, static.out_dtype), res


def _core_bwd(static: Static, res, g):
  lhs, x_kept, rhs, w_kept, seg, n, kb, state, nxt = res
  r = static.recipe
  states = state or {}
  n_groups = n.shape[0]
  kd, kw = (None, None) if kb is None else core.split_key(kb, True, True)
  g32 = operand.float32(g)
  if "dy" in states:
    nxt = dict(nxt, dy=groups.next_rows(g32, seg, n_groups, states["dy"]))

  # dx_g = dy_g . w_g^T, contracting n.
  qd, qwd = r.dgrad
  keys = groups.gemm_keys(kd, r.dgrad, ("dy", "w"))
  signs = signs_of(keys)
  dx, dyq, _ = rows_by_experts(
      g32, w_kept if w_kept is not None else operand.float32(rhs), seg, n,
      groups.row_block(qd), qd, None if w_kept is not None else qwd,
      (keys.get("dy"), keys.get("w")), (states.get("dy"), states.get("w")),
      signs, w_axis=1)
  reuse_dy = gemm.same_elementwise(qd, r.wgrad[1])

  # dw_g = x_g^T . dy_g, contracting the group's rows.
  qx, qdw = r.wgrad
  keys = groups.gemm_keys(kw, (qdw, qx), ("dy", "x"))
  dw = rows_contracted(
      x_kept if x_kept is not None else operand.float32(lhs),
      dyq if reuse_dy else g32, seg, n, token_align(r.wgrad),
      None if x_kept is not None else qx, None if reuse_dy else qdw,
      (keys.get("x"), keys.get("dy")), (states.get("x"), states.get("dy")),
      signs_of(keys))
  return (core.to_dtype(dx, static.lhs_dtype),
          core.to_dtype(dw, static.rhs_dtype), None, None,
          None if state is None else nxt)


_core.defvjp(_core_fwd, _core_bwd)


# -- the public op ---------------------------------------------------------------

def _check_group_sizes(group_sizes: Any, n_groups: Optional[int], m: int,
                       fn: str) -> jax.Array:
  """``group_sizes`` as an int32 array of shape (G,) (``n_groups``; None:
  any G); a concrete one also non-negative and summing to at most ``m``."""
  dtype = getattr(group_sizes, "dtype", None)
  if dtype is None or not np.issubdtype(np.dtype(dtype), np.integer):
    raise TypeError(f"`group_sizes` argument to `{fn}` must be an integer "
                    f"array, got {type(group_sizes).__name__}"
                    f"{'' if dtype is None else ' of dtype ' + str(dtype)}")
  shape = tuple(group_sizes.shape)
  if n_groups is None and len(shape) != 1:
    raise ValueError(f"`group_sizes` argument to `{fn}` must be 1-D, one "
                     f"size per group, got shape {shape}")
  if n_groups is not None and shape != (n_groups,):
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
  return rows_call("ragged_dot", lhs, rhs, group_sizes,
                   preferred_element_type, group_offset, recipe=recipe,
                   key=key, state=state)


def rows_call(fn: str, lhs: Any, rhs: Any, group_sizes: Any,
              preferred_element_type: Any, group_offset: Any, *,
              recipe: Any, key: Any, state: Any) -> jax.Array:
  """:func:`ragged_dot` checked and run, errors naming ``fn``."""
  lhs = core.check_operand(lhs, "lhs", fn)
  rhs = core.check_operand(rhs, "rhs", fn)
  if lhs.ndim != 2 or rhs.ndim != 3:
    raise ValueError(f"`{fn}` takes lhs (m, k) and rhs (G, k, n), got "
                     f"shapes {lhs.shape} and {rhs.shape}")
  if lhs.shape[1] != rhs.shape[1]:
    raise ValueError(f"`{fn}`: lhs {lhs.shape} and rhs {rhs.shape} contract "
                     f"lengths {lhs.shape[1]} and {rhs.shape[1]}, which "
                     f"must be equal")
  recipe, group_sizes, key, state, static = check_call(
      fn, lhs, rhs, group_sizes, n_groups=rhs.shape[0], m=lhs.shape[0],
      preferred_element_type=preferred_element_type,
      group_offset=group_offset, recipe=recipe, key=key, state=state,
      lengths={"fwd": lhs.shape[1], "dgrad": rhs.shape[2]})
  return _core(lhs, rhs, group_sizes, key, state, static)


def check_call(fn: str, lhs: jax.Array, rhs: jax.Array, group_sizes: Any, *,
               n_groups: Optional[int], m: int, preferred_element_type: Any,
               group_offset: Any, recipe: Any, key: Any, state: Any,
               lengths: dict):
  """The checks a grouped GEMM's arguments share, after its operands'
  shapes: ``(recipe, group_sizes, key, state, Static)``. ``n_groups``: the
  experts of ``rhs`` (None: as many as ``group_sizes`` holds); ``m``: the
  tokens; ``lengths``: the contracting length of each GEMM that contracts
  no tokens (a Hadamard transform there needs a multiple of 16)."""
  recipe = registry.get_recipe(recipe)
  if group_offset is not None:
    raise NotImplementedError(f"`group_offset` argument to `{fn}` must be "
                              f"None (lax.ragged_dot doesn't implement it)")
  if preferred_element_type is not None:
    preferred_element_type = formats.result_dtype(preferred_element_type,
                                                  fn=fn)
  group_sizes = _check_group_sizes(group_sizes, n_groups, m, fn)
  n_groups = group_sizes.shape[0]
  if n_groups < 1:
    raise ValueError(f"`{fn}` needs at least one group (expert), got "
                     f"{n_groups}")
  for g, k in lengths.items():
    if k % operand.RHT_SIZE and groups.transforms(getattr(recipe, g)):
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
  state = check_state(state, recipe, fn=fn, experts=n_groups)
  static = Static(recipe, np.dtype(out_dtype), np.dtype(lhs.dtype),
                  np.dtype(rhs.dtype))
  return recipe, group_sizes, key, state, static
