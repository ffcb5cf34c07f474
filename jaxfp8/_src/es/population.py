"""The populations of an evolution strategy, drawn in narrow formats.

An evolution strategy draws a whole population of Gaussian perturbations every
generation. Stored in fp8 they take a quarter of float32's memory, and drawn
with :func:`jaxfp8.random.normal` each entry follows the exact rounded N(0, 1)
law of the chosen method, at a fraction of the cost of float32-then-cast.
:func:`perturbations` draws them, :func:`sample_population` the candidates
``mean + sigma * eps``; the optimizer that uses them is
:mod:`jaxfp8._src.es.openai_es`.

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
position, so under ``jax.jit`` with a population-axis ``NamedSharding`` the
values equal a single device's. What moves between devices depends on the
method: the ``"cast"`` method draws each device's rows on that device; the
exact method ranks its pooled random bytes over the whole draw and the
table method draws in a lane-major layout, so XLA moves population rows
between devices. ``perturbations(..., sharding=...)`` draws each shard's
rows on its own devices instead (its own key, its own antithetic pairs):
nothing moves, and the population depends on the shard count.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src import compat
from jaxfp8._src.numerics import codes as codes_lib
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import rounding as rounding_lib
from jaxfp8._src.numerics import validate
from jaxfp8._src.numerics.codes import as_float32
from jaxfp8._src.numerics.codes import CodeArray
from jaxfp8._src.numerics.rounding import ROUNDINGS

Population = Any  # jax.Array (float or native narrow) or jaxfp8.CodeArray

# The entries of one block's draw (per half of an antithetic population):
# 2^22 bounds a block's scratch (4 to 16 bytes an entry) and leaves blocks
# few enough that a blocked draw keeps the speed of one draw (the ES
# benchmark, docs/es.md).
BLOCK_ENTRIES = 1 << 22


def check_popsize(popsize: Any, antithetic: bool, fn: str) -> int:
  """``popsize`` as an int: positive, and even where ``antithetic``.

  Raises:
    TypeError: for a non-integer ``popsize``, naming ``fn``.
    ValueError: for a popsize below 1, or an odd one with ``antithetic``.
  """
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


def population_format(dtype: Any, fn: str) -> formats.Format:
  """The format of a population: a signed narrow format or a wide float."""
  fmt = formats.get(dtype, arg="dtype", fn=fn)
  if not fmt.signed:
    raise ValueError(f"`dtype` argument to `{fn}` must be a signed format "
                     f"(perturbations are symmetric about 0), got {fmt.name}")
  return fmt


def check_method(method: str | None, fmt: formats.Format, fn: str):
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
  >>> from jaxfp8._src.numerics import formats
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


def _row_axes(sharding: Any):
  """The mesh axes a sharding splits the rows over (None: not split)."""
  spec = tuple(sharding.spec)
  return spec[0] if spec else None


def check_sharding(sharding: Any, popsize: int, antithetic: bool,
                   fn: str) -> tuple[Any, int]:
  """``(sharding, shards)`` of a population's ``sharding`` argument: None
  (one shard), or a ``NamedSharding`` splitting only the rows (axis 0) into
  ``shards`` that each hold a whole population of their own (an even one
  when antithetic); else TypeError/ValueError."""
  if sharding is None:
    return None, 1
  if not isinstance(sharding, jax.sharding.NamedSharding):
    raise TypeError(f"`sharding` argument to `{fn}` must be None or a "
                    f"jax.sharding.NamedSharding, got "
                    f"{type(sharding).__name__}")
  if any(e is not None for e in tuple(sharding.spec)[1:]):
    raise ValueError(f"`sharding` argument to `{fn}` may split the rows "
                     f"(members) only, got the spec {sharding.spec}")
  axes = _row_axes(sharding)
  axes = () if axes is None else (axes,) if isinstance(axes, str) else axes
  shards = int(np.prod([sharding.mesh.shape[a] for a in axes],
                       dtype=np.int64))
  per = 2 if antithetic else 1
  if popsize % (shards * per):
    raise ValueError(f"`sharding` argument to `{fn}`: {shards} shards of "
                     f"the rows need a popsize that is a multiple of "
                     f"{shards * per} ({'even ' if antithetic else ''}"
                     f"populations of their own), got {popsize}")
  return sharding, shards


def _per_shard(draw, key: jax.Array, sharding: Any, *args):
  """``draw(key_s, *args)`` on each shard ``s`` of the rows, with ``key_s =
  fold_in(key, s)`` (``args`` whole on every shard), concatenated by shard:
  nothing crosses devices."""
  axes = _row_axes(sharding)
  if axes is None:  # one shard: rows not split
    return jax.lax.with_sharding_constraint(
        draw(jax.random.fold_in(key, 0), *args), sharding)

  def local(key, *args):
    return draw(jax.random.fold_in(key, jax.lax.axis_index(axes)), *args)

  whole = jax.sharding.PartitionSpec()
  return jax.shard_map(local, mesh=sharding.mesh,
                       in_specs=(whole,) * (1 + len(args)),
                       out_specs=jax.sharding.PartitionSpec(axes),
                       check_vma=False)(key, *args)


def perturbations(key: jax.Array, popsize: int, shape: Any,
                  dtype: Any = jnp.float8_e4m3fn, *, antithetic: bool = True,
                  method: str | None = None,
                  sharding: Any = None) -> Population:
  """Draws a population of standard normal perturbations in a narrow format.

  Without antithetic sampling this is ``jaxfp8.random.normal(key, (popsize,
  *shape), dtype, method=method)``; with it, the first half is that draw with
  ``popsize // 2`` rows and the second half its exact negation. A narrow
  half (or population) of more than :data:`BLOCK_ENTRIES` entries is drawn
  in ``steps`` blocks of :func:`block_rows` rows instead, so that the peak
  memory is the population (twice, for native fp8) plus one block's scratch:
  block ``t`` is that draw with the key ``jax.random.fold_in(key, t)`` and
  holds rows ``t, t + steps, ...`` of the half. Under a population-sharded
  ``jit`` only the ``"cast"`` method draws each device's rows on that
  device; the exact method pools its random bytes across the whole draw
  and the table method draws in a lane-major layout, so XLA moves the
  population between devices (docs/scaling_out.md has the bytes).

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
    sharding: a ``NamedSharding`` splitting the rows over ``S`` shards
      (its spec's first entry: mesh axes; the other entries None), for a
      population drawn where it lives: shard ``s`` holds rows ``[s * n,
      (s + 1) * n)``, ``n = popsize // S``, which are ``perturbations(
      fold_in(key, s), n, shape, dtype, ...)`` (with antithetic sampling its
      own pairs: its rows ``n // 2 + i`` negate its rows ``i``). No data
      moves between devices, whatever the method; the population depends
      on ``S`` (each entry still follows the method's law). None (default):
      one population by the rules above, however the caller shards it.

  Returns:
    An array of shape ``(popsize, *shape)`` in ``dtype`` (a
    :class:`jaxfp8.CodeArray` for formats XLA can't hold, such as float6).

  Raises:
    TypeError: for a bad key, popsize, shape, antithetic (not a bool) or
      sharding.
    ValueError: for an odd popsize with antithetic=True, an unsigned format
      (E8M0), an unknown format or method, a method with a wide dtype, a
      sharding that splits a member's axes, or a popsize its shards don't
      divide into (even) populations.

  >>> import jax, jaxfp8
  >>> eps = jaxfp8.es.perturbations(jax.random.key(0), 4, (3,), "e4m3")
  >>> eps.shape, eps.dtype
  ((4, 3), dtype(float8_e4m3fn))
  >>> bool((eps[2:] == -eps[:2]).all())
  True
  """
  fn = "perturbations"
  key = validate.check_single_key(key, fn)
  antithetic = validate.check_bool(antithetic, "antithetic", fn)
  popsize = check_popsize(popsize, antithetic, fn)
  shape = validate.check_shape(shape, fn)
  fmt = population_format(dtype, fn)
  method_key = check_method(method, fmt, fn)
  sharding, shards = check_sharding(sharding, popsize, antithetic, fn)
  n = popsize // shards
  block = _block(n, shape, fmt, antithetic)
  draw = lambda k: _perturbations_jit(k, n, shape, fmt.name, antithetic,
                                      method_key, block)
  if sharding is None:
    return draw(key)
  return _per_shard(draw, key, sharding)


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
                      antithetic: bool = True, rounding: str = "nearest",
                      sharding: Any = None) -> Population:
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
    sharding: as in :func:`perturbations`: shard ``s`` of the rows holds
      ``sample_population(fold_in(key, s), mean, sigma, popsize // S, ...)``,
      drawn on its own devices.

  Returns:
    An array of shape ``(popsize, *mean.shape)`` in ``dtype`` (a
    :class:`jaxfp8.CodeArray` for float6).

  Raises:
    TypeError: for a bad key, popsize, mean, sigma, antithetic or sharding.
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
  antithetic = validate.check_bool(antithetic, "antithetic", fn)
  popsize = check_popsize(popsize, antithetic, fn)
  fmt = population_format(dtype, fn)
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
  sharding, shards = check_sharding(sharding, popsize, antithetic, fn)
  n = popsize // shards
  method_key = check_method(None, fmt, fn)
  block = _block(n, mean.shape, fmt, antithetic)
  draw = lambda k, m, sd: _sample_population_jit(
      k, m, sd, n, fmt.name, antithetic, rounding, method_key, block)
  if sharding is None:
    return draw(key, mean, sigma)
  return _per_shard(draw, key, sharding, mean, sigma)


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
