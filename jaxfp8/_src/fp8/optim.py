"""Optax: parameters stored in a narrow format, updated with stochastic rounding.

Rounding ``p + u`` to nearest in a narrow format loses every update smaller
than half a step of the grid: a parameter near 1 in e4m3 (steps of 1/8)
ignores updates below 1/16, forever. Stochastic rounding goes up with
probability equal to the fraction of the step, so the *expected* new value is
``p + u`` exactly and small updates accumulate on average.

:func:`with_stochastic_rounding` wraps any optax transformation. The inner
transformation sees float32 parameters and gradients; the updates it returns
are replaced by ``round_stochastic(p + u) - p`` (exact in float32), so
``optax.apply_updates`` lands exactly on the stochastically rounded value and
the parameters keep their narrow dtype. JAX refuses to add a float32 update
to an 8-bit float implicitly, so apply the updates with :func:`apply_updates`
(``optax.apply_updates`` that upcasts narrow parameters for the sum; for
bfloat16 parameters the two agree).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import rounding
from jaxfp8._src.numerics import validate
from jaxfp8._src.numerics.codes import CodeArray


class StochasticRoundingState(NamedTuple):
  """State of :func:`with_stochastic_rounding`: the PRNG key and the inner
  transformation's state."""
  key: jax.Array
  inner_state: Any


def _rounded_leaf(p) -> bool:
  """Leaves kept in their own dtype with stochastic rounding."""
  if p is None or not hasattr(p, "dtype"):
    return False
  if not jnp.issubdtype(p.dtype, jnp.floating):
    return False
  return formats.is_narrow(p.dtype) or p.dtype == jnp.bfloat16


def _check_params(params, fn: str) -> None:
  is_codes = lambda x: isinstance(x, CodeArray)
  for p in jax.tree_util.tree_leaves(params, is_leaf=is_codes):
    if isinstance(p, CodeArray):
      raise NotImplementedError(
          f"`{fn}` can't update {p.format.name} parameters stored as "
          "jaxfp8.CodeArray (XLA holds no float6 array to add updates to); "
          "keep them in a native narrow format (float8_*, float4_e2m1fn) or "
          "bfloat16")
    if not hasattr(p, "dtype") or not jnp.issubdtype(p.dtype, jnp.floating):
      continue
    if p.dtype == jnp.float16:
      raise NotImplementedError(
          f"`{fn}` has no stochastic rounding into float16; store the "
          f"parameters in bfloat16 or a narrow format")
    if formats.is_narrow(p.dtype):
      fmt = formats.get(p.dtype)
      if not fmt.signed:
        raise TypeError(f"`{fn}`: parameters of dtype {fmt.name} (a scale "
                        f"format, no zero or sign) can't be updated")


def stochastic_round(x: Any, dtype: Any, key: jax.Array) -> Any:
  """Rounds float32 ``x`` into ``dtype`` (a narrow format or bfloat16),
  stochastically and saturating.

  Returns a native array, or a :class:`jaxfp8.CodeArray` for formats XLA
  can't hold (float6), as :func:`jaxfp8.cast` does.

  >>> import jax, jax.numpy as jnp
  >>> x = jnp.full((100_000,), 1.0 + 1 / 64)  # 1/8 of a step above 1 in e4m3
  >>> y = stochastic_round(x, "e4m3", jax.random.key(0))
  >>> float(y.astype(jnp.float32).mean())  # doctest: +SKIP
  1.0156...
  """
  fmt = formats.get(dtype, arg="dtype", fn="stochastic_round")
  key = validate.check_single_key(key, "stochastic_round")
  x32 = jnp.asarray(x, jnp.float32)
  rand = jax.random.bits(key, x32.shape, jnp.uint32)
  return _round_into(x32, rand, np.dtype(fmt.dtype))


def _round_into(x32, rand, dtype: np.dtype):
  """Stochastic, saturating rounding of float32 ``x32`` into ``dtype`` (a
  narrow format or bfloat16): the rounding core's, which keeps NaN."""
  fmt = formats.get(dtype)
  if not (fmt.narrow or fmt.dtype == jnp.bfloat16):
    raise NotImplementedError(f"no stochastic rounding into {fmt.name}")
  return rounding.round_to(x32, fmt, rounding="stochastic", rand=rand)


def apply_updates(params: Any, updates: Any) -> Any:
  """``optax.apply_updates`` that also takes narrow parameters.

  Each sum is formed in float32 (or the wider of the two dtypes) and cast
  back to the parameter's dtype, saturating at a narrow format's max (a
  plain ``astype`` gives NaN past 464 in float8_e4m3fn). With updates from
  :func:`with_stochastic_rounding` the sum is exactly a value of that dtype.

  >>> p = {"w": jnp.array([1.0, 2.0], jnp.float8_e4m3fn), "n": jnp.arange(2)}
  >>> apply_updates(p, {"w": jnp.array([0.125, -0.25]), "n": None})
  {'n': Array([0, 1], dtype=int32), 'w': Array([1.125, 1.75], dtype=float8_e4m3fn)}
  """
  def one(p, u):
    if p is None or u is None:
      return p
    p = jnp.asarray(p)
    if formats.is_narrow(p.dtype):  # saturating, as jaxfp8.cast: no NaN
      return rounding.round_to(p.astype(jnp.float32) + u, p.dtype)
    return jnp.asarray(p + u).astype(p.dtype)
  return jax.tree_util.tree_map(one, params, updates,
                                is_leaf=lambda x: x is None)


def with_stochastic_rounding(inner: Any, *, key: jax.Array) -> Any:
  """Wraps an optax transformation so narrow parameters round stochastically.

  Parameters stored in a narrow format or bfloat16 stay in it; others
  (float32) are untouched. The inner transformation works in float32: its
  state (Adam moments...) is float32 whatever the parameter storage.

  Take gradients with respect to a float32 view of the parameters
  (``jax.tree.map(lambda p: p.astype(jnp.float32), params)``): a gradient
  taken with respect to an fp8 parameter is itself rounded to fp8.

  Args:
    inner: an ``optax.GradientTransformation`` (``optax.adam(1e-3)``...).
    key: a PRNG key; each step folds in the step count.

  Returns:
    An ``optax.GradientTransformation`` whose ``update`` needs ``params``.

  >>> import jax, jax.numpy as jnp, optax, jaxfp8
  >>> params = {"w": jnp.ones(4, jnp.float8_e4m3fn)}
  >>> tx = with_stochastic_rounding(optax.sgd(1e-3), key=jax.random.key(0))
  >>> state = tx.init(params)
  >>> grads = {"w": -jnp.ones(4)}
  >>> updates, state = tx.update(grads, state, params)
  >>> apply_updates(params, updates)["w"].dtype
  dtype(float8_e4m3fn)
  """
  import optax  # pylint: disable=g-import-not-at-top
  key = validate.check_key(key, "with_stochastic_rounding")
  if not hasattr(inner, "init") or not hasattr(inner, "update"):
    raise TypeError("`inner` argument to `with_stochastic_rounding` must be "
                    f"an optax GradientTransformation, got {type(inner).__name__}")

  def as_f32(tree):
    return jax.tree_util.tree_map(
        lambda x: x.astype(jnp.float32) if _rounded_leaf(x) else x, tree)

  def init_fn(params):
    _check_params(params, "with_stochastic_rounding")
    return StochasticRoundingState(key, inner.init(as_f32(params)))

  def update_fn(updates, state, params=None):
    if params is None:
      raise ValueError("`with_stochastic_rounding` needs `params` in update")
    p32 = as_f32(params)
    upd, inner_state = inner.update(as_f32(updates), state.inner_state, p32)
    step_key, next_key = jax.random.split(state.key)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    keys = jax.random.split(step_key, max(len(leaves), 1))
    keys = jax.tree_util.tree_unflatten(treedef, list(keys[:len(leaves)]))

    def one(p, p_32, u, k):
      if not _rounded_leaf(p) or u is None:
        return u
      target = p_32 + u.astype(jnp.float32)
      rand = jax.random.bits(k, p.shape, jnp.uint32)
      new = _round_into(target, rand, np.dtype(p.dtype)).astype(jnp.float32)
      return new - p_32  # exact: both are values of p's format

    out = jax.tree_util.tree_map(one, params, p32, upd, keys)
    return out, StochasticRoundingState(next_key, inner_state)

  return optax.GradientTransformation(init_fn, update_fn)
