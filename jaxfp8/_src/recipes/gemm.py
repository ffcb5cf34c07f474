"""One GEMM of the recipe core: its two operands quantized, multiplied.

:func:`multiply` multiplies two :class:`Op` operands of one GEMM of
:mod:`jaxfp8._src.recipes.core` by the path their quantizers allow:

* both per tensor (kind ``"tensor"``, no transform): the narrow codes
  multiplied with float32 accumulation (``kernels.scaled_matmul.api.dot_general``:
  the Mosaic GPU fp8 kernel on compute capability 9.x), then the product by one
  scale and then the other (``s_a * s_b`` alone may overflow where the
  result won't).
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
  """A GEMM operand: float32 values, and codes and scale where kept, or
  the quantized GEMM view (``view``, of an operand of ``view_of`` shape)
  another GEMM made of it (:func:`shares_view`)."""
  x: Any
  q: Optional[Quantizer]
  codes: Any = None
  scale: Any = None
  view: Any = None
  view_of: Optional[tuple[int, ...]] = None

  @property
  def shape(self) -> tuple[int, ...]:
    if self.view is not None:
      return self.view_of
    return tuple((self.x if self.x is not None else self.codes).shape)


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class KeptView:
  """A quantized GEMM view kept for another GEMM (a residual of the core's
  custom VJP), and the shape of the operand it is a view of."""
  view: Any
  shape: tuple[int, ...]

  def tree_flatten(self):
    return (self.view,), self.shape

  @classmethod
  def tree_unflatten(cls, shape, children):
    return cls(children[0], shape)

  def op(self, q: Optional[Quantizer]) -> "Op":
    return Op(None, q, view=self.view, view_of=self.shape)


def shares_view(q: Optional[Quantizer], q_next: Optional[Quantizer],
                contract) -> bool:
  """Whether the quantized view of an operand in one GEMM, its last two
  axes swapped, is its quantized view in a GEMM that contracts its free
  dims instead: square blocks (the same tiles either way, and a tensor
  scale over the whole operand), quantized alike, without randomness, and
  contracting dims in order (the free ones are flattened in order)."""
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
             keep_view: bool = False):
  """``dot_general(a, b, dims)`` of the quantized operands, float32; with
  ``keep_view``, ``(product, b's quantized view or None)``."""
  qa, qb = a.q, b.q
  out, view = None, None
  if all(elementwise(q) and q.kind == "tensor" for q in (qa, qb)):
    out = _codes_dot(a.codes, b.codes, dims) * a.scale * b.scale
  elif mx_pair(qa, qb):
    out = gemm_lib.gemm(a.x, b.x, dims, qa.format, mx_recipe(qa), run,
                        key if qa.stochastic else None)
  elif blockwise_pair(qa, qb):
    out = _blockwise_kernel(a, b, dims, run)
  if out is None:
    out, view = _dequantized_product(a, b, dims, key)
  return (out, view) if keep_view else out


def dequantized_product(a: Op, b: Op, dims, key) -> jax.Array:
  """``dot_general(a, b, dims)`` of the exact dequantized values, float32 at
  HIGHEST: in the operands' own layout where every quantizer is elementwise
  or None, else in the GEMM's view, transformed first where the quantizers
  say so. The product every other path of :func:`multiply` must equal up
  to summation order."""
  return _dequantized_product(a, b, dims, key)[0]


def _dequantized_product(a: Op, b: Op, dims, key):
  """:func:`dequantized_product`, and ``b``'s quantized view where it made
  one (else None)."""
  qa, qb = a.q, b.q
  value = lambda o: (operand.dequantize_elementwise(o.codes, o.scale)
                     if o.codes is not None else o.x)
  transform = qa is not None and qa.transform or qb is not None and qb.transform
  if not transform and all(q is None or elementwise(q) for q in (qa, qb)):
    return _dot(value(a), value(b), dims), None
  stochastic = [o.q is not None and o.q.stochastic for o in (a, b)]
  keys = _keys(key, int(bool(transform)) + sum(stochastic))
  (ac, bc), (ab, bb) = dims
  # A view another GEMM quantized is used as it is (shares_view).
  av, bv = (o.view if o.view is not None else operand.view(value(o), bd, cd)
            for o, bd, cd in ((a, ab, ac), (b, bb, bc)))
  if transform:
    av, bv = operand.rht_pair(av, bv, keys.pop(0))
  quantized = []
  for o, v, sr in ((a, av, stochastic[0]), (b, bv, stochastic[1])):
    if (o.q is not None and o.view is None
        and (transform or not elementwise(o.q))):
      v = operand.quantize_view(v, o.q, keys.pop(0) if sr else None)
    quantized.append(v)
  out = operand.view_dot(*quantized, len(ab))
  return operand.unview(out, a.shape, b.shape, dims), quantized[1]


def record(name: str, pair, a, b) -> None:
  """Records the GEMM for :func:`jaxfp8._src.recipes.mx_gemm.trace_gemms`; ``a``,
  ``b``: arrays or :class:`Op`."""
  gemm_lib.record(name, label(*pair), a, b)
