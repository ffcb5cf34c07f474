"""OpenAI-ES, the optimizer over fp8 populations: fitness shaping and the update.

:class:`OpenAIES` (Salimans et al. 2017) asks for a population of
perturbations (:func:`jaxfp8.es.perturbations`, in any signed format), ranks
the candidates' fitness (:func:`centered_rank`) and hands the estimated
search gradient to an optax optimizer; its state, :class:`ESState`, is a
pytree that ``tell`` returns anew. Drawing the populations is
:mod:`jaxfp8._src.es.population`'s job.
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src import compat
from jaxfp8._src.es.population import check_method
from jaxfp8._src.es.population import check_popsize
from jaxfp8._src.es.population import check_sharding
from jaxfp8._src.es.population import perturbations
from jaxfp8._src.es.population import Population
from jaxfp8._src.es.population import population_format
from jaxfp8._src.numerics import validate
from jaxfp8._src.numerics.codes import as_float32


def centered_rank(fitness: Any) -> jax.Array:
  """Fitness shaping: ranks mapped linearly onto [-0.5, 0.5].

  The lowest fitness gets -0.5 and the highest 0.5 (ties are ranked in index
  order), so the update ignores the scale and outliers of the fitness. NaN
  fitness (a diverged candidate) ranks lowest, below -inf.

  >>> centered_rank(jnp.array([3.0, -1.0, 10.0]))
  Array([ 0. , -0.5,  0.5], dtype=float32)
  >>> centered_rank(jnp.array([3.0, jnp.nan, 10.0]))
  Array([ 0. , -0.5,  0.5], dtype=float32)
  """
  validate.check_array(fitness, "fitness", "centered_rank")
  x = jnp.asarray(fitness)
  if x.ndim != 1:
    raise ValueError(f"`fitness` argument to `centered_rank` must be a 1-D "
                     f"array (one fitness per candidate), got shape {x.shape}")
  n = x.shape[0]
  if n < 2:
    return jnp.zeros(x.shape, jnp.float32)
  # argsort puts NaN last (best): sort (not NaN, value) pairs instead.
  order = jnp.lexsort((jnp.where(jnp.isnan(x), 0, x), ~jnp.isnan(x)))
  ranks = jnp.argsort(order, stable=True)
  return ranks.astype(jnp.float32) / (n - 1) - 0.5


class ESState(NamedTuple):
  """The state of :class:`OpenAIES`: a pytree, updated by ``tell``.

  Attributes:
    mean: the search distribution's centre, float32.
    sigma: its standard deviation, a float32 scalar.
    opt_state: the optimizer's state for ``mean``.
    generation: the number of ``tell`` calls so far.
  """
  mean: jax.Array
  sigma: jax.Array
  opt_state: Any
  generation: jax.Array


@dataclasses.dataclass(frozen=True)
class OpenAIES:
  """OpenAI-ES (Salimans et al. 2017) with the population in any float format.

  ``ask`` returns the population's perturbations ``eps`` (in ``dtype``: fp8
  takes a quarter of float32's memory); candidate ``i`` is
  ``mean + sigma * eps[i]``, see :meth:`candidates`. ``tell`` ranks the
  fitness (centered ranks), estimates the search gradient
  ``sum_i w_i eps_i / (popsize * sigma)`` and hands it to an optax optimizer
  for the mean.

  Attributes:
    popsize: the population size (even with antithetic sampling).
    optimizer: an ``optax.GradientTransformation`` for the mean, e.g.
      ``optax.adam(0.03)``.
    sigma: the initial standard deviation of the perturbations.
    dtype: the population's format: a signed narrow format or float32.
    antithetic: mirrored sampling (see :func:`perturbations`).
    method: the :func:`jaxfp8.random.normal` method (narrow formats).
    sigma_decay: sigma is multiplied by this after every ``tell`` ...
    sigma_min: ... but not below this.
    maximize: if False (default), ``fitness`` is a loss to minimize.
    sharding: a ``NamedSharding`` splitting the members over devices, for a
      population drawn where it lives (:func:`perturbations`' ``sharding``:
      each shard its own draw and antithetic pairs); ``tell`` then pairs
      members within each shard, so a generation moves only the fitness
      ranks' inputs and the update's all-reduce. None (default): one
      population, however it is sharded.

  >>> import jax, jax.numpy as jnp, optax, jaxfp8
  >>> es = jaxfp8.es.OpenAIES(popsize=64, optimizer=optax.adam(0.1),
  ...                         sigma=0.1, dtype="e4m3")
  >>> state = es.init(jnp.full(8, 3.0))
  >>> @jax.jit
  ... def step(state, key):
  ...   eps = es.ask(key, state)
  ...   loss = jnp.sum(es.candidates(state, eps) ** 2, axis=1)
  ...   return es.tell(state, eps, loss), None
  >>> state, _ = jax.lax.scan(step, state, jax.random.split(jax.random.key(0), 100))
  >>> bool(jnp.sum(state.mean ** 2) < 0.1 * jnp.sum(jnp.full(8, 3.0) ** 2))
  True
  """
  popsize: int
  optimizer: Any
  sigma: float = 0.1
  dtype: Any = jnp.float32
  antithetic: bool = True
  method: str | None = None
  sigma_decay: float = 1.0
  sigma_min: float = 0.0
  maximize: bool = False
  sharding: Any = None

  def __post_init__(self):
    fn = "OpenAIES"
    for arg in ("antithetic", "maximize"):
      validate.check_bool(getattr(self, arg), arg, fn)
    check_popsize(self.popsize, self.antithetic, fn)
    check_sharding(self.sharding, self.popsize, self.antithetic, fn)
    if self.popsize < 2:
      raise ValueError(f"`popsize` argument to `{fn}` must be at least 2, got "
                       f"{self.popsize}")
    fmt = population_format(self.dtype, fn)
    check_method(self.method, fmt, fn)
    if not (hasattr(self.optimizer, "init") and hasattr(self.optimizer,
                                                        "update")):
      raise TypeError(f"`optimizer` argument to `{fn}` must be an optax "
                      f"GradientTransformation, got "
                      f"{type(self.optimizer).__name__}")
    for arg, lo, strict in (("sigma", 0.0, True), ("sigma_decay", 0.0, True),
                            ("sigma_min", 0.0, False)):
      v = getattr(self, arg)
      if isinstance(v, compat.Tracer):
        continue  # traced (jit, vmap over settings): checked by nobody
      try:  # Python and NumPy numbers, 0-d arrays
        if isinstance(v, (bool, str)) or np.ndim(v) != 0:
          raise TypeError
        v = float(v)
      except (TypeError, ValueError) as e:
        raise TypeError(f"`{arg}` argument to `{fn}` must be a float, got "
                        f"{type(v).__name__} {np.shape(v) or ''}") from e
      if not (np.isfinite(v) and (v > lo if strict else v >= lo)):
        want = "positive" if strict else "non-negative"
        raise ValueError(f"`{arg}` argument to `{fn}` must be finite and "
                         f"{want}, got {v}")

  def init(self, mean: Any) -> ESState:
    """The initial state, centred on ``mean`` (any shape, kept in float32)."""
    try:
      mean = jnp.asarray(mean, jnp.float32)
    except (TypeError, ValueError) as e:
      raise TypeError(f"`mean` argument to `OpenAIES.init` must be an array "
                      f"of numbers, got {type(mean).__name__}") from e
    return ESState(mean, jnp.float32(self.sigma), self.optimizer.init(mean),
                   jnp.int32(0))

  def ask(self, key: jax.Array, state: ESState) -> Population:
    """The perturbations of a new population: ``(popsize, *mean.shape)``."""
    return perturbations(key, self.popsize, state.mean.shape, self.dtype,
                         antithetic=self.antithetic, method=self.method,
                         sharding=self.sharding)

  def candidates(self, state: ESState, population: Population) -> jax.Array:
    """The candidates ``mean + sigma * eps`` in float32 (rows, or one row)."""
    return state.mean + state.sigma * as_float32(population)

  def tell(self, state: ESState, population: Population,
           fitness: Any) -> ESState:
    """Moves the mean along the estimated search gradient; decays sigma."""
    want = (self.popsize, *state.mean.shape)
    if tuple(getattr(population, "shape", ())) != want:
      raise ValueError(f"`population` argument to `OpenAIES.tell` must have "
                       f"shape {want} (popsize, *mean.shape), as `ask` "
                       f"returns it, got {getattr(population, 'shape', None)}")
    fitness = jnp.asarray(fitness, jnp.float32)
    if fitness.shape != (self.popsize,):
      raise ValueError(f"`fitness` argument to `OpenAIES.tell` must have shape "
                       f"({self.popsize},), got {fitness.shape}")
    w = centered_rank(fitness if self.maximize else -fitness)
    eps = population
    shards = check_sharding(self.sharding, self.popsize, self.antithetic,
                            "OpenAIES")[1]
    if self.antithetic and shards == 1:  # eps[h + i] == -eps[i] exactly
      h = self.popsize // 2
      w, eps = w[:h] - w[h:], population[:h]
    elif self.antithetic:  # the same within each shard's rows
      h = self.popsize // shards // 2
      w = w.reshape(shards, 2, h)
      w = (w[:, 0] - w[:, 1]).reshape(-1)
      eps = as_float32(population).reshape(shards, 2, h, *state.mean.shape)
      eps = eps[:, 0].reshape(shards * h, *state.mean.shape)
    ascent = jnp.tensordot(w, as_float32(eps), axes=1)
    grad = -ascent / (self.popsize * state.sigma)
    updates, opt_state = self.optimizer.update(grad, state.opt_state,
                                               state.mean)
    sigma = jnp.maximum(state.sigma * self.sigma_decay,
                        jnp.float32(self.sigma_min))
    return ESState(state.mean + updates, sigma, opt_state,
                   state.generation + 1)
