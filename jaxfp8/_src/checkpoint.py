"""Checkpoints of narrow-format state: orbax and ``flax.serialization``.

Orbax stores arrays through TensorStore, which knows most narrow dtypes but
not every one (IEEE ``float8_e4m3`` is refused), and restores into whatever
dtype the target asks for, converting silently: a float8_e4m3fn checkpoint
restored into a float8_e5m2 target comes back rounded, not refused. And a
:class:`jaxfp8.CodeArray` or :class:`jaxfp8.mx.MXArray` is a pytree whose
format is static data that no checkpoint records, so restoring float6 codes
into a target of the other float6 format would reinterpret them.

So :func:`save` first turns the state into a *storable* tree
(:func:`to_storable`) in which each such leaf says what it is: a CodeArray
becomes ``{"CodeArray__<format>": {"0": codes}}``, an MXArray
``{"MXArray__<format>__<axis>__<length>__<block>": {"0": data, "1": scales,
...}}``, an array of a dtype TensorStore refuses ``{"codes__<dtype>": uint8
view}``, and a typed PRNG key ``{"key__<impl>": key data}``. :func:`restore` reads the checkpoint's metadata, compares every
leaf's path, dtype and shape with the target's storable form, raises a
``ValueError`` naming each mismatch, and only then restores (shardings from
the target) and rebuilds the target's types. Other leaves (native fp8 arrays
included) are orbax's own, bit for bit.

``flax.serialization`` (msgpack) gets state-dict handlers for CodeArray,
MXArray and the scaling states (registered when :mod:`jaxfp8.checkpoint` is
imported, with Flax installed): their state holds the children and a tag of
the format and layout, and restoring into a target of another format or
shape raises a ``ValueError``. msgpack can't hold a typed PRNG key (Flax's
limit): serialize ``to_storable(state)`` for a state with keys in it.
"""
from __future__ import annotations

import functools
import importlib.util
from typing import Any

import jax
import numpy as np

from jaxfp8._src.mx.array import MXArray
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics.codes import CodeArray

_SPECIAL = (CodeArray, MXArray)
_SEP = "__"


@functools.lru_cache(maxsize=None)
def _tensorstore_holds(dtype: np.dtype) -> bool:
  """Whether TensorStore (orbax's storage) knows ``dtype``."""
  import tensorstore  # pylint: disable=g-import-not-at-top
  try:
    tensorstore.dtype(np.dtype(dtype).name)
    return True
  except (TypeError, ValueError):
    return False


def _is_special(x: Any) -> bool:
  return isinstance(x, _SPECIAL)


def _tag(x: Any) -> str:
  """The storable key of a CodeArray or MXArray: its type and static data."""
  _, aux = x.tree_flatten()
  aux = aux if isinstance(aux, tuple) else (aux,)
  return _SEP.join([type(x).__name__, *map(str, aux)])


def _uint8_like(x: Any) -> Any:
  """``x``'s bytes as uint8 (arrays) or its uint8 abstract twin."""
  if isinstance(x, jax.ShapeDtypeStruct):
    return jax.ShapeDtypeStruct(x.shape, np.uint8,
                                sharding=getattr(x, "sharding", None))
  return jax.lax.bitcast_convert_type(x, np.uint8)


def _key_impl(x: Any) -> str:
  """The PRNG implementation's name of a typed key array or its abstract."""
  if isinstance(x, jax.ShapeDtypeStruct):
    found = []
    jax.eval_shape(lambda k: found.append(str(jax.random.key_impl(k))), x)
    return found[0]
  return str(jax.random.key_impl(x))


def _storable_leaf(x: Any) -> Any:
  dtype = getattr(x, "dtype", None)
  if dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
    if isinstance(x, jax.ShapeDtypeStruct):
      data = jax.eval_shape(jax.random.key_data, x)
      # eval_shape drops the sharding; without one, orbax restores by the
      # saved topology, which another process count does not have. The
      # key's sharding fits its data: the trailing dims are replicated.
      data = jax.ShapeDtypeStruct(data.shape, data.dtype,
                                  sharding=getattr(x, "sharding", None))
    else:
      data = jax.random.key_data(x)
    return {f"key{_SEP}{_key_impl(x)}": data}
  if _is_special(x):
    children, _ = x.tree_flatten()
    return {_tag(x): {str(i): _storable_leaf(c)
                      for i, c in enumerate(children) if c is not None}}
  if (dtype is not None and formats.is_narrow(dtype)
      and np.dtype(dtype).itemsize == 1 and not _tensorstore_holds(dtype)):
    return {f"codes{_SEP}{np.dtype(dtype).name}": _uint8_like(x)}
  return x


def to_storable(tree: Any) -> Any:
  """``tree`` in the form orbax stores exactly (see the module docstring).

  Works on arrays and on abstract targets (``jax.ShapeDtypeStruct`` leaves,
  shardings kept), so it also serves a ``CheckpointManager`` of your own:
  save ``to_storable(state)``, restore into ``to_storable(abstract_state)``,
  then :func:`from_storable`.

  >>> import jax.numpy as jnp, jaxfp8
  >>> to_storable({"w": jaxfp8.encode(jnp.ones(2), "e2m3")})
  {'w': {'CodeArray__float6_e2m3fn': {'0': Array([8, 8], dtype=uint8)}}}
  """
  return jax.tree_util.tree_map(_storable_leaf, tree, is_leaf=_is_special)


def _rebuild_leaf(target: Any, stored: Any) -> Any:
  if _is_special(target):
    parts = stored[_tag(target)]
    kids, aux = target.tree_flatten()
    values = [None if c is None else _rebuild_leaf(c, parts[str(i)])
              for i, c in enumerate(kids)]
    return type(target).tree_unflatten(aux, values)
  if isinstance(stored, dict):  # {"codes__<dtype>" or "key__<impl>": data}
    (tag, data), = stored.items()
    kind, name = tag.split(_SEP)
    if kind == "key":
      return jax.random.wrap_key_data(data, impl=name)
    return jax.lax.bitcast_convert_type(data, np.dtype(name))
  return stored


def from_storable(stored: Any, target: Any) -> Any:
  """Inverts :func:`to_storable`: ``stored`` rebuilt with ``target``'s types.

  >>> import jax.numpy as jnp, jaxfp8
  >>> x = {"w": jaxfp8.encode(jnp.ones(2), "e2m3")}
  >>> from_storable(to_storable(x), x)["w"]
  CodeArray(float6_e2m3fn, shape=(2,), values=[1 1])
  """
  return jax.tree_util.tree_map(_rebuild_leaf, target, stored,
                                is_leaf=_is_special)


def _key_str(k: Any) -> str:
  for attr in ("key", "idx", "name"):
    if hasattr(k, attr):
      return str(getattr(k, attr))
  return str(k)


def _by_path(tree: Any) -> dict[str, Any]:
  leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
  return {"/".join(map(_key_str, p)): v for p, v in leaves}


def _abstract(x: Any) -> Any:
  if isinstance(x, jax.ShapeDtypeStruct) or not hasattr(x, "dtype"):
    return x
  return jax.ShapeDtypeStruct(np.shape(x), x.dtype,
                              sharding=getattr(x, "sharding", None))


def _describe(path: str, what: str) -> str:
  """A readable leaf path: the storable tags turned back into words."""
  parts = []
  for p in path.split("/"):
    if p.startswith(tuple(k + _SEP for k in ("CodeArray", "MXArray", "codes",
                                             "key"))):
      fields = p.split(_SEP)
      parts.append(f"<{fields[0]} {fields[1]}>")
    elif not p.isdigit() or not parts or not parts[-1].startswith("<"):
      parts.append(p)
  return f"{'/'.join(parts) or '(root)'}: {what}"


def check_compatible(saved: Any, target: Any, fn: str = "restore") -> None:
  """ValueError naming every leaf whose path, dtype or shape differs.

  ``saved`` is orbax's metadata tree (leaves with ``shape`` and ``dtype``),
  ``target`` the storable abstract target.
  """
  have, want = _by_path(saved), _by_path(target)
  problems = [_describe(p, "in the checkpoint, not in the target")
              for p in sorted(set(have) - set(want))]
  problems += [_describe(p, "in the target, not in the checkpoint")
               for p in sorted(set(want) - set(have))]
  for p in sorted(set(have) & set(want)):
    h, w = have[p], want[p]
    hd, wd = np.dtype(h.dtype), np.dtype(w.dtype)
    if hd != wd or tuple(h.shape) != tuple(w.shape):
      problems.append(_describe(
          p, f"saved {hd.name}{tuple(h.shape)}, target "
             f"{wd.name}{tuple(w.shape)}"))
  if problems:
    raise ValueError(
        f"`{fn}`: the target does not match the checkpoint (a format or "
        f"shape differs; orbax would convert silently):\n  "
        + "\n  ".join(problems[:20])
        + (f"\n  ... and {len(problems) - 20} more" if len(problems) > 20
           else ""))


def save(directory: Any, state: Any, *, force: bool = False) -> None:
  """Saves ``state`` with orbax's ``StandardCheckpointer``, exactly.

  Every narrow format is stored bit for bit: native fp8/fp4 arrays (IEEE
  ``float8_e4m3`` included, which TensorStore refuses), CodeArray (float6)
  and MXArray leaves; sharded arrays are saved from their shards.

  Args:
    directory: a path that does not exist yet (or ``force=True``).
    state: any pytree of arrays: params, optimizer state, scaling state.
    force: overwrite an existing checkpoint.

  >>> import tempfile, jax.numpy as jnp, jaxfp8
  >>> d = tempfile.mkdtemp() + "/ck"
  >>> state = {"w": jnp.ones((2, 2), jnp.float8_e4m3)}
  >>> jaxfp8.checkpoint.save(d, state)
  >>> jaxfp8.checkpoint.restore(d, state)["w"].dtype
  dtype(float8_e4m3)
  """
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  with ocp.StandardCheckpointer() as ckpt:
    ckpt.save(directory, to_storable(state), force=force)
    ckpt.wait_until_finished()


def restore(directory: Any, target: Any) -> Any:
  """Restores a :func:`save` checkpoint into ``target``'s types and shardings.

  Args:
    directory: the checkpoint's path.
    target: a pytree like the saved state: arrays, ``jax.ShapeDtypeStruct``
      leaves (with shardings to restore sharded), CodeArray and MXArray
      leaves (their format is checked against the checkpoint's).

  Returns:
    The restored state, bit for bit what was saved.

  Raises:
    ValueError: when a leaf's format (dtype), shape or place in the tree
      differs between the checkpoint and ``target``, naming each.
  """
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  # Through CodeArray/MXArray children: their static data stays.
  abstract = to_storable(jax.tree_util.tree_map(_abstract, target))
  with ocp.StandardCheckpointer() as ckpt:
    meta = ckpt.metadata(directory)
    check_compatible(getattr(meta, "item_metadata", meta).tree, abstract)
    stored = ckpt.restore(directory, abstract)
  return from_storable(stored, target)


# -- flax.serialization (msgpack) ------------------------------------------

def _serializable_types() -> tuple[type, ...]:
  """jaxfp8's pytree classes: storage types and scaling state."""
  from jaxfp8._src.fp8 import loss_scaling  # pylint: disable=g-import-not-at-top
  from jaxfp8._src.fp8 import scaling  # pylint: disable=g-import-not-at-top
  return (*_SPECIAL, scaling.CurrentScaling, scaling.DelayedScaling,
          loss_scaling.NoOpLossScale, loss_scaling.StaticLossScale,
          loss_scaling.DynamicLossScale)


def _state_dict(x: Any) -> dict[str, Any]:
  from flax import serialization  # pylint: disable=g-import-not-at-top
  children, _ = x.tree_flatten()
  state = {"tag": _tag(x)}
  state.update({str(i): serialization.to_state_dict(c)
                for i, c in enumerate(children) if c is not None})
  return state


def _from_state_dict(target: Any, state: dict[str, Any]) -> Any:
  from flax import serialization  # pylint: disable=g-import-not-at-top
  want = _tag(target)
  if state.get("tag") != want:
    raise ValueError(
        f"flax.serialization: a {type(target).__name__} state of "
        f"{state.get('tag')!r} can't be restored into a target of {want!r} "
        f"(its format or layout differs)")
  kids, aux = target.tree_flatten()
  values = []
  for i, c in enumerate(kids):
    if c is None:
      values.append(None)
      continue
    v = serialization.from_state_dict(c, state[str(i)])
    if hasattr(c, "shape") and np.shape(v) != tuple(np.shape(c)):
      raise ValueError(
          f"flax.serialization: {type(target).__name__} part {i} has shape "
          f"{np.shape(v)} in the state, {tuple(np.shape(c))} in the target")
    if hasattr(c, "dtype"):
      v = jax.numpy.asarray(v, dtype=c.dtype)
    values.append(v)
  return type(target).tree_unflatten(aux, values)


def register_flax_serialization() -> bool:
  """Registers jaxfp8's pytree classes with ``flax.serialization``.

  CodeArray, MXArray and the scaling states (current, delayed, loss scales)
  get state-dict handlers that record their format and layout. Called when
  :mod:`jaxfp8.checkpoint` is imported, if Flax is installed (idempotent).
  Returns whether Flax was there to register with.
  """
  if importlib.util.find_spec("flax") is None:
    return False
  from flax import serialization  # pylint: disable=g-import-not-at-top
  for cls in _serializable_types():
    serialization.register_serialization_state(
        cls, _state_dict, _from_state_dict, override=True)
  return True


__all__ = ["check_compatible", "from_storable", "register_flax_serialization",
           "restore", "save", "to_storable"]
