"""The MX matmul's public entry: its dispatch (:func:`mx_matmul_dispatch`,
``implementation=``), and the choice (:func:`mx_backend`) and batched run
(:func:`mx_gemm`) the training recipes call with their ``backend=``.

Both are pure functions of platform, compute capability, format and block
size: the Mosaic GPU kernel for mxfp8 on compute capability 9.x (Hopper),
else the exact dequantize-and-dot (``"xla"`` to the dispatch,
``"dequantize"`` to the recipes); the Triton kernel and ``lax.scaled_dot``
only when named. The dispatch picks through
:mod:`jaxfp8._src.kernels.implementation`, which logs each implementation
it passes over and why.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Optional

import jax
from jax import lax
import jax.numpy as jnp

from jaxfp8._src.kernels import block_scaled_mosaic_gpu as block_scaled
from jaxfp8._src.kernels import common
from jaxfp8._src.kernels import implementation as implementation_lib
from jaxfp8._src.kernels import mosaic_gpu_common
from jaxfp8._src.kernels import triton_common
from jaxfp8._src.kernels.mx_matmul import mosaic_gpu as mx_mosaic_gpu
from jaxfp8._src.kernels.mx_matmul import reference as mx_reference
from jaxfp8._src.kernels.mx_matmul import triton as mx_triton
from jaxfp8._src.mx import array as mx_lib
from jaxfp8._src.mx import matmul as mx_dot
from jaxfp8._src.mx.formats import get_format
from jaxfp8._src.numerics import validate

log = logging.getLogger(__name__)


# "pallas" is the Triton kernel's name from before the Mosaic GPU kernels.
MX_BACKENDS: tuple[str, ...] = ("auto", "dequantize", "mosaic", "triton",
                                "pallas", "scaled_dot")


def _why_not(backend: str, fmt: str, block_size: int) -> str | None:
  """Why ``backend`` can't run a GEMM of ``fmt`` blocks, or None if it can."""
  names = " and ".join(mx_reference.MXFP8_FORMATS)
  if backend in ("triton", "pallas"):
    if fmt not in mx_reference.MXFP8_FORMATS:
      return f"the Triton mx_matmul reads {names} elements only, not {fmt}"
    if block_size < 32 or block_size & (block_size - 1):
      return (f"the Triton mx_matmul needs a block size that is a power of "
              f"two >= 32, not {block_size}")
  if backend == "mosaic":
    if fmt not in mx_reference.MXFP8_FORMATS:
      return f"the Mosaic GPU mx_matmul reads {names} elements only, not {fmt}"
    if block_size not in block_scaled.SCALE_BLOCKS:
      return (f"the Mosaic GPU mx_matmul needs a block size of "
              f"{', '.join(map(str, block_scaled.SCALE_BLOCKS))}, not "
              f"{block_size}")
  if backend == "scaled_dot" and get_format(fmt).bits == 6:
    return f"lax.scaled_dot can't hold {fmt}'s fp6 elements"
  return None


def mx_backend(platform: str, fmt: str, *, block_size: int,
               backend: str = "auto", fn: str = "dot_general",
               compute_capability: int | None = None) -> str:
  """The backend that multiplies two MX operands of ``fmt`` on ``platform``.

  ``"auto"``: ``"mosaic"`` (the Mosaic GPU ``mx_matmul_mgpu``: fp8 operands
  into the tensor cores, block scales in registers) on a GPU of compute
  capability 9.x (Hopper) for mxfp8 with blocks of 32, 64 or 128, else
  ``"dequantize"`` (exact dequantize, float32 dot at HIGHEST precision):
  the fastest exact path on CPU, where ``lax.scaled_dot`` flushes blocks of
  scale code 0 (see ``docs/mx.md``). The Triton ``mx_matmul``
  (``"triton"``, or ``"pallas"``) runs only when named. An explicit backend
  is checked against the format.

  Args:
    platform: ``jax.default_backend()``'s answer (``"cpu"``, ``"gpu"``, ...).
    fmt: the MX format name of both operands.
    block_size: their block size.
    backend: one of :data:`MX_BACKENDS`.
    fn: the public function to name in errors.
    compute_capability: the GPU's, as an int (90 for 9.0); default the first
      device's.

  Raises:
    ValueError: an unknown ``backend``.
    NotImplementedError: an explicit backend that can't take ``fmt``.

  >>> mx_backend("gpu", "mxfp8_e4m3", block_size=32, compute_capability=90)
  'mosaic'
  >>> mx_backend("gpu", "mxfp8_e4m3", block_size=32, compute_capability=89)
  'dequantize'
  >>> mx_backend("cpu", "mxfp8_e4m3", block_size=32)
  'dequantize'
  """
  validate.check_choice(backend, MX_BACKENDS, "backend", fn)
  if backend == "auto":
    return ("mosaic" if mosaic_gpu_common.hopper(platform, compute_capability)
            and _why_not("mosaic", fmt, block_size) is None else "dequantize")
  why = _why_not(backend, fmt, block_size)
  if why is not None:
    raise NotImplementedError(f"`{fn}` with backend={backend!r}: {why}; use "
                              "backend='dequantize' or 'auto'")
  return backend


def mx_gemm(a: mx_lib.MXArray, b: mx_lib.MXArray, *, backend: str,
            interpret: bool | None = None) -> jax.Array:
  """``a @ b^T`` per batch in float32: a (B, M, K), b (B, N, K) MXArrays.

  Both are blocked along K (their last axis) with the same block size;
  ``backend`` is ``"mosaic"`` (``jaxfp8.ops.mx_matmul_mgpu`` per batch,
  one after the other), ``"triton"`` / ``"pallas"`` (``jaxfp8.ops.mx_matmul``
  per batch, under ``vmap``; ``interpret`` as they take it) or
  ``"scaled_dot"``. Returns (B, M, N) float32: the float32 accumulation of
  exact block products.
  """
  if backend == "scaled_dot":
    return mx_dot.scaled_dot_product(a, b, jnp.float32, b_rows=True)
  if backend not in ("mosaic", "triton", "pallas"):
    raise ValueError(f"`mx_gemm`: backend must be 'mosaic', 'triton', "
                     f"'pallas' or 'scaled_dot', got {backend!r}")
  k, bs = a.shape[-1], a.block_size

  def one(ad, asc, bd, bsc):
    def mx_of(data, scales, fmt):
      return mx_lib.MXArray(data, scales, fmt, axis=-1, length=k,
                            block_size=bs)
    op = mx_mosaic_gpu.mx_matmul_mgpu if backend == "mosaic" else mx_triton.mx_matmul
    return op(mx_of(ad, asc, a.fmt), mx_of(bd, bsc, b.fmt),
              out_dtype=jnp.float32, interpret=interpret)

  if backend == "mosaic":
    # lax.map: a Mosaic GPU kernel has no batching rule to vmap it by.
    return lax.map(lambda xs: one(*xs), (a.data, a.scales, b.data, b.scales))
  return jax.vmap(one)(a.data, a.scales, b.data, b.scales)


def _impl_why_not(implementation: str, a: mx_lib.MXArray, b: mx_lib.MXArray,
                  widen: bool, interpret: Optional[bool], fn: str
                  ) -> Optional[str]:
  """Why ``implementation`` can't multiply ``a`` and ``b``, or None."""
  if implementation == "xla":
    return None
  backend = "mosaic" if implementation == "mosaic_gpu" else "triton"
  for fmt in dict.fromkeys((a.fmt.name, b.fmt.name)):
    why = _why_not(backend, fmt, a.block_size)
    if why is not None:
      return why
  if implementation == "triton":
    return implementation_lib.mode_reason(
        lambda: triton_common.resolve_mode(interpret, fn),
        "a GPU of compute capability >= 8.9")
  if widen:
    return ("precision=HIGHEST widens the fp8 tiles to bfloat16, which only "
            "the Triton kernel does")
  if not mosaic_gpu_common.takes_pair(a.data.dtype, b.data.dtype):
    return (f"this JAX's wgmma takes no mixed pair ({a.fmt.name} and "
            f"{b.fmt.name}); JAX >= 0.12 does")
  return implementation_lib.mode_reason(
      lambda: mosaic_gpu_common.resolve_mode(interpret, fn),
      "a GPU of compute capability 9.x (Hopper)")


def mx_matmul_dispatch(
    a: mx_lib.MXArray, b: mx_lib.MXArray, *, out_dtype: Any = jnp.bfloat16,
    precision: Any = None,
    implementation: Optional[implementation_lib.Implementation] = None,
    interpret: Optional[bool] = None) -> jax.Array:
  """MX ``a @ b.T`` for MXArrays blocked along K, by the implementation
  asked for.

  Args:
    a: (M, K) :class:`jaxfp8.mx.MXArray` of any MX format, blocked along K
      (``quantize(x, fmt, axis=-1)``).
    b: (N, K) MXArray blocked along K with the same block size (the
      transposed right operand).
    out_dtype: bfloat16 (default), float16 or float32.
    precision: as ``lax.dot_general`` takes it; HIGHEST widens the fp8
      tiles to bfloat16 in the Triton kernel (the Mosaic GPU kernel can't).
    implementation: ``"xla"`` (both operands dequantized exactly, a float32
      dot at HIGHEST precision: every MX format), ``"triton"``
      (:func:`jaxfp8.ops.mx_matmul`: mxfp8, blocks a power of two >= 32),
      ``"mosaic_gpu"`` (:func:`jaxfp8.ops.mx_matmul_mgpu`: mxfp8, blocks of
      32, 64 or 128), or None (default): the Mosaic GPU kernel where it runs
      (compute capability 9.x, or its interpreter with ``interpret=True``),
      else the Triton kernel where a kernel is asked for (``interpret`` not
      None), else XLA; each one passed over is logged at DEBUG level with
      the reason.
    interpret: the kernels' (True: Pallas' interpreter, on CPU too; False:
      compiled only; None: compiled where the hardware allows).

  Returns:
    The (M, N) product in ``out_dtype``.

  Raises:
    TypeError, ValueError: malformed operands or arguments.
    NotImplementedError: ``implementation`` (or, for None with
      ``interpret=False``, every kernel) can't run the case: the message
      names the implementation and the reason.

  >>> import jax.numpy as jnp, jaxfp8
  >>> a = jaxfp8.mx.quantize(jnp.full((2, 64), 3.0), "mxfp4_e2m1")
  >>> b = jaxfp8.mx.quantize(jnp.full((1, 64), 0.5), "mxfp4_e2m1")
  >>> mx_matmul_dispatch(a, b, out_dtype=jnp.float32)
  Array([[96.],
         [96.]], dtype=float32)
  >>> mx_matmul_dispatch(a, b, implementation="triton", interpret=True)
  Traceback (most recent call last):
  ...
  NotImplementedError: `mx_matmul_dispatch` with implementation='triton' can't run this case: the Triton mx_matmul reads mxfp8_e4m3 and mxfp8_e5m2 elements only, not mxfp4_e2m1. ...
  """
  fn = "mx_matmul_dispatch"
  implementation_lib.check(implementation, interpret, fn)
  mx_reference.check_pair(a, b, fn, fp8_only=False)
  widen = common.widen_to_bf16(precision, fn)
  chosen = implementation_lib.choose(
      implementation,
      lambda i: _impl_why_not(i, a, b, widen, interpret, fn),
      interpret=interpret, available=implementation_lib.IMPLEMENTATIONS,
      fn=fn, log=log)
  if chosen == "mosaic_gpu":
    return mx_mosaic_gpu.mx_matmul_mgpu(a, b, out_dtype=out_dtype,
                                        interpret=interpret)
  if chosen == "triton":
    return mx_triton.mx_matmul(a, b, out_dtype=out_dtype, interpret=interpret,
                               precision=precision)
  out_dtype = common.check_out_dtype(out_dtype, fn)
  return _dequantized(a, b, out_dtype=out_dtype)


@functools.partial(jax.jit, static_argnames=("out_dtype",))
def _dequantized(a, b, *, out_dtype):
  """The exact dequantize-and-dot: every MX format."""
  return lax.dot_general(a.dequantize(), b.dequantize(), common.CONTRACT_K,
                         precision=lax.Precision.HIGHEST,
                         preferred_element_type=jnp.float32).astype(out_dtype)
