"""The per-tensor scaled fp8 matmul's public entry: its dispatch
(:func:`scaled_matmul_dispatch`, ``implementation=``) and
``jaxfp8.ops.dot_general``, which sends the fp8 products of
``lax.dot_general`` to it.

:func:`scaled_matmul_dispatch` multiplies K-major (M, K) and (N, K) fp8
operands with per-tensor scales by ``"xla"`` (``lax.dot_general``: XLA's own
fp8 GEMM on a GPU), ``"triton"`` or ``"mosaic_gpu"``, or for None the best
that can run (:mod:`jaxfp8._src.kernels.implementation`). :func:`dot_general`
takes ``jax.lax.dot_general``'s arguments and its own ``backend=``, chosen
by :func:`fp8_backend`: a pure function of platform, compute capability and
formats, the Mosaic GPU kernel on compute capability 9.x (Hopper), XLA
elsewhere, the Triton kernel only when named. Both make the same choice for
the same case.
"""
from __future__ import annotations

import functools
import logging
from typing import Any, Optional

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src import compat
from jaxfp8._src.kernels import common
from jaxfp8._src.kernels import implementation as implementation_lib
from jaxfp8._src.kernels import mosaic_gpu_common
from jaxfp8._src.kernels import triton_common
from jaxfp8._src.kernels.scaled_matmul import mosaic_gpu as scaled_mosaic_gpu
from jaxfp8._src.kernels.scaled_matmul import triton as scaled_triton
from jaxfp8._src.numerics import codes
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import validate

log = logging.getLogger(__name__)


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


def _why_not(implementation: str, a_dtype: Any, b_dtype: Any, widen: bool,
             interpret: Optional[bool], fn: str) -> Optional[str]:
  """Why ``implementation`` can't multiply this pair, or None if it can."""
  if implementation == "mosaic_gpu":
    if widen:
      return ("precision=HIGHEST widens the fp8 tiles to bfloat16, which only "
              "the Triton kernel does")
    if not mosaic_gpu_common.takes_pair(a_dtype, b_dtype):
      return (f"this JAX's wgmma takes no mixed pair ({np.dtype(a_dtype).name} "
              f"and {np.dtype(b_dtype).name}); JAX >= 0.12 does")
    return implementation_lib.mode_reason(
        lambda: mosaic_gpu_common.resolve_mode(interpret, fn),
        "a GPU of compute capability 9.x (Hopper)")
  if implementation == "triton":
    return implementation_lib.mode_reason(
        lambda: triton_common.resolve_mode(interpret, fn),
        "a GPU of compute capability >= 8.9")
  return None


@functools.partial(jax.jit, static_argnames=("out_dtype", "precision"))
def _xla(a, b, a_scale, b_scale, *, out_dtype, precision):
  acc = lax.dot_general(a, b, common.CONTRACT_K, precision=precision,
                        preferred_element_type=jnp.float32)
  return common.apply_scales(acc, a_scale, b_scale).astype(out_dtype)


def scaled_matmul_dispatch(
    a: jax.Array, b: jax.Array, a_scale: Any, b_scale: Any, *,
    out_dtype: Any = jnp.bfloat16, precision: Any = None,
    implementation: Optional[implementation_lib.Implementation] = None,
    interpret: Optional[bool] = None) -> jax.Array:
  """fp8 ``(a * a_scale) @ (b * b_scale).T`` by the implementation asked for.

  Args:
    a: (M, K) float8_e4m3fn or float8_e5m2 array (K-major).
    b: (N, K) float8_e4m3fn or float8_e5m2 array (K-major: the transposed
      right operand).
    a_scale: float32 scale of ``a``: a scalar or a one-element array.
    b_scale: float32 scale of ``b``.
    out_dtype: bfloat16 (default), float16 or float32.
    precision: as ``lax.dot_general`` takes it; HIGHEST widens the fp8
      tiles to bfloat16 in the Triton kernel (the Mosaic GPU kernel can't).
    implementation: ``"xla"`` (``lax.dot_general`` with float32
      accumulation, then both scales), ``"triton"``
      (:func:`jaxfp8.ops.scaled_matmul`), ``"mosaic_gpu"``
      (:func:`jaxfp8.ops.scaled_matmul_mgpu`), or None (default): the
      Mosaic GPU kernel where it runs (compute capability 9.x, or its
      interpreter with ``interpret=True``), else the Triton kernel where a
      kernel is asked for (``interpret`` not None), else XLA; each one passed
      over is logged at DEBUG level with the reason.
    interpret: the kernels' (True: Pallas' interpreter, on CPU too; False:
      compiled only; None: compiled where the hardware allows).

  Returns:
    The (M, N) product in ``out_dtype``.

  Raises:
    TypeError, ValueError: malformed operands, scales or arguments.
    NotImplementedError: ``implementation`` (or, for None with
      ``interpret=False``, every kernel) can't run the case: the message
      names the implementation and the reason.

  >>> import jax.numpy as jnp
  >>> a = jnp.full((2, 64), 2, jnp.float8_e4m3fn)
  >>> scaled_matmul_dispatch(a, a, 0.5, 0.25, out_dtype=jnp.float32)
  Array([[32., 32.],
         [32., 32.]], dtype=float32)
  >>> scaled_matmul_dispatch(a, a, 1.0, 1.0, implementation="mosaic_gpu")
  Traceback (most recent call last):
  ...
  NotImplementedError: `scaled_matmul_dispatch` with implementation='mosaic_gpu' can't run this case: ...
  """
  fn = "scaled_matmul_dispatch"
  implementation_lib.check(implementation, interpret, fn)
  a, b = common.check_fp8_pair(a, b, fn)
  widen = common.widen_to_bf16(precision, fn)
  chosen = implementation_lib.choose(
      implementation,
      lambda i: _why_not(i, a.dtype, b.dtype, widen, interpret, fn),
      interpret=interpret, available=implementation_lib.IMPLEMENTATIONS,
      fn=fn, log=log)
  if chosen == "mosaic_gpu":
    return scaled_mosaic_gpu.scaled_matmul_mgpu(
        a, b, a_scale, b_scale, out_dtype=out_dtype, interpret=interpret)
  if chosen == "triton":
    return scaled_triton.scaled_matmul(
        a, b, a_scale, b_scale, out_dtype=out_dtype, interpret=interpret,
        precision=precision)
  a_scale = common.check_scale(a_scale, "a_scale", fn)
  b_scale = common.check_scale(b_scale, "b_scale", fn)
  out_dtype = common.check_out_dtype(out_dtype, fn)
  return _xla(a, b, a_scale, b_scale, out_dtype=out_dtype,
              precision=precision)


FP8_BACKENDS: tuple[str, ...] = ("auto", "mosaic", "triton", "xla")


def fp8_backend(platform: str, a_dtype: Any, b_dtype: Any, *,
                backend: str = "auto", interpret: bool | None = None,
                widen: bool = False, compute_capability: int | None = None,
                fn: str = "dot_general") -> str:
  """The kernel of an fp8 ``dot_general``: "mosaic", "triton" or "xla".

  ``"auto"``: the Mosaic GPU kernel where it runs compiled (compute
  capability 9.x: Hopper) or, with ``interpret=True``, in its interpreter (JAX
  >= 0.11; the Triton kernel's interpreter before), when it takes the
  operand pair and no bfloat16 widening is asked (``widen``: HIGHEST
  precision, which only the Triton kernel does); else ``"xla"``
  (``lax.dot_general``: XLA's own fp8 GEMM on a GPU). An explicit backend
  is returned as given.

  >>> fp8_backend("gpu", "float8_e4m3fn", "float8_e4m3fn", compute_capability=90)
  'mosaic'
  >>> fp8_backend("gpu", "float8_e4m3fn", "float8_e4m3fn", compute_capability=89)
  'xla'
  >>> fp8_backend("cpu", "float8_e4m3fn", "float8_e5m2")
  'xla'
  """
  validate.check_choice(backend, FP8_BACKENDS, "backend", fn)
  if backend != "auto":
    return backend
  takes = mosaic_gpu_common.takes_pair(a_dtype, b_dtype) and not widen
  if interpret:
    mosaic = takes and compat.mosaic_gpu_interpret_params() is not None
    return "mosaic" if mosaic else "triton"
  hopper = takes and mosaic_gpu_common.hopper(platform, compute_capability)
  if interpret is None and hopper:
    return "mosaic"
  if interpret is False:
    return "mosaic" if hopper else "triton"
  return "xla"


def dot_general(lhs: jax.Array, rhs: jax.Array, dimension_numbers: Any,
                precision: Any = None, preferred_element_type: Any = None, *,
                interpret: bool | None = None,
                backend: str = "auto") -> jax.Array:
  """``lax.dot_general`` that runs fp8 products through the fp8 GEMM kernels.

  Same arguments and result as ``jax.lax.dot_general``. When both operands
  are float8_e4m3fn / float8_e5m2 and there are no batch dimensions, the
  operands are laid out K-major as (M, K) and (N, K) and multiplied by the
  kernel :func:`fp8_backend` picks with float32 accumulation, and the
  result is reshaped to dot_general's (lhs kept, rhs kept) axes: by default
  the Mosaic GPU kernel (:func:`jaxfp8.ops.scaled_matmul_mgpu`) on a GPU of
  compute capability 9.x, ``lax.dot_general`` itself elsewhere (XLA's
  fp8 GEMM on other GPUs). ``backend="triton"`` runs the Triton kernel
  (:func:`jaxfp8.ops.scaled_matmul`; ``precision=HIGHEST`` selects its
  bfloat16 MMA), ``"mosaic"`` the Mosaic GPU one, ``"xla"``
  ``lax.dot_general``; ``interpret`` is the kernel's (True: Pallas'
  interpreter, on CPU too).
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
  kernel = "xla"
  if (fp8 and not l_bat and not r_bat and precision_ok
      and np.dtype(preferred_element_type) in common.OUT_DTYPES):
    kernel = fp8_backend(jax.default_backend(), lhs.dtype, rhs.dtype,
                         backend=backend, interpret=interpret, widen=widen)
    mode = (mosaic_gpu_common.resolve_mode(interpret, "dot_general")
            if kernel == "mosaic" else
            triton_common.resolve_mode(interpret, "dot_general")
            if kernel == "triton" else "reference")
    if mode == "reference":
      kernel = "xla"
  else:
    validate.check_choice(backend, FP8_BACKENDS, "backend", "dot_general")
  if kernel == "xla":
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
  # precision reaches only the Triton kernel: an explicit backend="mosaic"
  # multiplies as it is (what fp8_backend returns is run).
  out = scaled_matmul_dispatch(
      a, b, 1.0, 1.0, out_dtype=preferred_element_type,
      precision=lax.Precision.HIGHEST if widen and kernel == "triton" else None,
      implementation="mosaic_gpu" if kernel == "mosaic" else "triton",
      interpret=interpret)
  return out.reshape(out_shape)
