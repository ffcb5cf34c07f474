"""The fp8 blockwise matmul's dispatch: the Mosaic GPU kernel on compute
capability 9.x (Hopper), else the exact dequantize-and-dot.
"""
from __future__ import annotations

from typing import Any


from jaxfp8._src.kernels import mosaic_common
from jaxfp8._src.kernels.mx_matmul.api import MX_BACKENDS
from jaxfp8._src.numerics import validate


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
    return ("mosaic" if mosaic_common.hopper(platform, compute_capability)
            and mosaic_common.takes_pair(a_dtype, b_dtype) else "dequantize")
  return "mosaic" if backend == "mosaic" else "dequantize"
