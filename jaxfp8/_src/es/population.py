"""Evolution strategies whose populations live in narrow formats.

An evolution strategy draws a whole population of Gaussian perturbations every
generation. Stored in fp8 they take a quarter of float32's memory, and drawn
with :func:`jaxfp8.random.normal` each entry follows the exact rounded N(0, 1)
law of the chosen method, at a fraction of the cost of float32-then-cast.

Blocks: the sampler's scratch (32-bit words, float32 candidates) is 4 to 16
bytes an entry, so a narrow population larger than :data:`BLOCK_ENTRIES`
entries (per half) is drawn in ``steps`` blocks of ``block`` rows by a loop
that writes each block into the output: block ``t`` is one
``jaxfp8.random.normal`` draw with the key ``fold_in(key, t)`` and holds rows
``t, t + steps, t + 2 steps, ...``. The peak is the population (twice for
native fp8: the loop writes uint8 codes) plus one block's scratch. A smaller
population is one draw with ``key`` itself.

Sharding: which rows a block holds, and its key, depend only on the popsize
and the member shape, never on the devices. JAX's partitionable threefry (the
default since JAX 0.5) makes every random bit a function of the key and its
position, so under ``jax.jit`` with a population-axis ``NamedSharding`` each
device draws only its own rows of every block (rows ``t + steps * b`` are
spread over the devices by ``b``), and the values equal a single device's.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src import compat
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import validate
from jaxfp8._src.numerics.rounding import ROUNDINGS
from jaxfp8._src.numerics import rounding as rounding_lib
from jaxfp8._src.numerics import codes as codes_lib
from jaxfp8._src.numerics.codes import as_float32
from jaxfp8._src.numerics.codes import CodeArray

Population = Any  # jax.Array (float or native narrow) or jaxfp8.CodeArray

# The entries of one block's draw (per half of an antithetic population):
# 2^22 keeps a block's scratch near 40 MB (e4m3fn, exact method), and the
# blocked draws were no slower than one draw at 4096 x 10,000 (docs/es.md).
BLOCK_ENTRIES = 1 << 22


def _check_popsize(popsize: Any, antithetic: bool, fn: str) -> int:
  if isinstance(popsize, (bool, np.bool_)) or not isinstance(
      popsize, (int, np.integer)):
    raise TypeError(f"`popsize` argument to `{fn}` must be an int, got "
                    f"{type(popsize).__name__}")
  popsize = int(popsize)
  if popsize < 1:
    raise ValueError(f"`popsize` argument to `{fn}` must be positive, got "
                     f"{popsize}")
  if antithetic and popsize % 2:
    raise ValueError(f"`popsize` argument to `{fn}` must be even with "
                     f"antithetic=True (pairs +eps, -eps), got {popsize}")
  return popsize


def _population_format(dtype: Any, fn: str) -> formats.Format:
  """The format of a population: a signed narrow format or a wide float."""
  fmt = formats.get(dtype, arg="dtype", fn=fn)
  if not fmt.signed:
    raise ValueError(f"`dtype` argument to `{fn}` must be a signed format "
                     f"(perturbations are symmetric about 0), got {fmt.name}")
  return fmt


def _check_method(method: str | None, fmt: formats.Format, fn: str):
  """Checks ``method``; returns the jit cache key of the method to be used.

  ``None`` is passed on to :func:`jaxfp8.random.normal` (which picks the
  default, or a fallback where the default can't serve the format); the
  default in force is part of the key, so changing it re-traces.
  """
  if not fmt.narrow:
    if method is not None:
      raise ValueError(f"`method` argument to `{fn}` applies to narrow formats "
                       f"only; dtype {fmt.name} is sampled by jax.random, got "
                       f"method={method!r}")
    return (None, None)
  from jaxfp8._src.random import config  # pylint: disable=g-import-not-at-top
  if method is not None:
    validate.check_choice(method, config.METHODS, "method", fn)
  return (method, config.get_default_method())


def block_rows(rows: int, size: int, block_entries: int) -> int:
  """Rows per block of a population of ``rows`` members of ``size`` entries.

  All rows when they fit in ``block_entries``; else the largest divisor of
  ``rows`` whose block fits (at least 1), so that every block has the same
  shape and the rows divide evenly into ``rows // block`` steps.

  >>> block_rows(2048, 100_000, 1 << 22), block_rows(8, 10, 1 << 22)
  (32, 8)
  """
  if rows * size <= block_entries:
    return rows
  fit = max(1, block_entries // max(size, 1))
  return max(b for b in range(1, min(rows, fit) + 1) if rows % b == 0)


def _storage(x: Population, fmt: formats.Format) -> jax.Array:
  """The uint8 codes of a block, which the block loop writes.

  XLA CPU updates a slice of an fp8 (or float4) array through a float16 copy
  of the whole array, every step; a uint8 update is in place. The codes go
  back to the format once, by :func:`codes.from_codes` (a copy of the fp8
  population: the peak holds it twice).
  """
  if isinstance(x, CodeArray):
    return x.codes
  if fmt.bits == 8:
    return jax.lax.bitcast_convert_type(x, jnp.uint8)
  # float4, which CPU XLA can't bitcast: its values round to themselves.
  return rounding_lib.round_to_codes(as_float32(x), fmt)


def _in_blocks(draw, steps: int, halves: int, block: int,
               shape: tuple[int, ...]) -> jax.Array:
  """``draw(t)`` of shape ``(halves * block, *shape)`` for ``t < steps``,
  written so that its row ``half * block + b`` becomes row
  ``half * block * steps + b * steps + t`` of the result."""
  def body(t, out):
    part = draw(t).reshape(halves, block, 1, *shape)
    return jax.lax.dynamic_update_slice_in_dim(out, part, t, axis=2)
  out = jnp.zeros((halves, block, steps, *shape), jnp.uint8)
  out = jax.lax.fori_loop(0, steps, body, out)
  return out.reshape(halves * block * steps, *shape)


def _block(popsize: int, shape: tuple[int, ...], fmt: formats.Format,
           antithetic: bool) -> int:
  """Rows per block; wide formats are one ``jax.random`` draw, unchanged."""
  rows = popsize // 2 if antithetic else popsize
  if not fmt.narrow:
    return rows
  return block_rows(rows, int(np.prod(shape, dtype=np.int64)), BLOCK_ENTRIES)


def _broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
  try:
    return jnp.broadcast_shapes(shape, target) == tuple(target)
  except ValueError:
    return False


def mirror(x: Population, fmt: formats.Format) -> Population:
  """``concatenate([x, -x])``, exactly: the sign bit of the codes flips.

  The antithetic half of a population (:func:`perturbations`), also timed by
  the ES benchmark. Done on uint8 codes: XLA on CPU concatenates and negates
  fp8 arrays through a float16 round trip that costs more than drawing the
  samples.

  Args:
    x: an array in ``fmt`` (native, or a :class:`jaxfp8.CodeArray`), or a
      wide float array.
    fmt: the format of ``x`` (a registry Format).

  Returns:
    ``x`` followed by ``-x`` along the first axis, of ``x``'s kind; zero of
    the fnuz formats (which have no -0) stays zero.

  >>> import jax.numpy as jnp
  >>> from jaxfp8._src import formats
  >>> mirror(jnp.array([1.5, 0.0], jnp.float8_e4m3fn),
  ...        formats.get("float8_e4m3fn"))
  Array([1.5, 0, -1.5, -0], dtype=float8_e4m3fn)
  """
  if isinstance(x, CodeArray):
    codes = x.codes
  elif fmt.bits == 8:
    codes = jax.lax.bitcast_convert_type(x, jnp.uint8)
  else:  # wide floats, and float4 (which CPU XLA can't bitcast)
    return jnp.concatenate([x, -x])
  flipped = codes ^ np.uint8(1 << (fmt.bits - 1))
  if not fmt.has_negative_zero:  # fnuz: the -0 code is NaN; zero stays zero
    flipped = jnp.where(codes == 0, codes, flipped)
  both = jnp.concatenate([codes, flipped])
  if isinstance(x, CodeArray):
    return CodeArray(both, fmt)
  return jax.lax.bitcast_convert_type(both, fmt.dtype)


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4, 5, 6))
def _perturbations_jit(key, popsize: int, shape: tuple[int, ...],
                       fmt_name: str, antithetic: bool, method_key: tuple,
                       block: int):
  # Imported on first trace: importing jaxfp8.es loads no sampler module.
  from jaxfp8._src.random import continuous  # pylint: disable=g-import-not-at-top
  fmt = formats.get(fmt_name)
  rows = popsize // 2 if antithetic else popsize

  def draw(k, n):
    # One draw for a block's rows, not a vmap over per-row keys: the
    # samplers' batch-level branches (a rare refinement) would become
    # per-row selects.
    eps = continuous.normal(k, (n, *shape), fmt.dtype, method=method_key[0])
    return mirror(eps, fmt) if antithetic else eps

  if block == rows:
    return draw(key, rows)
  out = _in_blocks(lambda t: _storage(draw(jax.random.fold_in(key, t), block),
                                      fmt),
                   rows // block, 2 if antithetic else 1, block, shape)
  return codes_lib.from_codes(out, fmt)


def perturbations(key: jax.Array, popsize: int, shape: Any,
                  dtype: Any = jnp.float8_e4m3fn, *, antithetic: bool = True,
                  method: str | None = None) -> Population:
  """Draws a population of standard normal perturbations in a narrow format.

  Without antithetic sampling this is ``jaxfp8.random.normal(key, (popsize,
  *shape), dtype, method=method)``; with it, the first half is that draw with
  ``popsize // 2`` rows and the second half its exact negation. A narrow
  half (or population) of more than :data:`BLOCK_ENTRIES` entries is drawn
  in ``steps`` blocks of :func:`block_rows` rows instead, so that the peak
  memory is the population (twice, for native fp8) plus one block's scratch:
  block ``t`` is that draw with the key ``jax.random.fold_in(key, t)`` and
  holds rows ``t, t + steps, ...`` of the half. Under a population-sharded
  ``jit`` each device draws only its own rows.

  Args:
    key: a PRNG key.
    popsize: the number of rows (population members); even if antithetic.
    shape: the shape of one member (an int or a sequence of ints).
    dtype: a signed narrow format (``"e4m3"``, ``jnp.float8_e5m2``,
      ``"float6_e2m3fn"``...) or a wide float dtype (drawn by
      ``jax.random.normal``).
    antithetic: if True (default), rows ``popsize // 2 + i`` are exactly the
      negation of rows ``i``: mirrored sampling, which halves the draws and
      cancels the even terms of the gradient estimate.
    method: the :func:`jaxfp8.random.normal` method for narrow formats
      (``"exact"``, ``"table"``, ``"cast"``; None for its default).

  Returns:
    An array of shape ``(popsize, *shape)`` in ``dtype`` (a
    :class:`jaxfp8.CodeArray` for formats XLA can't hold, such as float6).

  Raises:
    TypeError: for a bad key, popsize or shape.
    ValueError: for an odd popsize with antithetic=True, an unsigned format
      (E8M0), an unknown format or method, or a method with a wide dtype.

  >>> import jax, jaxfp8
  >>> eps = jaxfp8.es.perturbations(jax.random.key(0), 4, (3,), "e4m3")
  >>> eps.shape, eps.dtype
  ((4, 3), dtype(float8_e4m3fn))
  >>> bool((eps[2:] == -eps[:2]).all())
  True
  """
  fn = "perturbations"
  key = validate.check_single_key(key, fn)
  popsize = _check_popsize(popsize, antithetic, fn)
  shape = validate.check_shape(shape, fn)
  fmt = _population_format(dtype, fn)
  return _perturbations_jit(key, popsize, shape, fmt.name, bool(antithetic),
                            _check_method(method, fmt, fn),
                            _block(popsize, shape, fmt, antithetic))


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6, 7, 8))
def _sample_population_jit(key, mean, sigma, popsize: int, fmt_name: str,
                           antithetic: bool, rounding: str, method_key: tuple,
                           block: int):
  fmt = formats.get(fmt_name)
  key_eps, key_round = jax.random.split(key)
  rows = popsize // 2 if antithetic else popsize

  def candidates(k_eps, k_round, n):
    # n rows of the first half (and their mirror), as rows of perturbations.
    eps = _perturbations_jit(k_eps, 2 * n if antithetic else n, mean.shape,
                             fmt_name, antithetic, method_key, n)
    x = mean + sigma * as_float32(eps)
    if not fmt.narrow:
      return x.astype(fmt.dtype)
    rand = None
    if rounding == "stochastic":
      rand = jax.random.bits(k_round, x.shape, jnp.uint32)
    return rounding_lib.round_to(x, fmt, rounding=rounding, rand=rand)

  if block == rows:
    return candidates(key_eps, key_round, rows)

  def draw(t):
    return _storage(candidates(jax.random.fold_in(key_eps, t),
                               jax.random.fold_in(key_round, t), block), fmt)
  out = _in_blocks(draw, rows // block, 2 if antithetic else 1, block,
                   mean.shape)
  return codes_lib.from_codes(out, fmt)


def sample_population(key: jax.Array, mean: Any, sigma: Any, popsize: int,
                      dtype: Any = jnp.float8_e4m3fn, *,
                      antithetic: bool = True,
                      rounding: str = "nearest") -> Population:
  """Samples candidates ``mean + sigma * eps`` stored in a narrow format.

  With ``key_eps, key_round = jax.random.split(key)``, ``eps`` is
  ``perturbations(key_eps, popsize, mean.shape, dtype, antithetic=...)`` and
  the float32 sum is rounded once into ``dtype`` (saturating), like
  :func:`jaxfp8.cast`; stochastic rounding takes 32 bits per entry from
  ``jax.random.bits(key_round, (popsize, *mean.shape), jnp.uint32)``. A
  population drawn in blocks (see :func:`perturbations`) forms and rounds its
  candidates block by block, so no float32 population is ever held; block
  ``t``'s bits are then ``jax.random.bits(fold_in(key_round, t), ...)`` of the
  block's rows, both halves.

  Args:
    key: a PRNG key.
    mean: the centre of the population (any shape; float or narrow).
    sigma: the standard deviation: a scalar or an array broadcastable to
      ``mean.shape``.
    popsize: the number of candidates; even if antithetic.
    dtype: the storage format, as in :func:`perturbations`.
    antithetic: mirror the perturbations (see :func:`perturbations`).
    rounding: ``"nearest"`` (default) or ``"stochastic"`` (unbiased: the
      expected candidate is ``mean + sigma * eps``), or ``"down"``, ``"up"``,
      ``"toward_zero"``. Wide dtypes take ``"nearest"`` only.

  Returns:
    An array of shape ``(popsize, *mean.shape)`` in ``dtype`` (a
    :class:`jaxfp8.CodeArray` for float6).

  Raises:
    TypeError: for a bad key, popsize, mean or sigma.
    ValueError: as :func:`perturbations`, for an unknown rounding, or a sigma
      that does not broadcast to ``mean.shape`` or (concrete) holds a NaN or
      an infinity.

  >>> import jax, jax.numpy as jnp, jaxfp8
  >>> pop = jaxfp8.es.sample_population(jax.random.key(0), jnp.ones(5), 0.1, 8,
  ...                                   "e4m3", rounding="stochastic")
  >>> pop.shape, pop.dtype
  ((8, 5), dtype(float8_e4m3fn))
  """
  fn = "sample_population"
  key = validate.check_single_key(key, fn)
  popsize = _check_popsize(popsize, antithetic, fn)
  fmt = _population_format(dtype, fn)
  validate.check_choice(rounding, ROUNDINGS, "rounding", fn)
  if not fmt.narrow and rounding != "nearest":
    raise ValueError(f"`rounding` argument to `{fn}` must be 'nearest' for the "
                     f"wide dtype {fmt.name}, got {rounding!r}")
  validate.check_array(mean, "mean", fn)
  validate.check_array(sigma, "sigma", fn)
  _check_sigma(sigma, fn)
  mean, sigma = as_float32(mean), as_float32(sigma)
  if not _broadcasts_to(sigma.shape, mean.shape):
    raise ValueError(f"`sigma` argument to `{fn}` must broadcast to the mean's "
                     f"shape {mean.shape}, got shape {sigma.shape}")
  return _sample_population_jit(key, mean, sigma, popsize, fmt.name,
                                bool(antithetic), rounding,
                                _check_method(None, fmt, fn),
                                _block(popsize, mean.shape, fmt, antithetic))


def _check_sigma(sigma: Any, fn: str) -> None:
  """ValueError for a concrete sigma with a NaN or infinity (every candidate
  would be NaN or infinite); a traced sigma is not checked."""
  if isinstance(sigma, compat.Tracer) or (
      isinstance(sigma, CodeArray) and isinstance(sigma.codes, compat.Tracer)):
    return
  with jax.ensure_compile_time_eval():  # a Python sigma under the user's jit
    s = np.asarray(as_float32(sigma))
  ok = np.isfinite(s)
  if not np.all(ok):
    raise ValueError(f"`sigma` argument to `{fn}` must be finite, got "
                     f"{s if s.ndim == 0 else s[~ok][:4]}")


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

  def __post_init__(self):
    fn = "OpenAIES"
    _check_popsize(self.popsize, self.antithetic, fn)
    if self.popsize < 2:
      raise ValueError(f"`popsize` argument to `{fn}` must be at least 2, got "
                       f"{self.popsize}")
    fmt = _population_format(self.dtype, fn)
    _check_method(self.method, fmt, fn)
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
    mean = jnp.asarray(mean, jnp.float32)
    return ESState(mean, jnp.float32(self.sigma), self.optimizer.init(mean),
                   jnp.int32(0))

  def ask(self, key: jax.Array, state: ESState) -> Population:
    """The perturbations of a new population: ``(popsize, *mean.shape)``."""
    return perturbations(key, self.popsize, state.mean.shape, self.dtype,
                         antithetic=self.antithetic, method=self.method)

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
    if self.antithetic:  # eps[h + i] == -eps[i] exactly
      h = self.popsize // 2
      w, eps = w[:h] - w[h:], population[:h]
    ascent = jnp.tensordot(w, as_float32(eps), axes=1)
    grad = -ascent / (self.popsize * state.sigma)
    updates, opt_state = self.optimizer.update(grad, state.opt_state,
                                               state.mean)
    sigma = jnp.maximum(state.sigma * self.sigma_decay,
                        jnp.float32(self.sigma_min))
    return ESState(state.mean + updates, sigma, opt_state,
                   state.generation + 1)
