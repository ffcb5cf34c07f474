"""One GEMM of the recipe core: its two operands quantized, multiplied.

:func:`multiply` multiplies two :class:`Op` operands of one GEMM of
:mod:`jaxfp8._src.recipes.core` by the path their quantizers allow:

* both per tensor (kind ``"tensor"``, no transform): the narrow codes
  multiplied with float32 accumulation (``kernels.scaled_matmul.api.dot_general``:
  the Mosaic GPU fp8 kernel on compute capability 9.x), then the product
  rescaled by :func:`rescale` (finite wherever the exact result is).
* both MX in one format, block size and scale mode, no transform, the
  second operand rounded to nearest: one GEMM of
  :func:`jaxfp8._src.recipes.mx_gemm.gemm` on its backend.
* both fp8 blockwise with blocks of 128 along K (1x128 or 128x128), no
  batch dims, where :func:`jaxfp8._src.kernels.blockwise_matmul.api.blockwise_backend`
  picks the Mosaic GPU kernel (by default on compute capability 9.x): the
  fp8 codes and scales multiplied by :func:`jaxfp8.ops.blockwise_matmul`.
* otherwise the exact dequantized values multiplied in float32 at HIGHEST
  precision: in the operands' own layout where every quantizer is
  elementwise (``"cast"``, ``"tensor"``) or None, else in the GEMM's view
  (:func:`jaxfp8._src.recipes.operand.view`), transformed first where the
  quantizers say so.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.kernels.blockwise_matmul import api as blockwise_api
from jaxfp8._src.kernels.blockwise_matmul import mosaic_gpu as blockwise_kernel
from jaxfp8._src.kernels.blockwise_matmul import reference as blockwise_reference
from jaxfp8._src.kernels.scaled_matmul import api as scaled_api
from jaxfp8._src.recipes import mx_gemm as gemm_lib
from jaxfp8._src.recipes.mx_recipe import MXRecipe
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics.codes import CodeArray
from jaxfp8._src.numerics.codes import decode
from jaxfp8._src.mx import blockwise
from jaxfp8._src.mx import elements
from jaxfp8._src.recipes import operand
from jaxfp8._src.recipes.spec import Quantizer


def elementwise(q: Optional[Quantizer]) -> bool:
  """Quantized the same whatever the GEMM's axis (kept as codes)."""
  return q is not None and q.kind in ("tensor", "cast") and not q.transform


def same_elementwise(q: Optional[Quantizer],
                     q_next: Optional[Quantizer]) -> bool:
  """Whether an operand quantized by ``q`` in one GEMM holds the values
  ``q_next`` gives it in another: one elementwise quantizer in both (it
  takes no transform, so neither GEMM does: a GEMM's two operands take the
  same one)."""
  return elementwise(q) and q == q_next


def mx_pair(qa: Optional[Quantizer], qb: Optional[Quantizer]) -> bool:
  """Whether one MX GEMM of :mod:`jaxfp8._src.recipes.mx_gemm` multiplies them."""
  return (qa is not None and qb is not None and qa.kind == qb.kind == "mx"
          and (qa.format, qa.block, qa.scale) == (qb.format, qb.block, qb.scale)
          and not qa.transform and not qb.stochastic)


def mx_recipe(q: Quantizer) -> MXRecipe:
  """The MXRecipe :mod:`jaxfp8._src.recipes.mx_gemm` reads ``q``'s block from."""
  return MXRecipe(q.format, q.format, q.format, scale_mode=q.scale,
                  block_size=q.block_size)


_FP8 = tuple(np.dtype(d) for d in (jnp.float8_e4m3fn, jnp.float8_e5m2))


def blockwise_pair(qa: Optional[Quantizer], qb: Optional[Quantizer]) -> bool:
  """Whether :func:`jaxfp8.ops.blockwise_matmul` can multiply them: fp8
  blockwise quantizers of 128-long blocks along K, rounded to nearest."""
  return all(q is not None and q.kind == "block" and not q.transform
             and not q.stochastic and q.block in blockwise_reference.BLOCKS
             and np.dtype(formats.get(q.format).dtype) in _FP8
             for q in (qa, qb))


def _blockwise_kernel(a: Op, b: Op, dims, run: gemm_lib.Run):
  """The Mosaic GPU blockwise GEMM of two views, or None where it doesn't
  run (batch dims, or the backend says dequantize)."""
  (ac, bc), (ab, bb) = dims
  qa, qb = a.q, b.q
  fa, fb = (formats.get(q.format).dtype for q in (qa, qb))
  if ab or blockwise_api.blockwise_backend(
      jax.default_backend(), fa, fb, backend=run.backend) != "mosaic":
    return None
  quantized = []
  for o, batch, contract in ((a, ab, ac), (b, bb, bc)):
    quantized.append(blockwise.quantize(
        operand.view(o.x, batch, contract), block=o.q.block, fmt=o.q.format,
        scale=o.q.scale))
  (ca, sa), (cb, sb) = quantized
  out = blockwise_kernel.blockwise_matmul(
      ca, sa, cb, sb, a_block=qa.block, b_block=qb.block,
      out_dtype=jnp.float32, interpret=run.interpret)
  return operand.unview(out, a.shape, b.shape, dims)


def label(qa: Optional[Quantizer], qb: Optional[Quantizer]) -> Optional[str]:
  """The format :func:`jaxfp8._src.recipes.mx_gemm.trace_gemms` records."""
  fa, fb = (None if q is None else q.format for q in (qa, qb))
  return fa if fa == fb else f"{fa}*{fb}"


@dataclasses.dataclass(frozen=True)
class Op:
  """A GEMM operand: float32 values, and codes and scale where kept; with
  ``quantized``, ``x`` holds the values quantized already (another GEMM's,
  :func:`shares_quantized`)."""
  x: Any
  q: Optional[Quantizer]
  codes: Any = None
  scale: Any = None
  quantized: bool = False

  @property
  def shape(self) -> tuple[int, ...]:
    return tuple((self.x if self.x is not None else self.codes).shape)


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class KeptQuantized:
  """An operand's quantized values, in its own layout, kept for another
  GEMM that quantizes it alike (a residual of the core's custom VJP)."""
  values: Any

  def tree_flatten(self):
    return (self.values,), None

  @classmethod
  def tree_unflatten(cls, _, children):
    return cls(children[0])

  def op(self, q: Optional[Quantizer]) -> "Op":
    return Op(self.values, q, quantized=True)


def shares_quantized(q: Optional[Quantizer], q_next: Optional[Quantizer],
                contract) -> bool:
  """Whether an operand's quantized values in one GEMM are its quantized
  values in a GEMM that contracts its free dims instead: square blocks (the
  same tiles either way, and a tensor scale over the whole operand),
  quantized alike, without randomness, and contracting dims in order (the
  free ones are flattened in order)."""
  return (q is not None and q == q_next and q.kind in ("block", "nvfp4")
          and q.block[0] == q.block[1] and not q.stochastic
          and q.transform is None and list(contract) == sorted(contract))


def prepare(x32, q: Optional[Quantizer], state=None) -> Op:
  """``x32`` as an operand quantized by ``q``: elementwise quantizers
  quantize now (once per tensor), the others in the GEMM's view."""
  if elementwise(q):
    return Op(x32, q, *operand.quantize_tensor(x32, q, state))
  return Op(x32, q)


def _narrow(c):
  """A narrow operand XLA can multiply: 8-bit native formats as they are
  (decoded by bit operations on CPU, where XLA's dot would convert them,
  more slowly, itself); float4 (no CPU dot) and CodeArrays (float6) decoded
  to float32, exactly."""
  if isinstance(c, CodeArray):
    return decode(c, jnp.float32)
  if np.dtype(c.dtype).itemsize == 1 and formats.get(c.dtype).bits == 8:
    if jax.default_backend() == "cpu" and np.dtype(c.dtype) in _FP8:
      return elements.fp8_values(lax.bitcast_convert_type(c, jnp.uint8),
                                 formats.get(c.dtype))
    return c
  return c.astype(jnp.float32)


def _pow2(e: jax.Array) -> jax.Array:
  """2^e for int32 ``e`` in [-126, 127], built from its bits."""
  return lax.bitcast_convert_type((e + 127) << 23, jnp.float32)


def rescale(p: jax.Array, s_a: jax.Array, s_b: jax.Array) -> jax.Array:
  """``p * s_a * s_b`` for positive normal float32 scales, finite wherever
  the exact product is.

  Rounded as ``(p * s_a) * s_b`` (the bits the per-tensor GEMM always
  gave), but on the scales' significands: ``s = m * 2^e`` with ``m`` in
  [1, 2), so ``(p * m_a) * m_b`` can neither overflow nor underflow
  (``p`` is a sum of code products), and ``2^(e_a + e_b)`` is applied last
  in two exact power-of-two steps. ``p * s_a`` alone overflows for
  ``s_a`` near 1e36 where the product is 1e10 (``x`` 3e38 and ``w``
  1e-30), and ``s_a * s_b`` alone may overflow or underflow.
  """
  def split(s):
    bits = lax.bitcast_convert_type(jnp.asarray(s, jnp.float32), jnp.int32)
    exp = (bits >> 23) - 127
    mant = lax.bitcast_convert_type((bits & 0x7FFFFF) | (127 << 23),
                                    jnp.float32)
    return mant, exp
  (ma, ea), (mb, eb) = split(s_a), split(s_b)
  e = ea + eb  # in [-252, 254]: each half a normal power of two
  half = e >> 1
  return (p * ma) * mb * _pow2(half) * _pow2(e - half)


def _codes_dot(ca, cb, dims) -> jax.Array:
  a, b = _narrow(ca), _narrow(cb)
  if (a.dtype == jnp.float32) != (b.dtype == jnp.float32):
    a, b = a.astype(jnp.float32), b.astype(jnp.float32)
  return scaled_api.dot_general(a, b, dims, preferred_element_type=jnp.float32)


def _dot(a, b, dims) -> jax.Array:
  return lax.dot_general(a, b, dims, precision=lax.Precision.HIGHEST,
                         preferred_element_type=jnp.float32)


def _keys(key, n: int) -> list:
  if n <= 1:
    return [key] * n
  return list(jax.random.split(key, n))


def multiply(a: Op, b: Op, dims, run: gemm_lib.Run, key, *,
             keep_b: bool = False):
  """``dot_general(a, b, dims)`` of the quantized operands, float32; with
  ``keep_b``, ``(product, b's quantized values in its own layout, or None
  where the product didn't make them)``."""
  qa, qb = a.q, b.q
  out, b_values = None, None
  if a.quantized or b.quantized:
    pass  # values quantized already: multiplied as they are, below
  elif all(elementwise(q) and q.kind == "tensor" for q in (qa, qb)):
    out = rescale(_codes_dot(a.codes, b.codes, dims), a.scale, b.scale)
  elif mx_pair(qa, qb):
    out = gemm_lib.gemm(a.x, b.x, dims, qa.format, mx_recipe(qa), run,
                        key if qa.stochastic else None)
  elif blockwise_pair(qa, qb):
    out = _blockwise_kernel(a, b, dims, run)
  if out is None:
    out, b_values = _dequantized_product(a, b, dims, key)
  return (out, b_values) if keep_b else out


def dequantized_product(a: Op, b: Op, dims, key) -> jax.Array:
  """``dot_general(a, b, dims)`` of the exact dequantized values, float32 at
  HIGHEST: in the operands' own layout where every quantizer is elementwise
  or None or both are matrices with one contracting dim (quantized along
  it in place), else in the GEMM's view; transformed first where the
  quantizers say so. The product every other path of :func:`multiply` must
  equal up to summation order."""
  return _dequantized_product(a, b, dims, key)[0]


def _in_place(a: Op, b: Op, dims) -> bool:
  """Two matrices and one contracting dim each: quantized in their own
  layouts (no views, no transposes)."""
  (ac, bc), (ab, _) = dims
  return (not ab and len(ac) == len(bc) == 1 and len(a.shape) == 2
          and len(b.shape) == 2)


def _dequantized_product(a: Op, b: Op, dims, key):
  """:func:`dequantized_product`, and ``b``'s quantized values in its own
  layout (or None where ``b`` is not quantized here)."""
  qa, qb = a.q, b.q
  value = lambda o: (operand.dequantize_elementwise(o.codes, o.scale)
                     if o.codes is not None else o.x)
  transform = qa is not None and qa.transform or qb is not None and qb.transform
  if not transform and all(q is None or elementwise(q) for q in (qa, qb)):
    return _dot(value(a), value(b), dims), None
  stochastic = [o.q is not None and o.q.stochastic for o in (a, b)]
  keys = _keys(key, int(bool(transform)) + sum(stochastic))
  (ac, bc), (ab, bb) = dims
  signs = (operand.rht_signs(keys.pop(0)) if transform else None)
  quantizes = lambda o: (o.q is not None and not o.quantized
                         and (transform or not elementwise(o.q)))
  if _in_place(a, b, dims):
    out = []
    for o, axis, sr in ((a, ac[0], stochastic[0]), (b, bc[0], stochastic[1])):
      v = value(o)
      if transform and not o.quantized:
        v = operand.rht(v, signs, axis)
      if quantizes(o):
        v = operand.quantize_along(v, axis, o.q, keys.pop(0) if sr else None)
      out.append(v)
    return _dot(*out, dims), out[1]
  views = []
  for o, bd, cd, sr in ((a, ab, ac, stochastic[0]), (b, bb, bc, stochastic[1])):
    v = operand.view(value(o), bd, cd)
    if transform and not o.quantized:
      v = operand.rht(v, signs, -1)
    if quantizes(o):
      v = operand.quantize_view(v, o.q, keys.pop(0) if sr else None)
    views.append(v)
  out = operand.unview(operand.view_dot(*views, len(ab)), a.shape, b.shape,
                       dims)
  return out, operand.unview_operand(views[1], b.shape, bb, bc)


def record(name: str, pair, a, b) -> None:
  """Records the GEMM for :func:`jaxfp8._src.recipes.mx_gemm.trace_gemms`; ``a``,
  ``b``: arrays or :class:`Op`."""
  gemm_lib.record(name, label(*pair), a, b)
