"""An fp8 ``dot_general``: scaled narrow operands forward, narrow gradients back.

Forward, both operands are scaled and cast to their narrow formats (e4m3 by
default) and multiplied with float32 accumulation; backward, the output
gradient is scaled and cast to its own format (e5m2 by default) and
multiplied with the *quantized* forward operands, as fp8 training on
Hopper-class GPUs does. Scaling is current (each tensor's own amax) or
delayed (:class:`jaxfp8.policy.DelayedScaling` state).

Delayed-scaling state is an argument of the ``custom_vjp``; its "gradient" is
the next state (input and kernel amaxes are recorded forward, the output
gradient's backward). This is Flax's *overwrite with gradient* convention:
the Flax modules (:mod:`jaxfp8._src.fp8.flax_modules`) keep the state in the
``_overwrite_with_gradient`` collection, which
``flax.training.train_state.TrainState`` replaces with its gradient instead
of handing it to the optimizer. A state used by two calls in one step would
receive the sum of two states: give each call its own.

This module is the op alone and imports no framework. Every product of
narrow operands goes through :func:`_matmul`, the one place to swap in a
hand-written kernel.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.fp8 import scaling
from jaxfp8._src.fp8.scaling import amax
from jaxfp8._src.fp8.scaling import CurrentScaling
from jaxfp8._src.fp8.scaling import DelayedScaling
from jaxfp8._src.kernels import dispatch as kernels_dispatch
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import rounding
from jaxfp8._src.numerics.codes import as_float32
from jaxfp8._src.numerics.codes import CodeArray
from jaxfp8._src.numerics.codes import decode
from jaxfp8._src.numerics.host import device_array

DimensionNumbers = tuple[tuple[Sequence[int], Sequence[int]],
                         tuple[Sequence[int], Sequence[int]]]


def _operand(q):
  """A narrow operand XLA can multiply: 8-bit native formats as they are;
  float4 (no CPU dot) and CodeArrays (float6) decoded to float32, exactly."""
  if isinstance(q, CodeArray):
    return decode(q, jnp.float32)
  if np.dtype(q.dtype).itemsize == 1 and formats.get(q.dtype).bits == 8:
    return q
  return q.astype(jnp.float32)


def _matmul(lhs_q, rhs_q, dimension_numbers) -> jax.Array:
  """``dot_general`` of two narrow operands, accumulated in float32."""
  a, b = _operand(lhs_q), _operand(rhs_q)
  if (a.dtype == jnp.float32) != (b.dtype == jnp.float32):
    a, b = a.astype(jnp.float32), b.astype(jnp.float32)
  # On a GPU, fp8 x fp8 products run in jaxfp8's Pallas kernel; elsewhere
  # (and for batched or wide operands) this is lax.dot_general itself.
  return kernels_dispatch.dot_general(
      a, b, dimension_numbers, preferred_element_type=jnp.float32)


def _kept(ndim: int, *groups) -> list[int]:
  used = {int(d) for g in groups for d in g}
  return [d for d in range(ndim) if d not in used]


def _transpose_lhs(g, lhs_ndim: int, rhs, dimension_numbers, swap_ans=False):
  """The cotangent of ``lhs`` in ``dot_general(lhs, rhs)`` given ``g``.

  ``g``'s axes are (batch, lhs kept, rhs kept), or (batch, rhs kept, lhs
  kept) when ``swap_ans``; contracting ``g``'s rhs-kept axes with ``rhs``
  gives (batch, lhs kept, lhs contracting in rhs's order), then permuted back.
  """
  (l_con, r_con), (l_bat, r_bat) = dimension_numbers
  rhs_ndim = rhs.ndim
  l_kept = _kept(lhs_ndim, l_con, l_bat)
  r_kept = _kept(rhs_ndim, r_con, r_bat)
  nb = len(l_bat)
  if swap_ans:
    g_r = list(range(nb, nb + len(r_kept)))
  else:
    g_r = list(range(nb + len(l_kept), nb + len(l_kept) + len(r_kept)))
  dims = ((g_r, r_kept), (list(range(nb)), list(r_bat)))
  out = _matmul(g, rhs, dims)
  l_con_by_r = [l_con[i] for i in np.argsort(r_con)]
  perm = np.argsort(list(l_bat) + l_kept + l_con_by_r)
  return lax.transpose(out, tuple(int(p) for p in perm))


def _transpose_rhs(g, lhs, rhs_ndim: int, dimension_numbers):
  (l_con, r_con), (l_bat, r_bat) = dimension_numbers
  swapped = ((r_con, l_con), (r_bat, l_bat))
  return _transpose_lhs(g, rhs_ndim, lhs, swapped, swap_ans=True)


@dataclasses.dataclass(frozen=True)
class _Static:
  dimension_numbers: Any
  out_dtype: Any
  lhs_dtype: Any
  rhs_dtype: Any


def _freeze_dims(dimension_numbers) -> DimensionNumbers:
  (lc, rc), (lb, rb) = dimension_numbers
  t = lambda s: tuple(int(d) for d in s)
  return ((t(lc), t(rc)), (t(lb), t(rb)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def _scaled_dot(lhs, rhs, lhs_scaling, rhs_scaling, grad_scaling,
                static: _Static):
  return _scaled_dot_fwd(lhs, rhs, lhs_scaling, rhs_scaling, grad_scaling,
                         static)[0]


def _quantize_operand(x, scaler):
  """(narrow ``x / scale``, scale, next scaling state) for ``x``.

  Called inside the ``custom_vjp`` only, so ``round_to``'s straight-through
  rule never applies: the backward pass is written out below.
  """
  x32 = x.astype(jnp.float32)
  scale = scaler.scale_for(x32)
  # scaling.divide, as scaling.quantize: x32 / scale flushes subnormals.
  return (rounding.round_to(scaling.divide(x32, scale), scaler.format), scale,
          scaler.update(amax(x32)))


def _to_dtype(x: jax.Array, dtype: np.dtype) -> jax.Array:
  """``x.astype(dtype)``, saturating (jaxfp8.cast) into a narrow dtype, where
  ``astype`` would give NaN (e4m3fn) or Inf past the format's max."""
  if not formats.is_narrow(dtype):
    return x.astype(dtype)
  return rounding.round_to(x.astype(jnp.float32), dtype)


def _scaled_dot_fwd(lhs, rhs, lhs_scaling, rhs_scaling, grad_scaling,
                    static: _Static):
  q_l, s_l, next_l = _quantize_operand(lhs, lhs_scaling)
  q_r, s_r, next_r = _quantize_operand(rhs, rhs_scaling)
  # One scale at a time: s_l * s_r alone may overflow where the result won't.
  out = _matmul(q_l, q_r, static.dimension_numbers) * s_l * s_r
  res = (q_l, s_l, next_l, q_r, s_r, next_r, grad_scaling)
  return _to_dtype(out, static.out_dtype), res


def _scaled_dot_bwd(static: _Static, res, g):
  q_l, s_l, next_l, q_r, s_r, next_r, grad_scaling = res
  q_g, s_g, next_g = _quantize_operand(g, grad_scaling)
  dims = static.dimension_numbers
  d_lhs = _transpose_lhs(q_g, q_l.ndim, q_r, dims) * s_g * s_r
  d_rhs = _transpose_rhs(q_g, q_l, q_r.ndim, dims) * s_g * s_l
  return (_to_dtype(d_lhs, static.lhs_dtype),
          _to_dtype(d_rhs, static.rhs_dtype), next_l, next_r, next_g)


_scaled_dot.defvjp(_scaled_dot_fwd, _scaled_dot_bwd)


def _check_scaling(s, arg: str, default: str):
  if s is None:
    return CurrentScaling(default)
  if isinstance(s, (CurrentScaling, DelayedScaling)):
    return s
  if isinstance(s, (str, formats.Format)) or hasattr(s, "dtype") or (
      isinstance(s, type)):
    return CurrentScaling(scaling.signed_format(s, arg=arg,
                                                fn="fp8_dot_general"))
  raise TypeError(f"`{arg}` argument to `fp8_dot_general` must be a format, "
                  f"CurrentScaling or DelayedScaling, got {type(s).__name__}")


def _dot_operand(x: Any, arg: str) -> jax.Array:
  """A floating jax.Array; CodeArrays and NumPy arrays of formats XLA can't
  hold (float6) are decoded to float32."""
  if isinstance(x, CodeArray) or (
      isinstance(x, np.ndarray) and formats.is_narrow(x.dtype)
      and not formats.get(x.dtype).native):
    return as_float32(x)
  x = device_array(x)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    raise TypeError(f"`{arg}` argument to `fp8_dot_general` must be a "
                    f"floating array, got {x.dtype}")
  return x


def _out_dtype(lhs_dtype, rhs_dtype, preferred: Any) -> np.dtype:
  if preferred is not None:
    return formats.result_dtype(preferred, fn="fp8_dot_general")
  if lhs_dtype == rhs_dtype:
    return np.dtype(lhs_dtype)
  wide = [jnp.float32 if formats.is_narrow(d) else d
          for d in (lhs_dtype, rhs_dtype)]
  return np.dtype(jnp.result_type(*wide))


def fp8_dot_general(lhs: Any, rhs: Any, dimension_numbers: Any,
                    precision: Any = None,
                    preferred_element_type: Any = None, *,
                    lhs_scaling: Any = None, rhs_scaling: Any = None,
                    grad_scaling: Any = None, **kwargs) -> jax.Array:
  """``lax.dot_general`` computed on scaled narrow operands.

  A drop-in ``dot_general`` for ``flax.linen.Dense(dot_general=...)`` and
  ``nnx.Linear(dot_general=...)``. Forward, ``lhs`` and ``rhs`` are scaled
  and cast (saturating, round to nearest) to their formats and multiplied in
  float32; backward, the output gradient is scaled and cast to its format and
  multiplied with the quantized operands (``custom_vjp``).

  Args:
    lhs, rhs, dimension_numbers: as for ``lax.dot_general``.
    precision: ignored: products of narrow values are exact in float32.
    preferred_element_type: dtype of the result. By default the operands'
      dtype when they share one (a narrow one included), else the promoted
      dtype of the wide operands, float32 counting for narrow ones (JAX
      promotes no narrow format implicitly). A narrow result saturates at
      the format's max, as :func:`jaxfp8.cast` does; so do the gradients
      returned for narrow operands.
    lhs_scaling, rhs_scaling: how the operands are scaled: a format (current
      scaling into it), a :class:`CurrentScaling` or a
      :class:`DelayedScaling` state. Default: current scaling into e4m3.
    grad_scaling: the same for the output gradient; default current scaling
      into e5m2.
    **kwargs: accepted and ignored (``out_sharding`` from Flax).

  Returns:
    The product, of ``preferred_element_type``. The gradient with respect to
    a :class:`DelayedScaling` argument is its next state.

  >>> import jax.numpy as jnp, jaxfp8
  >>> x = jnp.array([[1.0, 2.0], [3.0, 4.0]])
  >>> dims = (((1,), (0,)), ((), ()))
  >>> fp8_dot_general(x, x, dims)  # 3 / (4 / 448) = 336 rounds to 320 in e4m3
  Array([[ 6.714..., 10.000...],
         [14.285..., 21.714...]], dtype=float32)
  >>> exact = jaxfp8.policy.CurrentScaling("e4m3", power_of_two=True)
  >>> fp8_dot_general(x, x, dims, lhs_scaling=exact, rhs_scaling=exact)
  Array([[ 7., 10.],
         [15., 22.]], dtype=float32)
  """
  del precision, kwargs
  lhs, rhs = _dot_operand(lhs, "lhs"), _dot_operand(rhs, "rhs")
  out_dtype = _out_dtype(lhs.dtype, rhs.dtype, preferred_element_type)
  static = _Static(_freeze_dims(dimension_numbers), out_dtype,
                   np.dtype(lhs.dtype), np.dtype(rhs.dtype))
  return _scaled_dot(lhs, rhs,
                     _check_scaling(lhs_scaling, "lhs_scaling", "e4m3"),
                     _check_scaling(rhs_scaling, "rhs_scaling", "e4m3"),
                     _check_scaling(grad_scaling, "grad_scaling", "e5m2"),
                     static)


def fp8_dot_general_reference(lhs, rhs, dimension_numbers, *,
                              lhs_format="e4m3", rhs_format="e4m3",
                              **kwargs) -> jax.Array:
  """Current-scaled forward in plain jnp (dequantize, then float32 dot).

  The value :func:`fp8_dot_general` must match (up to summation order).

  >>> x = jnp.array([[1.0, 2.0], [3.0, 4.0]])
  >>> fp8_dot_general_reference(x, x, (((1,), (0,)), ((), ())))
  Array([[ 6.714..., 10.000...],
         [14.285..., 21.714...]], dtype=float32)
  """
  del kwargs
  ops = []
  for x, fmt in ((lhs, lhs_format), (rhs, rhs_format)):
    q, scale = CurrentScaling(fmt).quantize(jnp.asarray(x, jnp.float32))
    ops.append(decode(q, jnp.float32) * scale)
  return lax.dot_general(ops[0], ops[1], dimension_numbers,
                         precision=lax.Precision.HIGHEST)


# The linen collection that holds delayed-scaling state; Flax's TrainState
# replaces a variable of this collection by its "gradient" (the next state).
OVERWRITE_WITH_GRADIENT = "_overwrite_with_gradient"


def split_overwrite_with_gradient(variables: Any) -> tuple[Any, Optional[Any]]:
  """``(params part, state part)`` of a linen variables dict or its gradient.

  >>> split_overwrite_with_gradient({"params": 1, OVERWRITE_WITH_GRADIENT: 2})
  ({'params': 1}, 2)
  >>> split_overwrite_with_gradient({"params": 1})
  ({'params': 1}, None)
  """
  if isinstance(variables, dict) or hasattr(variables, "keys"):
    if OVERWRITE_WITH_GRADIENT in variables:
      rest = {k: v for k, v in variables.items()
              if k != OVERWRITE_WITH_GRADIENT}
      return rest, variables[OVERWRITE_WITH_GRADIENT]
  return variables, None
