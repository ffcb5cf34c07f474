"""The MX matmul's dispatch: which backend multiplies two MX operands
(:func:`mx_backend`) and running it on MXArrays (:func:`mx_gemm`).

A pure function of platform, compute capability, format and block size: the
Mosaic GPU kernel for mxfp8 on compute capability 9.x (Hopper), else the
exact dequantize-and-dot; the Triton kernel and ``lax.scaled_dot`` only when
named.
"""
from __future__ import annotations


import jax
from jax import lax
import jax.numpy as jnp

from jaxfp8._src.kernels import block_scaled
from jaxfp8._src.kernels import mosaic_common
from jaxfp8._src.kernels.mx_matmul import mosaic_gpu as mx_mosaic_gpu
from jaxfp8._src.kernels.mx_matmul import reference as mx_reference
from jaxfp8._src.kernels.mx_matmul import triton as mx_triton
from jaxfp8._src.mx import array as mx_lib
from jaxfp8._src.mx import matmul as mx_dot
from jaxfp8._src.mx.formats import get_format
from jaxfp8._src.numerics import validate


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
    return ("mosaic" if mosaic_common.hopper(platform, compute_capability)
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
