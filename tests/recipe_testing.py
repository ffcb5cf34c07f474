"""What the recipe Flax tests compare with: steps written with the core."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from jaxfp8 import recipes

DIMS = (((1,), (0,)), ((), ()))


def delayed_reference_step(tx, x, c):
  """A jitted ``(params, state, opt) -> (params, state, opt)``: one optax step
  of ``sum((x . kernel + bias) * c)`` through ``recipes.dot_general`` with
  ``"fp8_delayed"``, whose state's gradient is the next state."""

  @jax.jit
  def step(params, state, opt):
    loss = lambda p, s: jnp.sum((recipes.dot_general(
        x, p["kernel"], DIMS, recipe="fp8_delayed", state=s)
                                 + p["bias"]) * c)
    g, state = jax.grad(loss, argnums=(0, 1))(params, state)
    u, opt = tx.update(g, opt, params)
    return optax.apply_updates(params, u), state, opt

  return step
