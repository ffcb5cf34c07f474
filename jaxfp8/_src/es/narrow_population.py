"""Populations held as their narrow noise, members built where they are used.

An evolution strategy of the evosax kind turns standard normal noise ``z``
into candidates ``mean + std * z`` (or ``mean + std * (D * z)``, or a rotated
``D * z``, for the CMA-ES pair) and hands them to the user as float32: four
bytes a parameter, held from ``ask`` to ``tell``. :class:`NarrowPopulation`
holds ``z`` alone, in a narrow format (one byte a parameter for fp8), with
the few vectors that turn it into candidates; :func:`evaluate` builds each
member from its row of noise inside the user's mapped evaluation, in the
precision the user asked for, and ``tell`` rebuilds the float32 candidates
from the same noise. The wrapper of evosax strategies that makes these is
:mod:`jaxfp8._src.es.evosax_strategy`; this module needs no evosax.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import rounding as rounding_lib
from jaxfp8._src.numerics import validate
from jaxfp8._src.numerics.codes import as_float32
from jaxfp8._src.numerics.codes import CodeArray


def candidates(z: jax.Array, mean: jax.Array, std: jax.Array,
               d: jax.Array | None = None,
               b: jax.Array | None = None) -> jax.Array:
  """The float32 candidates of float32 noise ``z``, by evosax's formulas.

  ``mean + std * z`` (OpenAI-ES, SNES, PGPE, ARS); with ``d``,
  ``mean + std * (d * z)`` (Sep-CMA-ES); with ``d`` and ``b``,
  ``mean + std * ((z @ diag(d).T) @ b.T)`` (CMA-ES). The operations and
  their order are evosax 0.3's own ``ask``, so that the same noise gives the
  same bits. ``z`` is a row or a stack of rows.

  >>> candidates(jnp.array([1.0, -2.0]), jnp.array([0.5, 0.5]), 0.25)
  Array([0.75, 0.  ], dtype=float32)
  """
  if d is None:
    return mean + std * z
  if b is None:
    return mean + std * (d * z)
  return mean + std * ((z @ jnp.diag(d).T) @ b.T)


def member_format(dtype: Any, arg: str, fn: str) -> formats.Format:
  """The format members are built in: wide, or narrow and held by this JAX.

  ``arg`` is the name the public ``fn`` gives ``dtype`` (``dtype`` in
  :class:`NarrowPopulation`, ``population_dtype`` in ``EvosaxStrategy``).

  Raises:
    TypeError: for a dtype that is not a floating format.
    ValueError: for an unknown name, an unsigned format (E8M0) or one the
      installed JAX can't hold in arrays (a member must be an array of
      weights).
  """
  fmt = formats.get(dtype, arg=arg, fn=fn)
  if not fmt.signed:
    raise ValueError(f"`{arg}` argument to `{fn}` must be a signed format "
                     f"(members are weights of either sign), got {fmt.name}")
  if fmt.narrow and not fmt.native:
    raise ValueError(f"`{arg}` argument to `{fn}` must be a format this JAX "
                     f"({jax.__version__}) holds in arrays, so that members "
                     f"can be weights; got {fmt.name}")
  return fmt


def check_population(noise: Any, mean: Any, std: Any, d: Any, b: Any,
                     unravel: Any, fn: str) -> None:
  """Checks the parts of a population: ``noise`` a ``(popsize, num_dims)``
  array of a signed format; ``mean``, ``std`` and ``d`` arrays or scalars
  that broadcast to ``(num_dims,)``; ``b`` (with ``d`` only) of shape
  ``(num_dims, num_dims)``; ``unravel`` None or callable.

  Raises:
    TypeError: for a part of the wrong kind, naming ``fn`` and the argument.
    ValueError: for a part of the wrong shape, or ``b`` without ``d``.
  """
  if not isinstance(noise, (jax.Array, np.ndarray, CodeArray)):
    raise TypeError(f"`noise` argument to `{fn}` must be an array of shape "
                    f"(popsize, num_dims), got {type(noise).__name__}")
  try:
    fmt = formats.get(noise.dtype)
  except (TypeError, ValueError) as e:
    raise TypeError(f"`noise` argument to `{fn}` must be an array of a "
                    f"floating format, got {noise.dtype}") from e
  if not fmt.signed:
    raise ValueError(f"`noise` argument to `{fn}` must be of a signed format "
                     f"(noise is symmetric about 0), got {fmt.name}")
  if noise.ndim != 2:
    raise ValueError(f"`noise` argument to `{fn}` must have shape (popsize, "
                     f"num_dims), got shape {tuple(noise.shape)}")
  num_dims = noise.shape[1]
  for arg, x in (("mean", mean), ("std", std), ("d", d)):
    if x is None and arg == "d":
      continue
    validate.check_array(x, arg, fn)
    if np.shape(x) not in ((), (1,), (num_dims,)):
      raise ValueError(f"`{arg}` argument to `{fn}` must broadcast to "
                       f"(num_dims,) = ({num_dims},), the noise's rows, got "
                       f"shape {np.shape(x)}")
  if b is not None:
    if d is None:
      raise ValueError(f"`b` argument to `{fn}` (CMA-ES's eigenvectors) "
                       f"needs the axis scales `d`, got b without d")
    validate.check_array(b, "b", fn)
    if np.shape(b) != (num_dims, num_dims):
      raise ValueError(f"`b` argument to `{fn}` must have shape (num_dims, "
                       f"num_dims) = ({num_dims}, {num_dims}), got shape "
                       f"{np.shape(b)}")
  if unravel is not None and not callable(unravel):
    raise TypeError(f"`unravel` argument to `{fn}` must be None or callable, "
                    f"got {type(unravel).__name__}")


def to_member_dtype(x: jax.Array, fmt: formats.Format) -> jax.Array:
  """Float32 ``x`` in ``fmt``: rounded to nearest-even once, saturating."""
  if fmt.narrow:
    return rounding_lib.round_to(x, fmt)
  return x.astype(fmt.dtype)


@jax.tree_util.register_pytree_node_class
class NarrowPopulation:
  """A population held as its narrow noise; members are built on demand.

  Member ``i`` is :func:`candidates` of ``noise[i]`` (decoded exactly to
  float32) in float32, rounded once into ``dtype`` and unravelled into the
  solution's pytree. Between ``ask`` and ``tell`` only ``noise`` is
  population-sized: one byte a parameter for fp8 noise, where evosax holds
  four (float32 candidates). Evaluate with :func:`evaluate`, which builds the
  members inside its map; :meth:`members` materializes them all.

  A pytree (``noise``, ``mean``, ``std``, ``d``, ``b`` are its leaves), so it
  passes through ``jax.jit`` and ``lax.scan``; it is not a stack of members:
  ``jax.vmap`` over it maps the noise and the vectors alike.

  Attributes:
    noise: the standard normal noise ``z``, ``(popsize, num_dims)``, in a
      narrow format (a :class:`jaxfp8.CodeArray` for formats XLA can't hold).
    mean: the search distribution's centre, ``(num_dims,)`` float32.
    std: its scale, a scalar or ``(num_dims,)``.
    d: Sep-CMA-ES's and CMA-ES's axis scales ``D``, or None.
    b: CMA-ES's eigenvectors ``B``, ``(num_dims, num_dims)``, or None.
    dtype: the dtype members are built in.
    unravel: turns a flat member into the solution's pytree.

  Raises:
    TypeError: for a ``noise`` that is not an array of a floating format, a
      ``mean``, ``std``, ``d`` or ``b`` that is not an array or a scalar, an
      ``unravel`` that is not callable, or a ``dtype`` that is not a
      floating format.
    ValueError: for parts whose shapes don't fit the noise's ``(popsize,
      num_dims)``, a ``b`` without ``d``, unsigned noise, or a ``dtype``
      that is unsigned (E8M0), unknown or not held in arrays by this JAX.

  >>> import jax.numpy as jnp
  >>> pop = NarrowPopulation(jnp.array([[1, -1], [0.5, 2]], jnp.float8_e4m3fn),
  ...                        jnp.zeros(2), jnp.float32(0.1), dtype="bfloat16")
  >>> pop.shape, pop.members()
  ((2, 2), Array([[0.1, -0.1],
         [0.05, 0.2]], dtype=bfloat16))
  """

  def __init__(self, noise: Any, mean: jax.Array, std: jax.Array,
               d: jax.Array | None = None, b: jax.Array | None = None, *,
               dtype: Any = jnp.float32,
               unravel: Callable[[jax.Array], Any] | None = None):
    check_population(noise, mean, std, d, b, unravel, "NarrowPopulation")
    self.noise, self.mean, self.std, self.d, self.b = noise, mean, std, d, b
    self._fmt = member_format(dtype, "dtype", "NarrowPopulation")
    self.unravel = unravel

  @property
  def dtype(self) -> np.dtype:
    return np.dtype(self._fmt.dtype)

  def tree_flatten(self):
    return ((self.noise, self.mean, self.std, self.d, self.b),
            (self._fmt.name, self.unravel))

  @classmethod
  def tree_unflatten(cls, aux, children):
    out = object.__new__(cls)
    out.noise, out.mean, out.std, out.d, out.b = children
    out._fmt = formats.get(aux[0])  # pylint: disable=protected-access
    out.unravel = aux[1]
    return out

  @property
  def shape(self) -> tuple[int, ...]:
    """``(popsize, num_dims)``: the shape of the noise."""
    return tuple(self.noise.shape)

  def __len__(self) -> int:
    return self.shape[0]

  @property
  def nbytes(self) -> int:
    """Bytes held: the noise and the vectors that build the members."""
    return sum(int(x.nbytes) for x in jax.tree_util.tree_leaves(self))

  def member(self, noise_row: Any) -> Any:
    """The member of one row of noise (or a stack of rows), in ``dtype``."""
    x = candidates(as_float32(noise_row), self.mean, self.std, self.d, self.b)
    x = to_member_dtype(x, self._fmt)
    if self.unravel is None:
      return x
    if x.ndim == 1:
      return self.unravel(x)
    return jax.vmap(self.unravel)(x)

  def _rows(self) -> tuple[Any, Callable[[Any], Any]]:
    """The noise as uint8 codes where it is 8-bit, and the inverse.

    A map over rows slices its input; XLA on CPU slices fp8 arrays through
    a float16 copy of the whole array, uint8 ones in place.
    """
    noise = self.noise
    if isinstance(noise, CodeArray):
      return noise.codes, lambda codes: CodeArray(codes, noise.format)
    if formats.is_narrow(noise.dtype) and formats.get(noise.dtype).bits == 8:
      return (jax.lax.bitcast_convert_type(noise, jnp.uint8),
              lambda codes: jax.lax.bitcast_convert_type(codes, noise.dtype))
    return noise, lambda rows: rows

  def members(self) -> Any:
    """Every member at once: the solution's pytree with a leading popsize
    axis, in ``dtype``. Holds the whole population in ``dtype``; prefer
    :func:`evaluate`, which builds members inside its map."""
    return self.member(self.noise)

  def __repr__(self) -> str:
    return (f"NarrowPopulation(shape={self.shape}, noise={self.noise.dtype}, "
            f"members={self._fmt.name})")


def evaluate(fn: Callable[..., Any], population: Any, *xs: Any,
             batch_size: int | None = None) -> Any:
  """Maps ``fn`` over a population's members, building each inside the map.

  ``fn(member, *x_i)`` for every member, as ``jax.vmap(fn)(members, *xs)``
  would give, where ``xs`` are per-member arrays (rollout keys, ...) mapped
  along their first axis. A :class:`NarrowPopulation`'s members are built
  from their rows of noise inside the map, so no float32 population is an
  input. Mapped all at once (``jax.vmap``), XLA still builds every member
  for the batched evaluation, as a stack of members would be; with
  ``batch_size``, ``jax.lax.map`` evaluates ``batch_size`` members a step
  and holds only those (and a copy of the noise: the loop's input). Any
  other population (a pytree of stacked members) is mapped as it is.

  Args:
    fn: the function of one member (and one row of each of ``xs``).
    population: a :class:`NarrowPopulation`, or stacked members.
    *xs: arrays (or pytrees) with a leading popsize axis.
    batch_size: members per step of a sequential map; None maps all at once.

  Returns:
    ``fn``'s outputs stacked along a leading popsize axis.

  Raises:
    TypeError: for a ``fn`` that is not callable, a ``population`` that is
      neither a NarrowPopulation nor stacked arrays, or a bad
      ``batch_size``.
    ValueError: for ``xs`` whose leading axis is not the popsize.

  >>> import jax.numpy as jnp
  >>> pop = NarrowPopulation(jnp.array([[1, -1], [0.5, 2]], jnp.float8_e4m3fn),
  ...                        jnp.zeros(2), jnp.float32(0.1))
  >>> evaluate(lambda m, w: jnp.sum(m) * w, pop, jnp.array([1.0, 10.0]))
  Array([0. , 2.5], dtype=float32)
  """
  fn_name = "evaluate"
  if not callable(fn):
    raise TypeError(f"`fn` argument to `{fn_name}` must be callable, got "
                    f"{type(fn).__name__}")
  if batch_size is not None and (isinstance(batch_size, bool) or not
                                 isinstance(batch_size, (int, np.integer))
                                 or batch_size < 1):
    raise TypeError(f"`batch_size` argument to `{fn_name}` must be None or an "
                    f"int >= 1, got {batch_size!r}")
  if isinstance(population, NarrowPopulation):
    rows, to_noise = population._rows()  # pylint: disable=protected-access
    build = lambda r: population.member(to_noise(r))
  else:
    rows, build = population, lambda member: member
  leaves = jax.tree_util.tree_leaves(rows)
  if not leaves or any(not hasattr(l, "shape") or not hasattr(l, "dtype")
                       or not np.shape(l) for l in leaves):
    raise TypeError(f"`population` argument to `{fn_name}` must be a "
                    f"NarrowPopulation or a pytree of arrays stacked along a "
                    f"leading popsize axis, got {type(population).__name__}")
  n = leaves[0].shape[0]
  for i, x in enumerate(xs):
    for leaf in jax.tree_util.tree_leaves(x):
      if not np.shape(leaf) or np.shape(leaf)[0] != n:
        raise ValueError(f"`xs[{i}]` argument to `{fn_name}` must have a "
                         f"leading axis of the popsize {n}, got shape "
                         f"{np.shape(leaf)}")
  if batch_size is None:
    return jax.vmap(lambda r, *a: fn(build(r), *a))(rows, *xs)
  return jax.lax.map(lambda ra: fn(build(ra[0]), *ra[1:]), (rows, *xs),
                     batch_size=int(batch_size))
