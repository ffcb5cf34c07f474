"""The fp8 ``dot_general`` of earlier releases (``jaxfp8.policy.fp8_dot_general``).

Deprecated: it is the recipe core with a per-tensor recipe
(``jaxfp8.recipes.dot_general(..., recipe="fp8_current")``, or
``"fp8_delayed"`` with ``state=``), kept so that code written for it gives
the same numbers for this release.

Forward, both operands are scaled and cast to their narrow formats (e4m3 by
default) and multiplied with float32 accumulation; backward, the output
gradient is scaled and cast to its own format (e5m2 by default) and
multiplied with the *quantized* forward operands, as fp8 training on
Hopper-class GPUs does. Scaling is current (each tensor's own amax) or
delayed (:class:`jaxfp8.policy.DelayedScaling` state).

Delayed-scaling state is an argument of the ``custom_vjp``; its "gradient" is
the next state (input and kernel amaxes are recorded forward, the output
gradient's backward). This is Flax's *overwrite with gradient* convention:
the Flax modules (:mod:`jaxfp8._src.deprecated.fp8_flax`) keep the state in the
``_overwrite_with_gradient`` collection, which
``flax.training.train_state.TrainState`` replaces with its gradient instead
of handing it to the optimizer. A state used by two calls in one step would
receive the sum of two states: give each call its own.

This module is the op's interface alone and imports no framework: the
scalings become a per-tensor :class:`~jaxfp8._src.recipes.spec.Recipe`
(``x`` and ``w`` quantized once forward and kept as codes for the backward
GEMMs, ``dy`` once backward) run by the recipe core,
:mod:`jaxfp8._src.recipes.core`, whose per-tensor GEMMs multiply the codes
(the fp8 kernel dispatch) and then each scale.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np

from jaxfp8._src.fp8 import scaling
from jaxfp8._src.fp8.scaling import CurrentScaling
from jaxfp8._src.fp8.scaling import DelayedScaling
from jaxfp8._src.recipes import mx_gemm as gemm_lib
from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics.codes import as_float32
from jaxfp8._src.numerics.codes import CodeArray
from jaxfp8._src.numerics.codes import decode
from jaxfp8._src.numerics.host import device_array
from jaxfp8._src.recipes import core
from jaxfp8._src.recipes import spec

DimensionNumbers = tuple[tuple[Sequence[int], Sequence[int]],
                         tuple[Sequence[int], Sequence[int]]]


def _quantizer(s) -> spec.Quantizer:
  """The core's per-tensor quantizer of a scaling object."""
  return spec.Quantizer("tensor", s.format,
                        scale="pow2" if s.power_of_two else "float32",
                        delayed=isinstance(s, DelayedScaling),
                        margin=s.margin)


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
  return core.default_out_dtype(lhs_dtype, rhs_dtype)


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
  scalings = (_check_scaling(lhs_scaling, "lhs_scaling", "e4m3"),
              _check_scaling(rhs_scaling, "rhs_scaling", "e4m3"),
              _check_scaling(grad_scaling, "grad_scaling", "e5m2"))
  qx, qw, qg = (_quantizer(s) for s in scalings)
  recipe = spec.Recipe(fwd=(qx, qw), dgrad=(qg, qw), wgrad=(qx, qg),
                       name="fp8_dot_general")
  # The DelayedScaling arguments themselves are the core's state, so their
  # gradients are the next states.
  state = {role: s for role, s in zip(spec.ROLES, scalings)
           if isinstance(s, DelayedScaling)}
  dims = gemm_lib.check_dims(dimension_numbers, lhs.shape, rhs.shape,
                             fn="fp8_dot_general")
  return core.apply(lhs, rhs, dims, recipe, out_dtype=out_dtype,
                    state=state or None)


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
