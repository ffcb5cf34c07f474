"""The reference of the per-tensor scaled fp8 matmul: plain jnp,
``(a * a_scale) @ (b * b_scale).T`` with float32 accumulation.
"""
from __future__ import annotations

from typing import Any

import jax
from jax import lax
import jax.numpy as jnp

from jaxfp8._src.kernels import common


def scaled_matmul_reference(a: jax.Array, b: jax.Array, a_scale: Any,
                            b_scale: Any, *, out_dtype: Any = jnp.bfloat16
                            ) -> jax.Array:
  """Plain-jnp ``(a * a_scale) @ (b * b_scale).T``, float32 accumulation.

  The fp8 operands are widened to float32 (exactly) and multiplied at full
  float32 precision; the scales are applied to the float32 sum as in the
  kernel.

  Args:
    a: (M, K) array.
    b: (N, K) array.
    a_scale: scalar scale of ``a``.
    b_scale: scalar scale of ``b``.
    out_dtype: dtype of the result.

  Returns:
    The (M, N) product in ``out_dtype``.

  >>> import jax.numpy as jnp
  >>> a = jnp.ones((2, 3), jnp.float8_e4m3fn)
  >>> scaled_matmul_reference(a, a, 0.5, 4.0, out_dtype=jnp.float32)
  Array([[6., 6.],
         [6., 6.]], dtype=float32)
  """
  acc = lax.dot_general(a.astype(jnp.float32), b.astype(jnp.float32),
                        common.CONTRACT_K, precision=lax.Precision.HIGHEST,
                        preferred_element_type=jnp.float32)
  a_scale = jnp.asarray(a_scale, jnp.float32).reshape(())
  b_scale = jnp.asarray(b_scale, jnp.float32).reshape(())
  return common.apply_scales(acc, a_scale, b_scale).astype(out_dtype)
