"""Random numbers in FP8, FP6 and FP4, under jax.random's signatures.

>>> import jax, jax.numpy as jnp, jaxfp8
>>> x = jaxfp8.random.normal(jax.random.key(0), (1024,), jnp.float8_e4m3fn)
>>> x.dtype
dtype(float8_e4m3fn)
"""
from jaxfp8._src.random.config import default_method as default_method
from jaxfp8._src.random.config import get_default_method as get_default_method
from jaxfp8._src.random.config import METHODS as METHODS
from jaxfp8._src.random.config import set_default_method as set_default_method
from jaxfp8._src.random.samplers import normal as normal
from jaxfp8._src.random.samplers import truncated_normal as truncated_normal
from jaxfp8._src.random.samplers import uniform as uniform

__all__ = [
    "METHODS", "default_method", "get_default_method", "normal",
    "set_default_method", "truncated_normal", "uniform",
]
