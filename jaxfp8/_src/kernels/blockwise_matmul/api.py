"""The fp8 blockwise matmul's public entry: its dispatch
(:func:`blockwise_matmul_dispatch`, ``implementation=``) and the choice the
training recipes make with their ``backend=`` (:func:`blockwise_backend`).

Both pick the Mosaic GPU kernel on compute capability 9.x (Hopper), else the
exact jnp path (``"xla"`` to the dispatch: the reference, which sums each
128-long K block in float32 and scales it as the kernel does;
``"dequantize"`` to the recipes). There is no Triton kernel for this op.
"""
from __future__ import annotations

import logging
from typing import Any, Optional

import jax
import jax.numpy as jnp

from jaxfp8._src.kernels import implementation as implementation_lib
from jaxfp8._src.kernels import mosaic_gpu_common
from jaxfp8._src.kernels.blockwise_matmul import mosaic_gpu as blockwise_mosaic_gpu
from jaxfp8._src.kernels.blockwise_matmul import reference as blockwise_reference
from jaxfp8._src.kernels.mx_matmul.api import MX_BACKENDS
from jaxfp8._src.numerics import validate

log = logging.getLogger(__name__)

# The op's implementations: no Triton kernel.
IMPLEMENTATIONS: tuple[str, ...] = ("xla", "mosaic_gpu")


def blockwise_backend(platform: str, a_dtype: Any, b_dtype: Any, *,
                      backend: str = "auto", fn: str = "dot_general",
                      compute_capability: int | None = None) -> str:
  """How an fp8 blockwise GEMM (1x128 / 128x128 blocks) multiplies:
  ``"mosaic"`` (:func:`jaxfp8.ops.blockwise_matmul`) or ``"dequantize"``.

  ``"auto"``: the Mosaic GPU kernel on a GPU of compute capability 9.x
  where it takes the operand pair, else the exact dequantize-and-dot;
  ``"mosaic"`` and ``"dequantize"`` as named. The MX-only backends
  (``"triton"``, ``"pallas"``, ``"scaled_dot"``) don't apply to these GEMMs,
  which then dequantize.

  >>> blockwise_backend("gpu", "float8_e4m3fn", "float8_e4m3fn",
  ...                   compute_capability=90)
  'mosaic'
  >>> blockwise_backend("cpu", "float8_e4m3fn", "float8_e4m3fn")
  'dequantize'
  """
  validate.check_choice(backend, MX_BACKENDS, "backend", fn)
  if backend == "auto":
    return ("mosaic" if mosaic_gpu_common.hopper(platform, compute_capability)
            and mosaic_gpu_common.takes_pair(a_dtype, b_dtype)
            else "dequantize")
  return "mosaic" if backend == "mosaic" else "dequantize"


def _why_not(implementation: str, a_dtype: Any, b_dtype: Any,
             interpret: Optional[bool], fn: str) -> Optional[str]:
  """Why ``implementation`` can't multiply this pair, or None if it can."""
  if implementation == "xla":
    return None
  if not mosaic_gpu_common.takes_pair(a_dtype, b_dtype):
    return (f"this JAX's wgmma takes no mixed pair ({a_dtype} and {b_dtype}); "
            "JAX >= 0.12 does")
  return implementation_lib.mode_reason(
      lambda: mosaic_gpu_common.resolve_mode(interpret, fn),
      "a GPU of compute capability 9.x (Hopper)")


def blockwise_matmul_dispatch(
    a: jax.Array, a_scales: jax.Array, b: jax.Array, b_scales: jax.Array, *,
    a_block: tuple[int, int] = (1, 128), b_block: tuple[int, int] = (128, 128),
    out_dtype: Any = jnp.bfloat16,
    implementation: Optional[implementation_lib.Implementation] = None,
    interpret: Optional[bool] = None) -> jax.Array:
  """fp8 blockwise ``(a * a_scales) @ (b * b_scales).T`` by the
  implementation asked for.

  Args:
    a: (M, K) float8_e4m3fn or float8_e5m2 codes (K-major).
    a_scales: float32 decode scales of ``a``'s blocks, the shape
      :func:`jaxfp8._src.mx.blockwise.quantize` gives them.
    b: (N, K) fp8 codes (K-major: the transposed right operand).
    b_scales: float32 decode scales of ``b``'s blocks.
    a_block: ``(1, 128)`` (default) or ``(128, 128)``.
    b_block: ``(128, 128)`` (default) or ``(1, 128)``.
    out_dtype: bfloat16 (default), float16 or float32.
    implementation: ``"xla"`` (the jnp reference,
      :func:`jaxfp8.ops.blockwise_matmul_reference`), ``"mosaic_gpu"``
      (:func:`jaxfp8.ops.blockwise_matmul`), or None (default): the Mosaic
      GPU kernel where it runs (compute capability 9.x, or its interpreter
      with ``interpret=True``), else XLA, the reason logged at DEBUG level.
      ``"triton"`` raises: the op has no Triton kernel.
    interpret: the kernel's (True: Pallas' Mosaic GPU interpreter, CPU, JAX
      >= 0.11; False: compiled only; None: compiled on Hopper).

  Returns:
    The (M, N) product in ``out_dtype``.

  Raises:
    TypeError, ValueError: malformed operands, scales or blocks.
    NotImplementedError: ``implementation`` (or, for None with
      ``interpret=False``, the kernel) can't run the case: the message
      names the implementation and the reason.

  >>> import jax.numpy as jnp
  >>> a = jnp.ones((2, 256), jnp.float8_e4m3fn)
  >>> sa = jnp.array([[1.0, 2.0], [0.5, 0.5]], jnp.float32)
  >>> b = jnp.ones((1, 256), jnp.float8_e4m3fn)
  >>> sb = jnp.array([[4.0, 1.0]], jnp.float32)
  >>> blockwise_matmul_dispatch(a, sa, b, sb, out_dtype=jnp.float32)
  Array([[768.],
         [320.]], dtype=float32)
  """
  fn = "blockwise_matmul_dispatch"
  implementation_lib.check(implementation, interpret, fn)

  def run(a, a_scales, b, b_scales, *, out_dtype, a_block, b_block):
    chosen = implementation_lib.choose(
        implementation,
        lambda i: _why_not(i, a.dtype, b.dtype, interpret, fn),
        interpret=interpret, available=IMPLEMENTATIONS, fn=fn, log=log)
    if chosen == "mosaic_gpu":
      return blockwise_mosaic_gpu.blockwise_matmul(
          a, a_scales, b, b_scales, a_block=a_block, b_block=b_block,
          out_dtype=out_dtype, interpret=interpret)
    return blockwise_reference.reference(
        a, a_scales, b, b_scales, out_dtype=out_dtype, a_block=a_block,
        b_block=b_block)

  return blockwise_reference.checked(a, a_scales, b, b_scales, a_block,
                                     b_block, out_dtype, fn, run)
