"""``dot_general`` for fp8 operands, dispatched to the Pallas kernel.

``jaxfp8.ops.dot_general`` takes ``jax.lax.dot_general``'s arguments and sends
the products the fp8 kernel can take (two fp8 operands, no batch dimensions,
a kernel output dtype, the kernel available) to
:func:`jaxfp8._src.kernels.scaled_matmul.scaled_matmul`, laid out K-major;
everything else goes to ``lax.dot_general`` itself.

It also chooses the backend of each MX GEMM of ``jaxfp8.mx.dot_general``
(:func:`mx_backend`, a pure function of platform and format) and runs the
kernel backends on MXArray operands (:func:`mx_gemm`): the Pallas
``mx_matmul`` (mxfp8, the automatic choice on GPU) and ``lax.scaled_dot``.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src.kernels import common
from jaxfp8._src.kernels import mx_matmul as mx_matmul_lib
from jaxfp8._src.kernels.scaled_matmul import scaled_matmul
from jaxfp8._src.mx import array as mx_lib
from jaxfp8._src.mx import matmul as mx_dot
from jaxfp8._src.mx.formats import get_format
from jaxfp8._src.numerics import codes
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import validate


def _operand(x: Any) -> Any:
  """``x``, or its exact float32 values where no GEMM takes its format.

  float8_e4m3fn / float8_e5m2 stay narrow (the kernel's, and XLA's fp8
  GEMM); every other narrow format (float4, the fnuz and IEEE fp8 formats,
  E8M0, and float6 CodeArrays) is decoded exactly: a product of two narrow
  values is exact in float32, and the sum accumulates in float32 as
  ``preferred_element_type=float32`` asks.
  """
  dtype = getattr(x, "dtype", None)
  if isinstance(x, codes.CodeArray) or (
      formats.is_narrow(dtype) and np.dtype(dtype) not in common.FP8_DTYPES):
    return codes.as_float32(x)
  return x


def _check(lhs, rhs, dimension_numbers, preferred_element_type) -> None:
  """lax.dot_general's own checks, run on shapes before either path: the
  kernel path reshapes by the dimension numbers and would fail obscurely."""
  for arg, x in (("lhs", lhs), ("rhs", rhs)):
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
      raise TypeError(f"`{arg}` argument to `dot_general` must be an array, "
                      f"got {type(x).__name__}")
  try:
    (_, _), (_, _) = dimension_numbers
    jax.eval_shape(
        functools.partial(lax.dot_general,
                          dimension_numbers=dimension_numbers,
                          preferred_element_type=preferred_element_type),
        jax.ShapeDtypeStruct(lhs.shape, lhs.dtype),
        jax.ShapeDtypeStruct(rhs.shape, rhs.dtype))
  except (TypeError, ValueError) as e:
    raise type(e)(f"`dimension_numbers` argument to `dot_general` "
                  f"({dimension_numbers!r}) does not fit `lhs` "
                  f"{tuple(lhs.shape)} {lhs.dtype} and `rhs` "
                  f"{tuple(rhs.shape)} {rhs.dtype}: {e}") from e


def dot_general(lhs: jax.Array, rhs: jax.Array, dimension_numbers: Any,
                precision: Any = None, preferred_element_type: Any = None, *,
                interpret: bool | None = None) -> jax.Array:
  """``lax.dot_general`` that runs fp8 products through :func:`scaled_matmul`.

  Same arguments and result as ``jax.lax.dot_general``. When both operands
  are float8_e4m3fn / float8_e5m2, there are no batch dimensions and the
  kernel runs (on a GPU, or with ``interpret=True``), the operands are laid
  out K-major as (M, K) and (N, K) and multiplied by the kernel with float32
  accumulation; the result is reshaped to dot_general's (lhs kept, rhs kept)
  axes (``precision=HIGHEST`` selects the kernel's bfloat16 MMA). Everything
  else, including ``interpret=None`` off GPU, is ``lax.dot_general`` itself.
  Operands of the other narrow formats (float4_e2m1fn, float6 CodeArrays,
  the fnuz and IEEE fp8 formats, E8M0), which no GEMM here takes, are
  decoded to float32 exactly first. ``preferred_element_type`` defaults to
  float32 for narrow operands.

  >>> import jax.numpy as jnp
  >>> x = jnp.ones((2, 3, 32), jnp.float8_e4m3fn)
  >>> w = jnp.ones((32, 5), jnp.float8_e4m3fn)
  >>> dot_general(x, w, (((2,), (0,)), ((), ())), interpret=True).shape
  (2, 3, 5)
  >>> import jaxfp8
  >>> a = jaxfp8.encode(jnp.full((2, 4), 1.5), "e2m3")  # float6 codes
  >>> dot_general(a, jnp.ones((4, 3), jnp.float4_e2m1fn), (((1,), (0,)), ((), ())))
  Array([[6., 6., 6.],
         [6., 6., 6.]], dtype=float32)
  """
  narrow_in = formats.is_narrow(getattr(lhs, "dtype", None)) or (
      formats.is_narrow(getattr(rhs, "dtype", None)))
  lhs, rhs = _operand(lhs), _operand(rhs)
  if preferred_element_type is not None:
    preferred_element_type = formats.result_dtype(preferred_element_type,
                                                  fn="dot_general")
  if preferred_element_type is None and narrow_in:
    preferred_element_type = jnp.float32
  _check(lhs, rhs, dimension_numbers, preferred_element_type)
  (l_con, r_con), (l_bat, r_bat) = dimension_numbers
  fp8 = (np.dtype(lhs.dtype) in common.FP8_DTYPES
         and np.dtype(rhs.dtype) in common.FP8_DTYPES)
  if preferred_element_type is None and fp8:
    preferred_element_type = jnp.float32
  try:  # a DotAlgorithm or other lax-only precision: lax.dot_general's
    widen = common.widen_to_bf16(precision, "dot_general")
    precision_ok = True
  except ValueError:
    precision_ok = False
  use_kernel = (
      fp8 and not l_bat and not r_bat and precision_ok
      and np.dtype(preferred_element_type) in common.OUT_DTYPES
      and common.resolve_mode(interpret, "dot_general") != "reference")
  if not use_kernel:
    return lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                           preferred_element_type=preferred_element_type)
  l_con, r_con = tuple(int(d) for d in l_con), tuple(int(d) for d in r_con)
  l_kept = [d for d in range(lhs.ndim) if d not in l_con]
  r_kept = [d for d in range(rhs.ndim) if d not in r_con]
  k = int(np.prod([lhs.shape[d] for d in l_con], dtype=np.int64))
  out_shape = tuple(lhs.shape[d] for d in l_kept) + tuple(
      rhs.shape[d] for d in r_kept)
  a = jnp.transpose(lhs, (*l_kept, *l_con)).reshape(-1, k)
  b = jnp.transpose(rhs, (*r_kept, *r_con)).reshape(-1, k)
  out = scaled_matmul(a, b, 1.0, 1.0, out_dtype=preferred_element_type,
                      interpret=interpret,
                      precision=lax.Precision.HIGHEST if widen else None)
  return out.reshape(out_shape)


# -- the backends of the MX dot_general ----------------------------------------

MX_BACKENDS: tuple[str, ...] = ("auto", "dequantize", "pallas", "scaled_dot")
_GPU_PLATFORMS = ("gpu", "cuda", "rocm")


def _why_not(backend: str, fmt: str, block_size: int) -> str | None:
  """Why ``backend`` can't run a GEMM of ``fmt`` blocks, or None if it can."""
  if backend == "pallas":
    if fmt not in mx_matmul_lib.MXFP8_FORMATS:
      names = " and ".join(mx_matmul_lib.MXFP8_FORMATS)
      return f"the Pallas mx_matmul reads {names} elements only, not {fmt}"
    if block_size < 32 or block_size & (block_size - 1):
      return (f"the Pallas mx_matmul needs a block size that is a power of "
              f"two >= 32, not {block_size}")
  if backend == "scaled_dot" and get_format(fmt).bits == 6:
    return f"lax.scaled_dot can't hold {fmt}'s fp6 elements"
  return None


def mx_backend(platform: str, fmt: str, *, block_size: int,
               backend: str = "auto", fn: str = "dot_general") -> str:
  """The backend that multiplies two MX operands of ``fmt`` on ``platform``.

  ``"auto"``: ``"pallas"`` (the ``mx_matmul`` kernel, fp8 tensor cores) on
  a GPU for mxfp8 with power-of-two blocks >= 32, else ``"dequantize"``
  (exact dequantize, float32 dot at HIGHEST precision): the fastest exact
  path on CPU, where ``lax.scaled_dot`` flushes blocks of scale code 0 (see
  ``docs/mx.md``). An explicit backend is checked against the format.

  Args:
    platform: ``jax.default_backend()``'s answer (``"cpu"``, ``"gpu"``, ...).
    fmt: the MX format name of both operands.
    block_size: their block size.
    backend: one of :data:`MX_BACKENDS`.
    fn: the public function to name in errors.

  Raises:
    ValueError: an unknown ``backend``.
    NotImplementedError: an explicit backend that can't take ``fmt``.

  >>> mx_backend("gpu", "mxfp8_e4m3", block_size=32)
  'pallas'
  >>> mx_backend("cpu", "mxfp8_e4m3", block_size=32)
  'dequantize'
  """
  validate.check_choice(backend, MX_BACKENDS, "backend", fn)
  if backend == "auto":
    gpu = platform in _GPU_PLATFORMS
    return ("pallas" if gpu and _why_not("pallas", fmt, block_size) is None
            else "dequantize")
  why = _why_not(backend, fmt, block_size)
  if why is not None:
    raise NotImplementedError(f"`{fn}` with backend={backend!r}: {why}; use "
                              "backend='dequantize' or 'auto'")
  return backend


def mx_gemm(a: mx_lib.MXArray, b: mx_lib.MXArray, *, backend: str,
            interpret: bool | None = None) -> jax.Array:
  """``a @ b^T`` per batch in float32: a (B, M, K), b (B, N, K) MXArrays.

  Both are blocked along K (their last axis) with the same block size;
  ``backend`` is ``"pallas"`` (``jaxfp8.ops.mx_matmul`` per batch, under
  ``vmap``; ``interpret`` as it takes it) or ``"scaled_dot"``. Returns
  (B, M, N) float32: the float32 accumulation of exact block products.
  """
  if backend == "scaled_dot":
    return mx_dot.scaled_dot_product(a, b, jnp.float32, b_rows=True)
  if backend != "pallas":
    raise ValueError(f"`mx_gemm`: backend must be 'pallas' or 'scaled_dot', "
                     f"got {backend!r}")
  k, bs = a.shape[-1], a.block_size

  def one(ad, asc, bd, bsc):
    def mx_of(data, scales, fmt):
      return mx_lib.MXArray(data, scales, fmt, axis=-1, length=k,
                            block_size=bs)
    return mx_matmul_lib.mx_matmul(
        mx_of(ad, asc, a.fmt), mx_of(bd, bsc, b.fmt), out_dtype=jnp.float32,
        interpret=interpret)

  return jax.vmap(one)(a.data, a.scales, b.data, b.scales)
