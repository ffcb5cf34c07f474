"""MX (OCP Microscaling v1.0) block formats and NVFP4: the array and its API.

An :class:`MXArray` holds a tensor as blocks of ``block_size`` consecutive
elements along one axis; each block stores one shared scale and narrow
elements, and a value is ``element * scale``. :func:`quantize` and
:func:`dequantize` check their arguments here; the spec-exact arithmetic is
:mod:`jaxfp8._src.mx.quantize`, and the table of formats
:mod:`jaxfp8._src.mx.formats`.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src import compat
from jaxfp8._src.mx import elements as elements_lib
from jaxfp8._src.mx import pack as mx_pack
from jaxfp8._src.mx import quantize as mx_quantize
from jaxfp8._src.mx import scales as scales_lib
from jaxfp8._src.mx import view as mx_view
from jaxfp8._src.mx.formats import get_format
from jaxfp8._src.mx.formats import MXFormat
from jaxfp8._src.mx.scales import ScaleMode
from jaxfp8._src.numerics import decode_grad
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import rounding as rounding_lib
from jaxfp8._src.numerics import validate


# -- the array type ------------------------------------------------------------

@jax.tree_util.register_pytree_node_class
class MXArray:
  """A tensor in a block-scaled format: packed elements plus per-block scales.

  Layout (what kernels read):

  * ``data``: the elements, with the blocked axis where it is in the logical
    shape. mxfp8: a native ``float8_e4m3fn``/``float8_e5m2`` array of the
    (padded) logical shape; mxint8: an ``int8`` array of that shape (value =
    int / 64); fp6: uint8, four elements in three bytes along the blocked
    axis; fp4 and nvfp4: uint8, two elements per byte (element ``2i`` in the
    low nibble). Layouts are drawn in ``docs/mx.md``.
  * ``scales``: uint8 scale codes, the logical shape with the blocked axis
    divided by ``block_size`` (rounded up). E8M0 for MX (scale =
    2^(code - 127), 0xFF = NaN); E4M3 codes for nvfp4.
  * ``tensor_scale``: nvfp4 only, a float32 power of two per tensor (None for
    MX formats). value = element * scale * tensor_scale.

  Static (pytree aux) data: ``fmt`` (an :class:`MXFormat`), ``axis`` (the
  blocked axis, negative), ``length`` (logical length of the blocked axis,
  before padding) and ``block_size``. The logical shape is derived from
  ``scales``, so leading batch axes added by ``vmap`` are picked up.

  >>> import jax.numpy as jnp
  >>> a = quantize(jnp.array([[960.0, 2.0, -4.0, 3.0] * 8]), "mxfp8_e4m3")
  >>> a
  MXArray(mxfp8_e4m3, shape=(1, 32), axis=-1, block_size=32)
  >>> a.scales, a.data[0, :4], a.dequantize()[0, :4]
  (Array([[128]], dtype=uint8), Array([448, 1, -2, 1.5], dtype=float8_e4m3fn),
   Array([896.,   2.,  -4.,   3.], dtype=float32))
  """

  __slots__ = ("data", "scales", "tensor_scale", "fmt", "axis", "length",
               "block_size", "_source", "_carried")

  def __init__(self, data, scales, fmt, *, axis: int, length: int,
               block_size: int, tensor_scale=None):
    self.data, self.scales, self.tensor_scale = data, scales, tensor_scale
    self.fmt = get_format(fmt, fn="MXArray")
    self.axis, self.length, self.block_size = int(axis), int(length), int(
        block_size)
    self._source, self._carried = None, False
    if self.axis >= 0:
      raise ValueError("`axis` of MXArray is stored as a negative index, got "
                       f"{axis}")

  def tree_flatten(self):
    # A traced source is a fourth child, so the straight-through gradient
    # crosses jit, vmap, scan and tree_map boundaries with the storage (as a
    # non-child it was dropped there, and the gradient came out zero).
    children = decode_grad.source_children(
        (self.data, self.scales, self.tensor_scale), self._source,
        carried=self._carried)
    return children, (self.fmt.name, self.axis, self.length, self.block_size)

  @classmethod
  def tree_unflatten(cls, aux, children):
    obj = object.__new__(cls)
    obj.data, obj.scales, obj.tensor_scale = children[:3]
    obj.fmt = get_format(aux[0])
    obj.axis, obj.length, obj.block_size = aux[1:]
    obj._source = decode_grad.source_from_children(children[3:])
    obj._carried = obj._source is not None  # it crossed in as a child
    return obj

  @property
  def shape(self) -> tuple[int, ...]:
    """The logical shape (what :meth:`dequantize` returns)."""
    shape = list(self.scales.shape)
    shape[self.axis] = self.length
    return tuple(shape)

  @property
  def ndim(self) -> int:
    return len(self.scales.shape)

  @property
  def size(self) -> int:
    return int(np.prod(self.shape, dtype=np.int64))

  @property
  def dtype(self) -> np.dtype:
    """The element dtype (``float4_e2m1fn``, ``float6_e2m3fn``, ``int8``...)."""
    return self.fmt.dtype

  @property
  def nbytes(self) -> int:
    """Bytes held: packed elements, scale codes and the tensor scale."""
    n = _nbytes(self.data) + _nbytes(self.scales)
    return n + (0 if self.tensor_scale is None else _nbytes(self.tensor_scale))

  def dequantize(self, dtype: Any = jnp.float32) -> jax.Array:
    """The values ``element * scale`` (see :func:`dequantize`)."""
    return dequantize(self, dtype)

  @property
  def T(self) -> "MXArray":  # pylint: disable=invalid-name
    """The axes reversed (see :meth:`transpose`)."""
    return self.transpose()

  def transpose(self, *axes: Any) -> "MXArray":
    """Permutes the axes; the blocked axis moves with its blocks.

    >>> import jax.numpy as jnp
    >>> a = quantize(jnp.ones((64, 3)), "mxfp4_e2m1", axis=0)
    >>> a.T
    MXArray(mxfp4_e2m1, shape=(3, 64), axis=-1, block_size=32)
    """
    return mx_view.transpose(self, axes)

  def reshape(self, *shape: Any) -> "MXArray":
    """Regroups the axes before and after the blocked axis (which stays).

    >>> import jax.numpy as jnp
    >>> quantize(jnp.ones((2, 3, 64)), "mxfp8_e4m3").reshape(6, 64)
    MXArray(mxfp8_e4m3, shape=(6, 64), axis=-1, block_size=32)
    """
    return mx_view.reshape(self, shape)

  def __getitem__(self, index: Any) -> "MXArray":
    """Indexing of the unblocked axes; block-aligned slices of the blocked one.

    >>> import jax.numpy as jnp
    >>> quantize(jnp.ones((4, 96)), "mxfp6_e2m3")[1, 32:]
    MXArray(mxfp6_e2m3, shape=(64,), axis=-1, block_size=32)
    """
    return mx_view.getitem(self, index)

  def __len__(self) -> int:
    return self.shape[0]

  def __iter__(self):
    """Iterates over the first axis (which must not be the blocked one)."""
    return (self[i] for i in range(len(self)))

  def with_storage(self, data, scales, tensor_scale, *, axis: int,
                   length: int, source: Any = None) -> "MXArray":
    """A new MXArray of this format and block size from storage arrays.

    ``source``, when given, is the float32 array whose straight-through
    gradient :func:`dequantize` passes on (see :func:`quantize`).
    """
    out = MXArray(data, scales, self.fmt, axis=axis, length=length,
                  block_size=self.block_size, tensor_scale=tensor_scale)
    out._source = source
    out._carried = self._carried and source is not None
    return out

  @property
  def source(self) -> Any:
    """The traced float32 array this MXArray was quantized from, or None.

    Set by :func:`quantize` when ``x`` is traced (under ``grad``, ``jit``,
    ``vmap``); :func:`dequantize` differentiates as the identity in it. It
    travels as a pytree child while it is traced: into ``jit``, ``vmap``
    and ``scan`` and through ``tree_map``. One made inside the body of a
    ``jit``, ``scan``, ``cond`` or ``checkpoint`` stays there (no float32
    output beside the codes), and differentiating the storage it leaves
    with raises ``TypeError``: dequantize inside, or quantize outside.
    """
    return self._source

  def __repr__(self) -> str:
    return (f"MXArray({self.fmt.name}, shape={self.shape}, axis={self.axis}, "
            f"block_size={self.block_size})")


def _nbytes(x) -> int:
  return int(np.prod(x.shape, dtype=np.int64)) * np.dtype(x.dtype).itemsize


# -- quantize / dequantize -----------------------------------------------------

def _check_block_size(block_size, mx: MXFormat, fn: str) -> int:
  if block_size is None:
    return mx.block_size
  if (isinstance(block_size, bool)
      or not isinstance(block_size, (int, np.integer)) or block_size < 1):
    raise ValueError(f"`block_size` argument to `{fn}` must be a positive "
                     f"integer, got {block_size!r}")
  per = mx_pack.GROUPS[mx.bits][0]
  if block_size % per:
    raise ValueError(f"`block_size` argument to `{fn}` must be a multiple of "
                     f"{per} for {mx.name} ({per} elements share a packed "
                     f"group), got {block_size}")
  return int(block_size)


def check_axis(axis: Any, ndim: int, *, fn: str) -> int:
  """The blocked axis of an array with ``ndim`` dimensions, as a negative index.

  Args:
    axis: an axis index (negative counts from the end).
    ndim: the array's rank (at least 1).
    fn: the public function, for error messages.

  Returns:
    The axis as an int in ``[-ndim, -1]`` (how :class:`MXArray` stores it).

  Raises:
    ValueError: for a scalar array, or an axis that is not an int in range.

  >>> check_axis(1, 3, fn="quantize")
  -2
  """
  if ndim == 0:
    raise ValueError(f"`x` argument to `{fn}` must have at least one axis to "
                     "block, got a scalar")
  if (isinstance(axis, bool) or not isinstance(axis, (int, np.integer))
      or not -ndim <= axis < ndim):
    raise ValueError(f"`axis` argument to `{fn}` must be an axis of an array "
                     f"with {ndim} dimensions, got {axis!r}")
  return int(axis) % ndim - ndim


def quantize(x: Any, fmt: str | MXFormat, *, block_size: int | None = None,
             axis: int = -1, scale_mode: ScaleMode = "floor",
             rounding: str = "nearest", key: jax.Array | None = None,
             pad: bool = False) -> MXArray:
  """Quantizes ``x`` into a block format, spec-exact.

  Each run of ``block_size`` consecutive elements along ``axis`` shares one
  scale chosen from the block's largest magnitude ``amax``; elements are
  ``x / scale`` rounded (to nearest even by default) and saturated to the
  element format's largest value.

  Scale modes for MX formats (scale = 2^k, emax = floor(log2(element max))):

  * ``"floor"`` (OCP MX v1.0): k = floor(log2 amax) - emax. The largest
    element may saturate: in mxfp8_e4m3 a block with amax 960 gets scale 2,
    960 / 2 = 480 saturates to 448, and 960 decodes to 896.
  * ``"rceil"``: the smallest 2^k with amax <= max * 2^k; never saturates
    (960 -> scale 4, decodes to 960).
  * ``"ceil"``: k = ceil(log2 amax) - emax; never saturates, may waste up to
    one binade (960 -> scale 4).
  * ``"even"``: like floor after rounding amax to the element's mantissa
    width (half up), so amax just below a power of two moves up a binade
    (960 = 1.875 * 2^9 stays in its binade in e4m3: scale 2, 896; 1000 moves:
    scale 4).

  k is clamped to E8M0's range [-127, 127]. An all-zero block gets the
  smallest scale (code 0, 2^-127) and decodes to zeros; a block holding any
  NaN or Inf gets scale code 0xFF and decodes to NaN in every element.

  ``nvfp4`` (blocks of 16, E4M3 scales): the per-tensor scale is the power of
  two 2^j, the smallest with amax <= 6 * 448 * 2^j, amax taken over the
  blocks without NaN or Inf. It is always a power of two, which keeps every
  step exact; NVIDIA's recipe uses amax / 2688 instead, within a factor 2
  (``docs/mx.md`` shows how to use such a scale). Block scales are
  amax / (6 * 2^j) rounded into E4M3: down for ``"floor"``, up for
  ``"ceil"`` and ``"rceil"``, to nearest for ``"even"``.
  A block with NaN or Inf gets the E4M3 NaN scale (0x7F).

  Gradients: ``quantize(x, ...).dequantize()`` (and ``mx.matmul`` of the
  result) differentiates as the identity in ``x`` (straight-through), also
  for elements that saturated or rounded to zero, like ``jaxfp8.cast``. The
  MXArray keeps the traced ``x`` for this; a pytree round trip (a ``jit``
  boundary between quantize and dequantize) drops it, and differentiating
  storage without it raises ``TypeError`` instead of giving zeros.

  Args:
    x: real array (float32 is exact; other dtypes are converted to float32).
    fmt: ``"mxfp8_e4m3"``, ``"mxfp8_e5m2"``, ``"mxfp6_e2m3"``,
      ``"mxfp6_e3m2"``, ``"mxfp4_e2m1"``, ``"mxint8"`` or ``"nvfp4"``.
    block_size: elements per block; None for the format's own (32, or 16
      for nvfp4). fp4 needs an even size, fp6 a multiple of 4.
    axis: the axis cut into blocks.
    scale_mode: ``"floor"``, ``"rceil"``, ``"ceil"`` or ``"even"``.
    rounding: element rounding: ``"nearest"`` (ties to even) or
      ``"stochastic"`` (with ``key``; up with probability equal to the
      fraction of the gap). Elements always saturate.
    key: PRNG key for stochastic rounding (32 random bits per element).
    pad: if the axis length is not a multiple of ``block_size``, pad the last
      block with zeros (the logical shape is kept). Without it such lengths
      raise ``ValueError``.

  Returns:
    An :class:`MXArray`.

  Raises:
    ValueError: unknown format, scale mode or rounding; bad block size or
      axis; an axis length that is not a multiple of the block size without
      ``pad=True``; stochastic rounding without a key.
    TypeError: non-numeric ``x`` or a bad key.

  >>> import jax.numpy as jnp
  >>> x = jnp.array([960.0, 3.0, -1.0, 0.0] * 8)
  >>> quantize(x, "mxfp8_e4m3").dequantize()[:3]
  Array([896.,   3.,  -1.], dtype=float32)
  >>> quantize(x, "mxfp8_e4m3", scale_mode="rceil").dequantize()[:3]
  Array([960.,   3.,  -1.], dtype=float32)
  >>> a = quantize(jnp.ones(4096), "mxfp4_e2m1")
  >>> a.data.nbytes, a.scales.nbytes
  (2048, 128)
  """
  fn = "quantize"
  mx = get_format(fmt, fn=fn)
  validate.check_choice(scale_mode, scales_lib.SCALE_MODES, "scale_mode",
                        fn)
  validate.check_choice(rounding, elements_lib.ROUNDINGS, "rounding", fn)
  x32 = rounding_lib.to_float32(x, fn=fn)
  axis = check_axis(axis, x32.ndim, fn=fn)
  block_size = _check_block_size(block_size, mx, fn)
  n = x32.shape[axis]
  if n % block_size and not pad:
    raise ValueError(
        f"`quantize`: axis {axis} of `x` has length {n}, not a multiple of "
        f"block_size={block_size}; pass pad=True to pad the last block with "
        "zeros")
  rand = rounding_lib.stochastic_bits(rounding, key, x32.shape, fn=fn)
  data, scales, tensor_scale = mx_quantize.quantize_blocks(
      x32, mx, block_size=block_size, axis=axis, scale_mode=scale_mode,
      rounding=rounding, rand=rand)
  out = MXArray(data, scales, mx, axis=axis, length=n, block_size=block_size,
                tensor_scale=tensor_scale)
  if isinstance(x32, compat.Tracer):
    out._source = x32  # pylint: disable=protected-access
  return out


def dequantize(a: MXArray, dtype: Any = jnp.float32) -> jax.Array:
  """Decodes an :class:`MXArray` to ``dtype``: ``element * scale``, exactly.

  The float32 result is the exact value rounded to nearest even (only values
  below float32's normal range round, and beyond its range give Inf),
  computed with integer exponent arithmetic so XLA's flushing of float32
  subnormals cannot touch it. Other dtypes are rounded from float32.
  Blocks with a NaN scale decode to NaN in every element.

  Args:
    a: the :class:`MXArray`.
    dtype: a floating dtype or format name the installed JAX holds, read
      as :func:`jaxfp8._src.numerics.formats.get_dtype` reads it, so every
      registry alias works (``"bf16"``, ``"f16"``, ``"e4m3"``): float32 by
      default or for None; float64 where x64 is on; bfloat16, float16 and float8
      types, rounded from float32 by XLA's conversion; float4 (and float6
      where the installed JAX holds it) to nearest even, saturating.

  Returns:
    A ``jax.Array`` of ``a.shape`` and ``dtype``.

  Raises:
    TypeError: for a non-MXArray ``a`` or a non-floating ``dtype``.
    ValueError: for an unknown dtype name (also NumPy codes such as
      ``"f4"``, which the format registry refuses as ambiguous).
    NotImplementedError: for float6 dtypes, which XLA can't hold; their codes
      are ``jaxfp8.encode(a.dequantize(), "float6_e2m3fn")``.

  >>> import jax.numpy as jnp
  >>> a = quantize(jnp.full((32,), 2.0**-130), "mxfp8_e4m3")
  >>> float(dequantize(a)[0]) == 2.0**-130
  True
  """
  if not isinstance(a, MXArray):
    raise TypeError(f"`a` argument to `dequantize` must be an MXArray, got "
                    f"{type(a).__name__}")
  dtype = _check_dtype(dtype, "dequantize")
  leaves = (a.data, a.scales, a.tensor_scale)
  source = a.source
  if source is None:
    leaves = _no_gradient_leaves(*leaves)
  else:
    leaves = jax.tree_util.tree_map(lax.stop_gradient, leaves)
  out = mx_quantize.dequantize_blocks(
      *leaves, a.fmt, axis=a.axis, length=a.length, block_size=a.block_size)
  if source is not None:
    try:
      out = decode_grad.straight_through(source, out)
    except jax.errors.UnexpectedTracerError as e:
      raise ValueError(
          "`dequantize`: this MXArray was quantized inside a transformation "
          "(jit, vmap, grad) that has finished, so its straight-through "
          "gradient source is gone; dequantize it inside the same "
          "transformation, or use mx.fake_quantize") from e
  if dtype == np.float32:
    return out
  if formats.is_narrow(dtype):
    fmt = formats.get(dtype)
    if not (fmt.has_inf or fmt.has_nan):
      # float4/float6: saturate, as XLA's float4 convert does; its float6
      # convert (where the installed JAX holds float6) gives 0 beyond max.
      return rounding_lib.round_to(out, fmt)
  return out.astype(dtype)


def no_gradient(a: MXArray) -> MXArray:
  """``a`` whose storage raises ``TypeError`` when differentiated.

  For ops that read an MXArray's storage without its straight-through
  source: integers carry no gradient, and silent zeros would stop training.
  """
  data, scales, ts = _no_gradient_leaves(a.data, a.scales, a.tensor_scale)
  return a.with_storage(data, scales, ts, axis=a.axis, length=a.length)


@jax.custom_jvp
def _no_gradient_leaves(data, scales, tensor_scale):
  """The storage unchanged; differentiating it raises (it has no source)."""
  return data, scales, tensor_scale


@_no_gradient_leaves.defjvp
def _no_gradient_jvp(primals, tangents):
  del primals, tangents
  raise TypeError(
      "MX storage carries no gradient: this MXArray was not quantized from a "
      "traced array in the function being differentiated (packed data and "
      "scale codes are integers); call mx.quantize inside the "
      "differentiated function, or use mx.fake_quantize (straight-"
      "through by construction) or a recipe of jaxfp8.recipes.dot_general")


def _check_dtype(dtype: Any, fn: str) -> np.dtype:
  """A floating result dtype the backend holds (names and aliases too)."""
  if dtype is None:
    return np.dtype(np.float32)
  # The registry holds floating formats only: integer dtypes raise TypeError.
  dt = formats.get_dtype(dtype, arg="dtype", fn=fn)
  if formats.is_narrow(dt) and not formats.get(dt).native:
    raise NotImplementedError(
        f"`dtype` argument to `{fn}`: the installed XLA can't hold {dt.name} "
        f"arrays; dequantize to a wide float, or take the codes with "
        f"jaxfp8.encode(a.dequantize(), {dt.name!r})")
  return dt
