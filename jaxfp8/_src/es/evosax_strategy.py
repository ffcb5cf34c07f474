"""evosax strategies whose Gaussian noise is drawn, and held, in fp8.

evosax 0.3 draws every population of its distribution-based strategies as
``jax.random.normal(key, shape)`` in float32 and hands out float32
candidates. :class:`EvosaxStrategy` wraps such a strategy: ``ask`` draws the
noise with :func:`jaxfp8.es.perturbations` (jaxfp8's exact sampler, or the
table or cast method; antithetic where the strategy is) and returns it as a
:class:`~jaxfp8._src.es.narrow_population.NarrowPopulation`; ``tell`` rebuilds
the float32 candidates from that noise by the strategy's own formula and
calls the strategy's own ``tell``. The update is evosax's, given the noise.

This module imports evosax (an integration module); the rest of jaxfp8 does
not.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import flatten_util

from evosax import algorithms
from evosax.algorithms.base import EvolutionaryAlgorithm

from jaxfp8._src.es.narrow_population import candidates
from jaxfp8._src.es.narrow_population import member_format
from jaxfp8._src.es.narrow_population import NarrowPopulation
from jaxfp8._src.es.population import check_method
from jaxfp8._src.es.population import perturbations
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import validate
from jaxfp8._src.numerics.codes import as_float32

# How each wrappable strategy's ``ask`` turns its noise into candidates
# (evosax 0.3): whether it mirrors the noise (None: its
# ``use_antithetic_sampling``) and which :func:`candidates` formula it uses.
# Only these exact classes: a subclass may draw differently.
_LAYOUTS = {
    algorithms.Open_ES: (None, "scale"),
    algorithms.SNES: (False, "scale"),
    algorithms.PGPE: (True, "scale"),
    algorithms.ARS: (True, "scale"),
    algorithms.Sep_CMA_ES: (False, "diagonal"),
    algorithms.CMA_ES: (False, "rotation"),
}
STRATEGIES = tuple(cls.__name__ for cls in _LAYOUTS)


def _layout(strategy: Any, fn: str) -> tuple[bool, str]:
  layout = _LAYOUTS.get(type(strategy))
  if layout is None:
    name = type(strategy).__name__
    if isinstance(strategy, EvolutionaryAlgorithm):
      why = (f"evosax's {name} does not draw its population as mean + std * "
             f"N(0, 1) noise that jaxfp8 knows how to draw in a narrow format")
    else:
      why = f"got {name}, not an evosax strategy"
    raise TypeError(f"`strategy` argument to `{fn}` must be an instance of "
                    f"one of evosax's {', '.join(STRATEGIES)}; {why}")
  antithetic, kind = layout
  if antithetic is None:
    antithetic = bool(strategy.use_antithetic_sampling)
  return antithetic, kind


class EvosaxStrategy:
  """An evosax strategy whose Gaussian noise is drawn and held in fp8.

  Same ``init``, ``ask`` and ``tell`` as the wrapped strategy, but ``ask``
  returns a :class:`NarrowPopulation`: the noise ``z`` of the population in
  ``noise_dtype`` (drawn by :func:`jaxfp8.es.perturbations` with ``method``:
  each entry follows the exact rounded N(0, 1) law, and antithetic rows are
  exact mirrors), plus the strategy's mean and scale. Its members, built in
  ``population_dtype`` (float32, bfloat16, or fp8 weights), are what the user
  evaluates, by :func:`jaxfp8.es.evaluate`. ``tell`` builds the float32
  candidates ``mean + std * z`` (Sep-CMA-ES: ``mean + std * (D * z)``;
  CMA-ES: ``mean + std * ((z @ diag(D).T) @ B.T)``) by evosax's formula and
  calls the strategy's own ``tell``: the update, the best solution and the
  metrics are evosax's, given the narrow noise (bit for bit; CMA-ES's
  rotation is a matmul, whose float32 sums XLA may order otherwise in
  another program, a few ulps). (Members rounded into an fp8
  ``population_dtype`` are what was evaluated; the update sees their float32
  candidates, as evosax's own would.)

  What is held from ``ask`` to ``tell`` is the noise alone, one byte a
  parameter for fp8, where evosax holds four: the float32 candidates. The
  alternative, handing out fp8 candidates and drawing the noise again in
  ``tell`` from a key kept in the state, holds as little only for fp8
  members, costs a second draw and changes the strategy's state type; this
  one keeps evosax's state as it is and lets the members take any dtype.

  With ``method="cast"`` the noise is ``jax.random.normal(key, shape)`` (the
  strategy's own draw) rounded once to ``noise_dtype``, as long as the drawn
  half (or population) fits one block of :func:`jaxfp8.es.perturbations`
  (2^22 entries); beyond that it is drawn in blocks with derived keys.

  Args:
    strategy: an instance of evosax's ``Open_ES``, ``SNES``, ``PGPE``,
      ``ARS``, ``Sep_CMA_ES`` or ``CMA_ES`` (evosax 0.3).
    noise_dtype: a signed format for the noise (default e4m3; any narrow
      format :func:`jaxfp8.random.normal` draws, or a wide float).
    method: :func:`jaxfp8.random.normal`'s method, ``"exact"``, ``"table"``
      or ``"cast"``; None for its default.
    population_dtype: the dtype members are built in (rounded once, to
      nearest, saturating): float32 (default), bfloat16, or a narrow format
      this JAX holds in arrays.

  Raises:
    TypeError: for a strategy that is not one of those (evosax's DE, PSO,
      GA, RandomSearch, ... draw no Gaussian noise this can take over).
    ValueError: for an unknown or unsigned format, or an unknown method.

  >>> import jax, jax.numpy as jnp, optax, jaxfp8
  >>> from evosax.algorithms import Open_ES
  >>> es = jaxfp8.es.EvosaxStrategy(
  ...     Open_ES(64, jnp.zeros(8), optimizer=optax.adam(0.1)),
  ...     noise_dtype="e4m3", method="exact")
  >>> params = es.default_params
  >>> state = es.init(jax.random.key(0), jnp.full(8, 3.0), params)
  >>> def generation(state, key):
  ...   population, state = es.ask(key, state, params)
  ...   fitness = jaxfp8.es.evaluate(lambda x: jnp.sum(x ** 2), population)
  ...   return es.tell(key, population, fitness, state, params)
  >>> population, _ = es.ask(jax.random.key(1), state, params)
  >>> population.noise.dtype, population.shape
  (dtype(float8_e4m3fn), (64, 8))
  >>> state, _ = jax.lax.scan(generation, state,
  ...                         jax.random.split(jax.random.key(1), 50))
  >>> bool(jnp.sum(es.get_mean(state) ** 2) < jnp.sum(jnp.full(8, 3.0) ** 2))
  True
  """

  def __init__(self, strategy: Any, *, noise_dtype: Any = jnp.float8_e4m3fn,
               method: str | None = None,
               population_dtype: Any = jnp.float32):
    fn = "EvosaxStrategy"
    self.antithetic, self._kind = _layout(strategy, fn)
    fmt = formats.get(noise_dtype, arg="noise_dtype", fn=fn)
    if not fmt.signed:
      raise ValueError(f"`noise_dtype` argument to `{fn}` must be a signed "
                       f"format (noise is symmetric about 0), got {fmt.name}")
    check_method(method, fmt, fn)
    self.strategy = strategy
    self.noise_dtype = fmt.dtype
    self.method = method
    self._noise_fmt = fmt.name
    self.population_dtype = member_format(population_dtype,
                                          "population_dtype", fn).dtype
    # evosax ravels pytree solutions with ravel_pytree; so do members.
    _, self._unravel = flatten_util.ravel_pytree(strategy.solution)

  @property
  def population_size(self) -> int:
    return self.strategy.population_size

  @property
  def num_dims(self) -> int:
    return self.strategy.num_dims

  @property
  def default_params(self) -> Any:
    """The wrapped strategy's default parameters."""
    return self.strategy.default_params

  def get_mean(self, state: Any) -> Any:
    """The mean of ``state``, unravelled into the solution's pytree."""
    return self.strategy.get_mean(state)

  def init(self, key: jax.Array, mean: Any, params: Any) -> Any:
    """The wrapped strategy's own initial state, centred on ``mean``."""
    return self.strategy.init(key, mean, params)

  def ask(self, key: jax.Array, state: Any,
          params: Any) -> tuple[NarrowPopulation, Any]:
    """A new population, held as its narrow noise, and the new state.

    The state is the wrapped strategy's after its own ``ask`` (CMA-ES
    decomposes its covariance there); evosax's float32 candidates are not
    computed (dead code under ``jit``).
    """
    key = validate.check_single_key(key, "EvosaxStrategy.ask")
    return self._ask(key, state, params)

  @functools.partial(jax.jit, static_argnames=("self",))
  def _ask(self, key, state, params):
    _, state = self.strategy.ask(key, state, params)
    noise = perturbations(key, self.population_size, (self.num_dims,),
                          self._noise_fmt, antithetic=self.antithetic,
                          method=self.method)
    return NarrowPopulation(noise, state.mean, jnp.asarray(state.std),
                            *self._axes(state), dtype=self.population_dtype,
                            unravel=self._unravel), state

  def _axes(self, state: Any) -> tuple[jax.Array | None, jax.Array | None]:
    if self._kind == "diagonal":
      return state.D, None
    if self._kind == "rotation":
      return state.D, state.B
    return None, None

  def tell(self, key: jax.Array, population: NarrowPopulation, fitness: Any,
           state: Any, params: Any) -> tuple[Any, Any]:
    """The wrapped strategy's own ``tell`` on the float32 candidates of the
    population's noise (built by its ``ask``'s formula from ``state``)."""
    fn = "EvosaxStrategy.tell"
    if not isinstance(population, NarrowPopulation):
      raise TypeError(f"`population` argument to `{fn}` must be the "
                      f"NarrowPopulation that EvosaxStrategy.ask returned, "
                      f"got {type(population).__name__}")
    want = (self.population_size, self.num_dims)
    if population.shape != want:
      raise ValueError(f"`population` argument to `{fn}` must have noise of "
                       f"shape {want} (popsize, num_dims), got "
                       f"{population.shape}")
    if jnp.shape(fitness) != (self.population_size,):
      raise ValueError(f"`fitness` argument to `{fn}` must have shape "
                       f"({self.population_size},), got {jnp.shape(fitness)}")
    return self._tell(key, population.noise, fitness, state, params)

  @functools.partial(jax.jit, static_argnames=("self",))
  def _tell(self, key, noise, fitness, state, params):
    x = candidates(as_float32(noise), state.mean, state.std,
                   *self._axes(state))
    population = jax.vmap(self._unravel)(x)
    return self.strategy.tell(key, population, fitness, state, params)

  def __repr__(self) -> str:
    return (f"EvosaxStrategy({type(self.strategy).__name__}, noise_dtype="
            f"{self._noise_fmt}, method={self.method!r}, population_dtype="
            f"{self.population_dtype})")
