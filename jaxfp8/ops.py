"""Pallas kernels for fp8 and MXFP8 matrix products, and their jnp references.

>>> import jax.numpy as jnp, jaxfp8
>>> a = jnp.ones((2, 32), jnp.float8_e4m3fn)
>>> jaxfp8.ops.scaled_matmul(a, a, 2.0, 0.5, out_dtype=jnp.float32)
Array([[32., 32.],
       [32., 32.]], dtype=float32)
"""
from jaxfp8._src.kernels.dispatch import dot_general as dot_general
from jaxfp8._src.kernels.mx_matmul import mx_matmul as mx_matmul
from jaxfp8._src.kernels.mx_matmul import mx_matmul_reference as mx_matmul_reference
from jaxfp8._src.kernels.mx_matmul import MXFP8_FORMATS as MXFP8_FORMATS
from jaxfp8._src.kernels.scaled_matmul import scaled_matmul as scaled_matmul
from jaxfp8._src.kernels.scaled_matmul import scaled_matmul_reference as scaled_matmul_reference

__all__ = [
    "MXFP8_FORMATS", "dot_general", "mx_matmul", "mx_matmul_reference", "scaled_matmul",
    "scaled_matmul_reference",
]
