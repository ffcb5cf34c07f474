"""Views of an :class:`~jaxfp8._src.mx.array.MXArray`: transpose, reshape, indexing.

Each works on the storage directly (no dequantize): the packed elements and
the scale codes have the logical shape's rank, packed or divided by the block
only along the blocked axis, so permuting axes, regrouping the axes before or
after the blocked one, and indexing unblocked axes apply to both arrays
alike; the blocked axis can only be cut at block boundaries. The
straight-through source (a traced float32 array of the logical shape, see
:func:`jaxfp8._src.mx.array.quantize`) takes the same view.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from jaxfp8._src.mx import pack as mx_pack


def _scalar_tensor_scale(a, fn: str) -> None:
  ts = a.tensor_scale
  if ts is not None and np.ndim(ts) > 0:
    raise NotImplementedError(
        f"`{fn}` of an nvfp4 MXArray with per-batch tensor scales (made under "
        f"vmap, shape {np.shape(ts)}) is not supported; index the batch first")


def _view_source(a, fn):
  src = a.source
  return None if src is None else fn(src)


def transpose(a: Any, axes: tuple[Any, ...]) -> Any:
  """``a`` with its axes permuted (reversed for empty ``axes``).

  Args:
    a: the MXArray.
    axes: a permutation of ``range(a.ndim)``, as separate ints or one
      sequence (``a.transpose(1, 0)`` or ``a.transpose((1, 0))``).

  Returns:
    An MXArray whose blocked axis is where the permutation puts it.

  Raises:
    ValueError: for a bad permutation.
  """
  if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
    axes = tuple(axes[0])
  nd = a.ndim
  perm = tuple(range(nd))[::-1] if not axes else tuple(axes)
  if (any(isinstance(p, bool) or not isinstance(p, (int, np.integer))
          for p in perm) or sorted(p % nd for p in perm) != list(range(nd))
      or any(not -nd <= p < nd for p in perm)):
    raise ValueError(f"`axes` argument to `MXArray.transpose` must be a "
                     f"permutation of the {nd} axes, got {axes!r}")
  perm = tuple(int(p) % nd for p in perm)
  if perm[:np.ndim(a.tensor_scale)] != tuple(range(np.ndim(a.tensor_scale))):
    _scalar_tensor_scale(a, "MXArray.transpose")
  new_axis = perm.index(a.axis % nd) - nd
  return a.with_storage(
      a.data.transpose(perm), a.scales.transpose(perm), a.tensor_scale,
      axis=new_axis, length=a.length,
      source=_view_source(a, lambda s: s.transpose(perm)))


def reshape(a: Any, shape: tuple[Any, ...]) -> Any:
  """``a`` reshaped; the blocked axis stays whole, the others regroup.

  The new shape must keep an axis of the blocked axis' length with the
  product of the axes before it and after it unchanged (axes never move
  across the blocked one: that would change which elements share a block).
  One ``-1`` is allowed.

  Raises:
    ValueError: for a shape that moves elements across the blocked axis.
  """
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
    shape = tuple(shape[0])
  shape = tuple(int(d) for d in shape)
  _scalar_tensor_scale(a, "MXArray.reshape")
  old = a.shape
  ax = a.axis % a.ndim
  pre, post = math.prod(old[:ax]), math.prod(old[ax + 1:])
  if shape.count(-1) > 1:
    raise ValueError(f"`shape` argument to `MXArray.reshape` may hold one -1, "
                     f"got {shape}")
  if -1 in shape:
    known = math.prod(d for d in shape if d != -1)
    shape = tuple(a.size // known if d == -1 and known else d for d in shape)
  for j, d in enumerate(shape):
    if (d == a.length and math.prod(shape[:j]) == pre
        and math.prod(shape[j + 1:]) == post):
      break
  else:
    raise ValueError(
        f"`shape` argument to `MXArray.reshape` must keep the blocked axis "
        f"(length {a.length}) whole, with {pre} elements before it and {post} "
        f"after it, got {shape} for an MXArray of shape {old}")

  def cut(x):
    return x.reshape(shape[:j] + (x.shape[ax],) + shape[j + 1:])

  return a.with_storage(cut(a.data), cut(a.scales), a.tensor_scale,
                        axis=j - len(shape), length=a.length,
                        source=_view_source(a, lambda s: s.reshape(shape)))


def _expand(index: Any, ndim: int) -> list[Any]:
  index = index if isinstance(index, tuple) else (index,)
  if sum(i is Ellipsis for i in index) > 1:
    raise IndexError("an MXArray index can hold one Ellipsis")
  for i in index:
    if not (i is Ellipsis or isinstance(i, slice) or (
        isinstance(i, (int, np.integer)) and not isinstance(i, bool))):
      raise IndexError(f"MXArray indices are ints, slices and Ellipsis, got "
                       f"{i!r} (use a.dequantize()[...] for other indexing)")
  if Ellipsis in index:
    k = index.index(Ellipsis)
    fill = ndim - (len(index) - 1)
    index = index[:k] + (slice(None),) * fill + index[k + 1:]
  if len(index) > ndim:
    raise IndexError(f"too many indices for an MXArray of rank {ndim}")
  return list(index) + [slice(None)] * (ndim - len(index))


def getitem(a: Any, index: Any) -> Any:
  """``a[index]``: ints and slices of unblocked axes; block-aligned slices.

  On the blocked axis only a step-1 slice whose start is a multiple of the
  block size and whose stop is one too (or the end) is allowed: blocks are
  cut whole, so scales and packed bytes are sliced, not recomputed.

  Raises:
    IndexError: for an int, a step or a cut inside a block on the blocked
      axis, or an unsupported index (arrays, None).
  """
  nd, ax = a.ndim, a.axis % a.ndim
  idx = _expand(index, nd)
  shape = a.shape
  for i, (k, n) in enumerate(zip(idx, shape)):
    if not isinstance(k, slice) and i != ax:
      if not -n <= k < n:  # jnp would clamp: iteration would never end
        raise IndexError(f"index {k} is out of bounds for axis {i} of an "
                         f"MXArray of shape {shape}")
      idx[i] = int(k) % n
  b = idx[ax]
  if not isinstance(b, slice):
    raise IndexError(
        f"an MXArray can't take an int index on its blocked axis ({a.axis}): "
        f"that would split a block; slice it, or index a.dequantize()")
  start, stop, step = b.indices(a.length)
  bs = a.block_size
  if (step != 1 or start % bs or (stop % bs and stop != a.length)
      or stop <= start):
    raise IndexError(
        f"the blocked axis of an MXArray can only be sliced at block "
        f"boundaries (multiples of {bs}, or its end {a.length}) with step 1, "
        f"non-empty; got {b}")
  nb0, nb1 = start // bs, -(-stop // bs)
  per = (bs if a.fmt.bits == 8 else
         mx_pack.packed_length(bs, a.fmt.bits))
  data_idx, scale_idx = list(idx), list(idx)
  data_idx[ax] = slice(nb0 * per, nb1 * per)
  scale_idx[ax] = slice(nb0, nb1)
  src_idx = list(idx)
  src_idx[ax] = slice(start, stop)
  ts = a.tensor_scale
  if ts is not None and np.ndim(ts) > 0:
    ts = ts[tuple(idx[:np.ndim(ts)])]
  kept_after = sum(1 for i in idx[ax + 1:] if isinstance(i, slice))
  return a.with_storage(
      a.data[tuple(data_idx)], a.scales[tuple(scale_idx)], ts,
      axis=-kept_after - 1, length=stop - start,
      source=_view_source(a, lambda s: s[tuple(src_idx)]))
