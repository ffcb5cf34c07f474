"""The forward GEMM of a recipe in plain jnp: the exact dequantized operands
multiplied in float32.

:func:`dot_general_reference` quantizes ``lhs`` and ``rhs`` with the
recipe's forward quantizers, the same quantizer objects the core and the
kernels use, and multiplies their exact values at HIGHEST precision (the
core's own fallback, :func:`jaxfp8._src.recipes.gemm.dequantized_product`):
the value every kernel path of :func:`~jaxfp8._src.recipes.core.dot_general`
must equal up to the order of its float32 sums.
"""
from __future__ import annotations

from typing import Any

import jax

from jaxfp8._src.recipes import core
from jaxfp8._src.recipes import gemm
from jaxfp8._src.recipes import operand
from jaxfp8._src.recipes import registry


def dot_general_reference(lhs: Any, rhs: Any, dimension_numbers: Any, *,
                          recipe: Any = "fp8_current", key: Any = None,
                          state: Any = None,
                          preferred_element_type: Any = None) -> jax.Array:
  """The forward product of ``recipe``'s quantized operands, exact.

  Args:
    lhs, rhs, dimension_numbers: as for ``lax.dot_general``.
    recipe: anything :func:`~jaxfp8._src.recipes.registry.get_recipe`
      reads; its ``fwd`` quantizers apply.
    key: for recipes that need one (as :func:`~jaxfp8.recipes.dot_general`
      splits it, so the two agree).
    state: for delayed scaling (``init_state(recipe)``).
    preferred_element_type: the result dtype (default as ``dot_general``).

  Returns:
    The product, no gradient rule of its own (a reference, not a layer).

  >>> import jax.numpy as jnp
  >>> x = jnp.array([[1.0, 2.0], [3.0, 4.0]])
  >>> dot_general_reference(x, x, (((1,), (0,)), ((), ())))
  Array([[ 6.714..., 10.000...],
         [14.285..., 21.714...]], dtype=float32)
  """
  fn = "dot_general_reference"
  recipe = registry.get_recipe(recipe)
  if preferred_element_type is not None:
    preferred_element_type = core.run_options(
        "auto", None, preferred_element_type, fn=fn)[1]
  lhs, rhs, dims, out_dtype, key, state = core.check_call(
      lhs, rhs, dimension_numbers, recipe, preferred_element_type, key,
      state, fn=fn)
  if key is not None and any(recipe.gemm_needs_key(g)
                             for g in ("dgrad", "wgrad")):
    # The forward key of the core's split (see its module docstring).
    key = jax.random.split(key)[0] if recipe.gemm_needs_key("fwd") else None
  states = state or {}
  qx, qw = recipe.fwd
  a = gemm.prepare(operand.float32(lhs), qx, states.get("x"))
  b = gemm.prepare(operand.float32(rhs), qw, states.get("w"))
  out = gemm.dequantized_product(a, b, dims, key)
  return core.to_dtype(out, out_dtype)
