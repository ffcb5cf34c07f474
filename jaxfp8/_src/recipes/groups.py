"""Groups of rows for the grouped GEMMs of :mod:`jaxfp8._src.recipes.ragged`.

Rows are assigned to groups as ``lax.ragged_dot`` assigns them
(:func:`segments`); a :class:`Layout` lays a group's rows out aligned to its
blocks along the tokens; :func:`quantize_rows` quantizes each group's rows
and :func:`quantize_experts` each expert as a tensor of its own;
:func:`grouped_dot` and :func:`grouped_wgrad` are lax's ragged products in
float32 at HIGHEST, batchable whichever operands ``vmap`` batches.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.fp8 import scaling
from jaxfp8._src.mx.formats import get_format as get_mx_format
from jaxfp8._src.recipes import operand
from jaxfp8._src.recipes.spec import Quantizer

_HIGHEST = lax.Precision.HIGHEST
# lax's own functions, held from import: the linen face points the name
# jax.lax.ragged_dot at the recipe op while a matching module runs.
LAX_RAGGED_DOT = lax.ragged_dot
_LAX_RAGGED_DOT_GENERAL = lax.ragged_dot_general
# The weight gradient's form of lax.ragged_dot_general: lhs (rows, k) and
# rhs (rows, n) contract their ragged rows; the result is (G, k, n).
_WGRAD_DIMS = lax.RaggedDotDimensionNumbers(
    dot_dimension_numbers=(((0,), (0,)), ((), ())),
    lhs_ragged_dimensions=[0], rhs_group_dimensions=[])


# -- groups and layouts ----------------------------------------------------------

def segments(group_sizes: jax.Array, m: int) -> jax.Array:
  """Each row's group, int32 (m,): ``G`` for rows past the total (the
  assignment of ``lax.ragged_dot``)."""
  ends = jnp.cumsum(group_sizes.astype(jnp.int32))
  rows = lax.iota(jnp.int32, m)
  return jnp.sum(rows[:, None] >= ends[None, :], axis=1, dtype=jnp.int32)


def counts(seg: jax.Array, n_groups: int) -> jax.Array:
  """Rows per group, int32 (G,), from :func:`segments`."""
  return jnp.sum(seg[None, :] == lax.iota(jnp.int32, n_groups)[:, None],
                 axis=1, dtype=jnp.int32)


def token_block(q: Optional[Quantizer]) -> int:
  """The length along the tokens of ``q``'s blocks when the tokens are the
  contracting axis (1: no block runs along them)."""
  if q is None or q.kind in ("cast", "tensor"):
    return 1
  if q.kind == "mx":
    return q.block_size or get_mx_format(q.format).block_size
  return q.block[-1]


def row_block(q: Optional[Quantizer]) -> int:
  """The length along the rows of ``q``'s blocks when the rows are free
  (2-D blocks span rows; 1: none)."""
  if q is None or q.kind not in ("block", "nvfp4"):
    return 1
  return q.block[0]


@dataclasses.dataclass(frozen=True)
class Layout:
  """Rows of an (m, ...) operand laid out group-aligned to ``align`` (see
  the module docstring); ``align`` 1 is the operand's own layout."""
  seg: jax.Array      # (rows,) each row's group, G for none
  sizes: jax.Array    # (G,) rows per group in this layout
  dest: Any           # (m,) each source row's row here (None: the same)
  rows: int

  @classmethod
  def of(cls, seg: jax.Array, n: jax.Array, align: int) -> "Layout":
    m, g = seg.shape[0], n.shape[0]
    if align == 1:
      return cls(seg, n, None, m)
    rows = -(-(m + g * (align - 1)) // align) * align
    padded = -(-n // align) * align
    starts = jnp.cumsum(n) - n
    aligned_starts = jnp.cumsum(padded) - padded
    src = jnp.minimum(seg, g - 1)
    dest = jnp.where(seg < g, aligned_starts[src] + lax.iota(jnp.int32, m)
                     - starts[src], rows)
    return cls(segments(padded, rows), padded, dest, rows)

  def put(self, x: jax.Array) -> jax.Array:
    """``x`` (m, ...) in this layout (padding rows zero)."""
    if self.dest is None:
      return x
    return jnp.zeros((self.rows,) + x.shape[1:], x.dtype).at[self.dest].set(
        x, mode="drop")

  def take(self, y: jax.Array) -> jax.Array:
    """Rows of ``y`` (this layout) back in the source layout (rows past the
    total zero)."""
    if self.dest is None:
      return y
    return jnp.take(y, self.dest, axis=0, mode="fill", fill_value=0)


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


def group_amaxes(x32: jax.Array, seg: jax.Array, n_groups: int) -> jax.Array:
  """Each group's largest magnitude (G,) float32 as ``scaling.amax`` takes
  it (over the magnitudes' bits: subnormals count, NaN wins), 0 for an
  empty group; rows of no group are left out."""
  if x32.size == 0:
    return jnp.zeros((n_groups,), jnp.float32)
  mag = lax.bitcast_convert_type(x32, jnp.int32) & np.int32(0x7FFFFFFF)
  top = jax.ops.segment_max(jnp.max(mag, axis=1), seg,
                            num_segments=n_groups + 1)[:n_groups]
  top = jnp.maximum(top, 0)  # an empty segment's max is int32's min
  return jnp.where(top > np.int32(0x7F800000), np.float32(np.nan),
                   lax.bitcast_convert_type(top, jnp.float32))


def quantize_rows(x: jax.Array, axis: int, q: Optional[Quantizer],
                  seg: jax.Array, n_groups: int, key=None,
                  state=None) -> jax.Array:
  """float32 values of ``x`` (rows, c), each group's rows (``seg``)
  quantized by ``q`` along ``axis`` as a tensor of its own (``state``:
  per-expert leaves); rows of no group as anything.

  One pass over ``x``: a per-tensor quantizer divides each row by its
  group's scale (the bits of one scalar scale: XLA on CPU divides by
  either broadcast as a product by its reciprocal; tests/recipes/
  test_ragged.py checks them), NVFP4 takes each group's tensor amax per
  tile (the layout keeps every tile within a group)."""
  if q is None:
    return x
  if not _tensor_level(q):
    return _quantize(x, axis, q, key, None)
  if q.kind == "nvfp4" and q.scale == "te":
    return operand.quantize_along(x, axis, q, key, (seg, n_groups))
  if q.kind == "tensor" and x.size:
    if q.delayed:
      fmt, scales = state.format, state.scale
    else:
      sc = operand.scaler(q)
      fmt = sc.format
      scales = jax.vmap(lambda a: scaling.compute_scale(
          a, sc.format, margin=sc.margin, power_of_two=sc.power_of_two))(
              group_amaxes(x, seg, n_groups))
    rows = scales[jnp.minimum(seg, n_groups - 1)][:, None]
    return scaling.dequantize(scaling.quantize(x, fmt, rows), rows)

  # The others (NVFP4's "pow2" rule, no rows): a pass per group, the other
  # groups' rows masked to zero.
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
  one = lambda a: _quantize(a[0], axis, q, a[1], a[2])
  if q.kind in ("cast", "tensor"):  # no branches: vmap (1.8x a loop's speed)
    return jax.vmap(one)((w, keys, state))
  # Block quantizers hold lax.conds between plain float32 steps and their
  # exact forms, which vmap would turn into selects running both: a loop
  # over the experts (NVFP4 weights, 8 x 512 x 512: 7.6x faster).
  return lax.map(one, (w, keys, state))


def next_rows(x32, seg, n_groups, state):
  """Per-expert delayed states after recording each group's amax."""
  return jax.vmap(lambda s, a: s.update(a))(
      state, group_amaxes(x32, seg, n_groups))


def _keys(key, users: list) -> dict:
  """``{user: key}``: the key to its one user, or split among them in
  order (the dense core's rule)."""
  if not users:
    return {}
  if len(users) == 1:
    return {users[0]: key}
  return dict(zip(users, jax.random.split(key, len(users))))


def transforms(pair) -> bool:
  """Whether a GEMM of quantizers ``pair`` applies a Hadamard transform."""
  return any(q is not None and q.transform for q in pair)


def gemm_keys(key, pair, roles) -> dict:
  """Keys of one GEMM's consumers: (Hadamard signs, first operand, second
  operand), each where it needs one."""
  if key is None:
    return {}
  users = (["rht"] if transforms(pair) else []) + [
      role for q, role in zip(pair, roles) if q is not None and q.stochastic]
  return _keys(key, users)


def transformed(a, b, signs, axis_a, axis_b):
  """Both operands of a GEMM by its Hadamard transform (None: as given)."""
  if signs is None:
    return a, b
  return operand.rht(a, signs, axis_a), operand.rht(b, signs, axis_b)


# -- the grouped products ----------------------------------------------------------

def _batched(fn):
  """``fn`` of (lhs, rhs, sizes) that ``vmap`` takes with any of them
  unbatched: lax's ragged products batch only when all three are (their
  rule raises NotImplementedError otherwise, JAX 0.10-0.12), as in the
  backward pass of a vmapped step, whose cotangent may be unbatched."""
  @jax.custom_batching.custom_vmap
  def call(a, b, sizes):
    return fn(a, b, sizes)

  @call.def_vmap
  def _rule(axis_size, in_batched, a, b, sizes):
    full = [v if bt else jnp.broadcast_to(v, (axis_size,) + v.shape)
            for v, bt in zip((a, b, sizes), in_batched)]
    return jax.vmap(fn)(*full), True

  return call


@_batched
def grouped_dot(a: jax.Array, b: jax.Array, sizes: jax.Array) -> jax.Array:
  """``a (rows, k) . b[g] (k, n)`` for the rows of group ``g``, float32
  at HIGHEST (rows past the groups zero)."""
  return LAX_RAGGED_DOT(a, b, sizes, precision=_HIGHEST,
                        preferred_element_type=jnp.float32)


@_batched
def grouped_wgrad(a: jax.Array, b: jax.Array, sizes: jax.Array) -> jax.Array:
  """``a_g^T . b_g`` (G, k, n) over each group's rows of ``a (rows, k)``
  and ``b (rows, n)``, float32 at HIGHEST."""
  return _LAX_RAGGED_DOT_GENERAL(a, b, sizes, _WGRAD_DIMS,
                                 precision=_HIGHEST,
                                 preferred_element_type=jnp.float32)
