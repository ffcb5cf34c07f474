"""Initializers correct in every narrow format, with jax.nn.initializers' API.

>>> import jax, jax.numpy as jnp, jaxfp8
>>> init = jaxfp8.nn.initializers.lecun_normal()
>>> w = init(jax.random.key(0), (128, 64), jnp.float8_e4m3fn)
>>> w.dtype, bool(jnp.isnan(w.astype(jnp.float32)).any())
(dtype(float8_e4m3fn), False)
"""
from jaxfp8._src.nn.init_range import FormatRangeWarning as FormatRangeWarning
from jaxfp8._src.nn.initializers import constant as constant
from jaxfp8._src.nn.initializers import delta_orthogonal as delta_orthogonal
from jaxfp8._src.nn.initializers import glorot_normal as glorot_normal
from jaxfp8._src.nn.initializers import glorot_uniform as glorot_uniform
from jaxfp8._src.nn.initializers import he_normal as he_normal
from jaxfp8._src.nn.initializers import he_uniform as he_uniform
from jaxfp8._src.nn.initializers import Initializer as Initializer
from jaxfp8._src.nn.initializers import kaiming_normal as kaiming_normal
from jaxfp8._src.nn.initializers import kaiming_uniform as kaiming_uniform
from jaxfp8._src.nn.initializers import lecun_normal as lecun_normal
from jaxfp8._src.nn.initializers import lecun_uniform as lecun_uniform
from jaxfp8._src.nn.initializers import normal as normal
from jaxfp8._src.nn.initializers import ones as ones
from jaxfp8._src.nn.initializers import orthogonal as orthogonal
from jaxfp8._src.nn.initializers import truncated_normal as truncated_normal
from jaxfp8._src.nn.initializers import uniform as uniform
from jaxfp8._src.nn.initializers import variance_scaling as variance_scaling
from jaxfp8._src.nn.initializers import xavier_normal as xavier_normal
from jaxfp8._src.nn.initializers import xavier_uniform as xavier_uniform
from jaxfp8._src.nn.initializers import zeros as zeros

__all__ = [
    "FormatRangeWarning", "Initializer", "constant", "delta_orthogonal",
    "glorot_normal", "glorot_uniform", "he_normal", "he_uniform",
    "kaiming_normal", "kaiming_uniform", "lecun_normal", "lecun_uniform",
    "normal", "ones", "orthogonal", "truncated_normal", "uniform",
    "variance_scaling", "xavier_normal", "xavier_uniform", "zeros",
]
