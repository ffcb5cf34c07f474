"""``ragged_dot_general`` under a recipe: the grouped GEMM forms JAX differentiates.

``lax.ragged_dot`` differentiates into two forms of
``lax.ragged_dot_general`` (2-D token operands, no batch dimensions):

* **ragged rows**: ``lhs``'s ragged dimension is free and ``rhs`` has a
  group dimension: rows of group ``g`` multiply ``rhs[g]`` (the forward
  and input-gradient form). :func:`ragged_dot_general` transposes the
  operands to ``lhs (m, k)``, ``rhs (G, k, n)`` and runs
  :func:`~jaxfp8._src.recipes.ragged.ragged_dot`.
* **ragged contraction**: the ragged dimension is the one both operands
  contract and ``rhs`` has no group dimension: the result's ``[g]`` is
  ``lhs_g^T . rhs_g`` over group ``g``'s rows (the weight-gradient form),
  ``(G, k, n)``. As a layer of its own it has a training step of its own,
  run here (a ``custom_vjp``), each group's three GEMMs those of the dense
  :func:`~jaxfp8._src.recipes.core.dot_general` of ``lhs_g`` and
  ``rhs_g`` contracting their rows:

  - forward ``out_g = lhs_g^T . rhs_g``: ``lhs`` quantized by
    ``recipe.fwd[0]``, ``rhs`` by ``recipe.fwd[1]``, both along the
    group's rows (blocks restart at each group's first row, as in the
    weight gradient of :func:`~jaxfp8._src.recipes.ragged.ragged_dot`);
  - input gradients ``dlhs_g = rhs_g . dout_g^T`` (``recipe.dgrad``:
    ``dout`` first, ``rhs`` second, both along ``n``) and
    ``drhs_g = lhs_g . dout_g`` (``recipe.wgrad``: ``dout`` along ``k``,
    ``lhs`` along ``k``): token operands per group, ``dout_g`` per group
    as a tensor of its own (stochastic rounding of ``dout_g`` reads the
    words of ``split(key, G)[g]``, the per-expert rule).

Delayed state is per group (``init_state(recipe, experts=G)``): ``"x"``
records ``lhs_g``, ``"w"`` ``rhs_g``, ``"dy"`` ``dout_g``. Keys split as
the dense core's.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
from jax import lax

from jaxfp8._src.recipes import core
from jaxfp8._src.recipes import gemm
from jaxfp8._src.recipes import groups
from jaxfp8._src.recipes import operand
from jaxfp8._src.recipes import ragged


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _contracted(lhs, rhs, group_sizes, key, state, static: ragged.Static):
  return _contracted_fwd(lhs, rhs, group_sizes, key, state, static)[0]


def _contracted_fwd(lhs, rhs, group_sizes, key, state,
                    static: ragged.Static):
  r = static.recipe
  states = state or {}
  n_groups = group_sizes.shape[0]
  kf, kb = core.step_keys(key, r)
  a32, b32 = operand.float32(lhs), operand.float32(rhs)
  seg = groups.segments(group_sizes, a32.shape[0])
  n = groups.counts(seg, n_groups)
  nxt = {role: groups.next_rows(v, seg, n_groups, states[role])
         for role, v in (("x", a32), ("w", b32)) if role in states}
  keys = groups.gemm_keys(kf, r.fwd, ("x", "w"))
  out = ragged.rows_contracted(
      a32, b32, seg, n, ragged.token_align(r.fwd), *r.fwd,
      (keys.get("x"), keys.get("w")), (states.get("x"), states.get("w")),
      ragged.signs_of(keys))
  return (core.to_dtype(out, static.out_dtype),
          (lhs, rhs, seg, n, kb, state, nxt))


def _contracted_bwd(static: ragged.Static, res, g):
  lhs, rhs, seg, n, kb, state, nxt = res
  r = static.recipe
  states = state or {}
  kd, kw = (None, None) if kb is None else core.split_key(kb, True, True)
  g32 = operand.float32(g)
  if "dy" in states:
    nxt = dict(nxt, dy=jax.vmap(operand.next_state)(g32, states["dy"]))
  # dlhs_g = rhs_g . dout_g^T, contracting n: dout_g (k, n) is the expert.
  qd, qr = r.dgrad
  keys = groups.gemm_keys(kd, r.dgrad, ("dy", "w"))
  signs = ragged.signs_of(keys)
  dlhs, _, dq = ragged.rows_by_experts(
      operand.float32(rhs), g32, seg, n, groups.row_block(qr), qr, qd,
      (keys.get("w"), keys.get("dy")), (states.get("w"), states.get("dy")),
      signs, w_axis=1)
  # drhs_g = lhs_g . dout_g, contracting k. An elementwise quantizer of
  # dout, the same in both GEMMs, gives the same values: quantized once.
  ql, qdw = r.wgrad
  reuse = gemm.same_elementwise(qd, qdw)
  keys = groups.gemm_keys(kw, (qdw, ql), ("dy", "x"))
  drhs = ragged.rows_by_experts(
      operand.float32(lhs), dq if reuse else g32, seg, n,
      groups.row_block(ql), ql, None if reuse else qdw,
      (keys.get("x"), keys.get("dy")), (states.get("x"), states.get("dy")),
      ragged.signs_of(keys), w_axis=0)[0]
  return (core.to_dtype(dlhs, static.lhs_dtype),
          core.to_dtype(drhs, static.rhs_dtype), None, None,
          None if state is None else nxt)


_contracted.defvjp(_contracted_fwd, _contracted_bwd)


def _dims(dims: Any, lhs_ndim: int, rhs_ndim: int, fn: str):
  """``(lhs contracting, rhs contracting, lhs ragged, rhs group)`` axes of
  a supported ``RaggedDotDimensionNumbers``; else a clear error."""
  if not isinstance(dims, lax.RaggedDotDimensionNumbers):
    raise TypeError(f"`ragged_dot_dimension_numbers` argument to `{fn}` "
                    f"must be a jax.lax.RaggedDotDimensionNumbers, got "
                    f"{type(dims).__name__}")
  try:
    (lc, rc), (lb, rb) = dims.dot_dimension_numbers
    lr, rg = list(dims.lhs_ragged_dimensions), list(dims.rhs_group_dimensions)
    lc, rc, lb, rb = (list(map(int, t)) for t in (lc, rc, lb, rb))
  except (TypeError, ValueError):
    raise ValueError(f"`ragged_dot_dimension_numbers` argument to `{fn}`: "
                     f"malformed dimension numbers {dims}") from None
  if lb or rb:
    raise NotImplementedError(
        f"`{fn}` takes no batch dimensions (got {lb} and {rb}): map over "
        f"them with jax.vmap")
  if lhs_ndim != 2 or len(lc) != 1 or len(rc) != 1 or len(lr) != 1:
    raise ValueError(
        f"`{fn}` takes a 2-D lhs with one contracting and one ragged "
        f"dimension, got lhs of rank {lhs_ndim}, contracting {lc} and "
        f"{rc}, ragged {lr}")
  want_rhs = 3 if rg else 2
  if len(rg) > 1 or rhs_ndim != want_rhs:
    raise ValueError(
        f"`{fn}` takes rhs (G, k, n) with one group dimension, or rhs "
        f"(m, n) with none, got rhs of rank {rhs_ndim} and group "
        f"dimensions {rg}")
  axes = (lc[0], rc[0], lr[0], rg[0] if rg else None)
  if (not 0 <= axes[0] < 2 or not 0 <= axes[1] < rhs_ndim
      or not 0 <= axes[2] < 2
      or (rg and (not 0 <= axes[3] < 3 or axes[3] == axes[1]))):
    raise ValueError(f"`ragged_dot_dimension_numbers` argument to `{fn}`: "
                     f"dimensions out of range or repeated in {dims}")
  if rg and axes[2] == axes[0]:
    raise ValueError(f"`{fn}`: with a group dimension in rhs the ragged "
                     f"dimension of lhs must be free, got it contracted")
  if not rg and axes[2] != axes[0]:
    raise ValueError(f"`{fn}`: with no group dimension in rhs the ragged "
                     f"dimension of lhs must be its contracting one, got "
                     f"{axes[2]} (contracting {axes[0]})")
  return axes


def ragged_dot_general(lhs: Any, rhs: Any, group_sizes: Any,
                       ragged_dot_dimension_numbers: Any,
                       precision: Any = None,
                       preferred_element_type: Any = None,
                       group_offset: Any = None, *,
                       recipe: Any = "fp8_current", key: Any = None,
                       state: Any = None) -> jax.Array:
  """``lax.ragged_dot_general`` whose training-step GEMMs a recipe quantizes.

  The two forms ``lax.ragged_dot`` differentiates into (module docstring),
  on a 2-D ``lhs`` without batch dimensions:

  * ragged rows (``rhs`` has a group dimension): the result is
    :func:`~jaxfp8.recipes.ragged_dot`'s of the transposed operands,
    ``(m, n)``;
  * ragged contraction (``rhs`` 2-D, the ragged dimension contracted):
    ``(G, k, n)``, group ``g``'s slice the product of its own rows, each
    of the three GEMMs quantized as the dense rule of those rows says.

  Args:
    lhs: 2-D real array, tokens sorted by group along its ragged dimension.
    rhs: ``(.., .., ..)`` with one group dimension, or 2-D with the tokens
      along its contracting dimension.
    group_sizes: ``(G,)`` integer array, checked as in
      :func:`~jaxfp8.recipes.ragged_dot` (traced sizes follow
      ``lax.ragged_dot_general``'s running sums; rows past them belong to
      no group).
    ragged_dot_dimension_numbers: a ``jax.lax.RaggedDotDimensionNumbers``.
    precision: ignored (products are exact; accumulation is float32).
    preferred_element_type: the result dtype.
    group_offset: must be None.
    recipe, key, state: as for :func:`~jaxfp8.recipes.ragged_dot` (state:
      ``init_state(recipe, experts=G)``).

  Returns:
    What ``lax.ragged_dot_general`` returns, of the quantized operands.

  Raises:
    TypeError: non-array operands or sizes, dimension numbers of another
      type, a bad key or state.
    ValueError: shapes or dimension numbers of neither form, lengths that
      differ, bad ``group_sizes``, a Hadamard transform over a length not
      a multiple of 16, a missing key or state.
    NotImplementedError: batch dimensions, a ``group_offset``.

  >>> import jax, jax.numpy as jnp
  >>> dims = jax.lax.RaggedDotDimensionNumbers(
  ...     dot_dimension_numbers=(((0,), (0,)), ((), ())),
  ...     lhs_ragged_dimensions=[0], rhs_group_dimensions=[])
  >>> x, dy = jnp.ones((6, 32)), jnp.full((6, 4), 0.5)
  >>> ragged_dot_general(x, dy, jnp.array([2, 4]), dims,
  ...                    recipe="mxfp8")[:, 0, 0]
  Array([1., 2.], dtype=float32)
  """
  del precision
  fn = "ragged_dot_general"
  lhs = core.check_operand(lhs, "lhs", fn)
  rhs = core.check_operand(rhs, "rhs", fn)
  lc, rc, lr, rg = _dims(ragged_dot_dimension_numbers, lhs.ndim, rhs.ndim,
                         fn)
  if lhs.shape[lc] != rhs.shape[rc]:
    raise ValueError(f"`{fn}`: lhs {lhs.shape} and rhs {rhs.shape} contract "
                     f"lengths {lhs.shape[lc]} and {rhs.shape[rc]}, which "
                     f"must be equal")
  if rg is not None:  # ragged rows: ragged_dot of (m, k) and (G, k, n)
    rn = 3 - rg - rc
    return ragged.rows_call(
        fn, lhs if lc == 1 else lhs.T, rhs.transpose(rg, rc, rn),
        group_sizes, preferred_element_type, group_offset, recipe=recipe,
        key=key, state=state)
  a = lhs if lc == 0 else lhs.T
  b = rhs if rc == 0 else rhs.T
  _, group_sizes, key, state, static = ragged.check_call(
      fn, a, b, group_sizes, n_groups=None, m=a.shape[0],
      preferred_element_type=preferred_element_type,
      group_offset=group_offset, recipe=recipe, key=key, state=state,
      lengths={"dgrad": b.shape[1], "wgrad": a.shape[1]})
  return _contracted(a, b, group_sizes, key, state, static)
