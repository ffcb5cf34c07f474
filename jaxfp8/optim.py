"""Optax with narrow parameters: stochastic rounding and saturating updates.

``with_stochastic_rounding`` wraps an optax transformation so that fp8 (or
float6, float4) parameters take their updates with stochastic rounding;
``apply_updates`` saturates into each parameter's format. The same names stay
importable from :mod:`jaxfp8.policy`.

>>> import jax, jax.numpy as jnp, optax, jaxfp8
>>> params = {"w": jnp.ones(4, jnp.float8_e4m3fn)}
>>> tx = jaxfp8.optim.with_stochastic_rounding(optax.sgd(1e-3),
...                                            key=jax.random.key(0))
>>> state = tx.init(params)
>>> updates, state = tx.update({"w": -jnp.ones(4)}, state, params)
>>> jaxfp8.optim.apply_updates(params, updates)["w"].dtype
dtype(float8_e4m3fn)
"""
from jaxfp8._src.fp8.optim import apply_updates as apply_updates
from jaxfp8._src.fp8.optim import stochastic_round as stochastic_round
from jaxfp8._src.fp8.optim import StochasticRoundingState as StochasticRoundingState
from jaxfp8._src.fp8.optim import with_stochastic_rounding as with_stochastic_rounding

__all__ = [
    "StochasticRoundingState", "apply_updates", "stochastic_round",
    "with_stochastic_rounding",
]
