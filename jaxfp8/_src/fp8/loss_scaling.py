"""Loss scaling: jmp's loss-scale classes, field for field, for narrow trees.

A loss computed in a narrow or half format is multiplied by a *loss scale*
before differentiation so small gradients stay representable, and the
gradients are divided by it afterwards. :class:`NoOpLossScale`,
:class:`StaticLossScale` and :class:`DynamicLossScale` have jmp's fields,
pytree layout and update rule (``adjust`` returns the next state), convert to
and from jmp's classes (``to_jmp``, :func:`loss_scale_from_jmp`), and also
rescale narrow leaves: those are rescaled in float32 and cast back,
saturating at the format's max. :func:`all_finite` tells ``adjust`` whether a
step's gradients were finite.

Per-tensor scaling into narrow formats (amax, scales, delayed scaling) is a
different job and lives in :mod:`jaxfp8._src.fp8.scaling`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, TypeVar, Union

import jax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics.cast import cast
from jaxfp8._src.numerics.codes import CodeArray
from jaxfp8._src.numerics.codes import decode

T = TypeVar("T")


def _is_float(x) -> bool:
  return hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jnp.floating)


def _scale_tree(tree: T, factor) -> T:
  """Multiplies floating leaves by ``factor`` in float32, keeping dtypes."""
  def one(x):
    if isinstance(x, CodeArray):
      return cast(decode(x) * factor, x.format)
    if not _is_float(x):
      return x
    if formats.is_narrow(x.dtype):
      return cast(x.astype(jnp.float32) * factor, x.dtype)
    return (x * jnp.asarray(factor, jnp.float32)).astype(x.dtype)
  return jax.tree_util.tree_map(one, tree,
                                is_leaf=lambda x: isinstance(x, CodeArray))


def all_finite(tree: Any) -> jax.Array:
  """Whether every floating leaf of ``tree`` is finite (a bool scalar).

  >>> all_finite({"a": jnp.ones(2), "b": jnp.array([1.0, jnp.inf])})
  Array(False, dtype=bool)
  """
  leaves = [decode(x) if isinstance(x, CodeArray) else x
            for x in jax.tree_util.tree_leaves(
                tree, is_leaf=lambda x: isinstance(x, CodeArray))]
  checks = [jnp.isfinite(x.astype(jnp.float32)).all() for x in leaves
            if _is_float(x)]
  return jnp.stack(checks).all() if checks else jnp.array(True)


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class NoOpLossScale:
  """No loss scaling (``jmp.NoOpLossScale``)."""

  @property
  def loss_scale(self):
    return 1

  def scale(self, tree: T) -> T:
    return tree

  def unscale(self, tree: T) -> T:
    return tree

  def adjust(self, grads_finite: Any) -> NoOpLossScale:
    del grads_finite
    return self

  def tree_flatten(self):
    return (), None

  @classmethod
  def tree_unflatten(cls, aux, children):
    del aux, children
    return cls()

  def to_jmp(self):
    import jmp  # pylint: disable=g-import-not-at-top
    return jmp.NoOpLossScale()


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class StaticLossScale:
  """A fixed loss scale (``jmp.StaticLossScale``); narrow leaves saturate."""

  loss_scale: Any

  def scale(self, tree: T) -> T:
    return _scale_tree(tree, self.loss_scale)

  def unscale(self, tree: T) -> T:
    return _scale_tree(tree, 1 / jnp.asarray(self.loss_scale, jnp.float32))

  def adjust(self, grads_finite: Any) -> StaticLossScale:
    del grads_finite
    return self

  def tree_flatten(self):
    return (self.loss_scale,), None

  @classmethod
  def tree_unflatten(cls, aux, children):
    del aux
    return cls(children[0])

  def to_jmp(self):
    import jmp  # pylint: disable=g-import-not-at-top
    return jmp.StaticLossScale(self.loss_scale)


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class DynamicLossScale:
  """jmp's dynamic loss scale, with the same fields, pytree and rule.

  Every ``period`` steps with finite gradients the scale grows by ``factor``;
  non-finite gradients shrink it by ``factor`` (not below
  ``min_loss_scale``) and restart the count. ``scale``/``unscale`` touch
  floating leaves only and keep their dtype (narrow leaves are rescaled in
  float32 and cast back, saturating).

  >>> ls = DynamicLossScale(jnp.float32(2.0**15), period=2)
  >>> ls = ls.adjust(jnp.array(True)).adjust(jnp.array(True))
  >>> ls.loss_scale
  Array(65536., dtype=float32)
  >>> ls.adjust(jnp.array(False)).loss_scale
  Array(32768., dtype=float32)
  """

  loss_scale: Any
  counter: Any = dataclasses.field(
      default_factory=lambda: np.zeros([], np.int32))
  period: int = 2000
  factor: int = 2
  min_loss_scale: Any = dataclasses.field(
      default_factory=lambda: np.ones([], np.float32))

  def scale(self, tree: T) -> T:
    return _scale_tree(tree, self.loss_scale)

  def unscale(self, tree: T) -> T:
    return _scale_tree(tree, 1 / jnp.asarray(self.loss_scale, jnp.float32))

  def tree_flatten(self):
    return ((self.loss_scale, self.counter, self.min_loss_scale),
            (self.period, self.factor))

  @classmethod
  def tree_unflatten(cls, aux, children):
    loss_scale, counter, min_loss_scale = children
    return cls(loss_scale, counter, aux[0], aux[1], min_loss_scale)

  def adjust(self, grads_finite: Any) -> DynamicLossScale:
    """The next state given whether this step's gradients were finite."""
    grads_finite = jnp.asarray(grads_finite)
    if grads_finite.ndim != 0:
      raise ValueError("`grads_finite` argument to `DynamicLossScale.adjust` "
                       f"must be a scalar, got shape {grads_finite.shape}")
    scale = jnp.asarray(self.loss_scale)
    grown = scale * self.factor
    grown = jnp.where(jnp.isfinite(grown), grown, scale)
    loss_scale = jnp.where(
        grads_finite,
        jnp.where(self.counter == self.period - 1, grown, scale),
        jnp.maximum(self.min_loss_scale, scale / self.factor))
    counter = ((self.counter + 1) % self.period) * grads_finite
    return dataclasses.replace(self, loss_scale=loss_scale.astype(scale.dtype),
                               counter=counter.astype(jnp.int32))

  def to_jmp(self):
    import jmp  # pylint: disable=g-import-not-at-top
    return jmp.DynamicLossScale(
        loss_scale=jnp.asarray(self.loss_scale), counter=self.counter,
        period=self.period, factor=self.factor,
        min_loss_scale=self.min_loss_scale)


LossScale = Union[NoOpLossScale, StaticLossScale, DynamicLossScale]


def loss_scale_from_jmp(loss_scale: Any) -> LossScale:
  """The jaxfp8 loss scale equal to a jmp one (``NoOp``, ``Static``, ``Dynamic``).

  >>> import jmp
  >>> loss_scale_from_jmp(jmp.StaticLossScale(128.0))
  StaticLossScale(loss_scale=128.0)
  """
  kind = type(loss_scale).__name__
  if kind == "NoOpLossScale":
    return NoOpLossScale()
  if kind == "StaticLossScale":
    return StaticLossScale(loss_scale.loss_scale)
  if kind == "DynamicLossScale":
    return DynamicLossScale(loss_scale.loss_scale, loss_scale.counter,
                            loss_scale.period, loss_scale.factor,
                            loss_scale.min_loss_scale)
  raise TypeError(f"`loss_scale` argument to `loss_scale_from_jmp` must be a "
                  f"jmp NoOpLossScale, StaticLossScale or DynamicLossScale, "
                  f"got {kind}")

