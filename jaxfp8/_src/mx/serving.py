"""Serving from packed weights: parameter trees with MXArray leaves.

:func:`quantize_params` packs chosen leaves of a parameter tree (linen
``params``, an nnx ``State``, any pytree) once into MXArrays, kept packed.
Under :func:`jaxfp8.recipes.linen_recipe` (or after
:func:`jaxfp8.recipes.nnx_recipe`) the same model applies straight from the
packed tree: each layer whose kernel is an MXArray multiplies it with the
recipes' ``dot_general`` (weight-only, or dynamic MX activations by its
rule's MX recipe), so the backend choice applies. :func:`dequantize_params` gives the plain tree
instead, and :func:`packed_bytes` counts what a tree holds.

Trees are walked with ``jax.tree_util`` alone: this module imports no
framework.
"""
from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp

from jaxfp8._src.mx import array as mx_lib


def is_packed(x: Any) -> bool:
  """Whether ``x`` is a packed leaf (an MXArray)."""
  return isinstance(x, mx_lib.MXArray)


def _leaf_path(path) -> str:
  parts = []
  for p in path:
    parts.append(str(getattr(p, "key", getattr(p, "name", getattr(
        p, "idx", p)))))
  return "/".join(parts)


def quantize_params(params: Any, rules: Any, *, axis: int = 0,
                    scale_mode: str = "rceil") -> Any:
  """Packs the leaves of a parameter tree chosen by rules into MXArrays.

  Args:
    params: a pytree of arrays (linen ``params``, an nnx ``State``).
    rules: ``(regex, format)`` pairs matched against each leaf's path (keys
      joined by ``/``, e.g. ``"Dense_0/kernel"``); the first match decides,
      None or no match keeps the leaf as it is. A plain format name packs
      every leaf whose path ends in ``kernel`` with at least 2 dims.
    axis: the blocked axis of each packed leaf (0: a Dense kernel's
      contracting axis). Lengths not a multiple of the block are padded.
    scale_mode: the scale mode (``"rceil"``: never saturates).

  Returns:
    The tree with MXArray leaves: apply the model from it under
    :func:`~jaxfp8.recipes.linen_recipe` (linen) or after
    :func:`~jaxfp8.recipes.nnx_recipe` on the merged model (nnx), or from
    :func:`dequantize_params` of it.

  >>> import jax.numpy as jnp
  >>> q = quantize_params({"Dense_0": {"kernel": jnp.ones((64, 8))}}, "mxfp4")
  >>> q["Dense_0"]["kernel"].nbytes
  272
  """
  if isinstance(rules, str):
    rules = [(r"(^|/)kernel(/value)?$", rules)]
  compiled = [(re.compile(p), f) for p, f in rules]

  def pack(path, leaf):
    name = _leaf_path(path)
    for pattern, fmt in compiled:
      if pattern.search(name):
        if fmt is None or getattr(leaf, "ndim", 0) < 2:
          return leaf
        return mx_lib.quantize(leaf, fmt, axis=axis, scale_mode=scale_mode,
                               pad=True)
    return leaf

  return jax.tree_util.tree_map_with_path(pack, params)


def dequantize_params(params: Any, dtype: Any = jnp.float32) -> Any:
  """The tree with each MXArray leaf dequantized (exactly) to ``dtype``.

  Call it inside the jitted forward: the packed tree is what is held in
  memory between calls, and the wide kernels live only during the call.
  """
  return jax.tree_util.tree_map(
      lambda x: x.dequantize(dtype) if is_packed(x) else x, params,
      is_leaf=is_packed)


def packed_bytes(params: Any) -> int:
  """Bytes held by a tree's leaves, MXArrays counted packed."""
  leaves = jax.tree_util.tree_leaves(params, is_leaf=is_packed)
  return sum(x.nbytes if is_packed(x) else x.size * x.dtype.itemsize
             for x in leaves)
