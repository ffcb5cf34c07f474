"""MX (OCP Microscaling) block formats and NVFP4: quantize, dequantize, matmul.

>>> import jax.numpy as jnp, jaxfp8
>>> a = jaxfp8.mx.quantize(jnp.arange(32.0), "mxfp4_e2m1")
>>> a.nbytes
17
"""
from jaxfp8._src.mx import dequantize as dequantize
from jaxfp8._src.mx import MXArray as MXArray
from jaxfp8._src.mx import quantize as quantize
from jaxfp8._src.mx_dot import from_scaled as from_scaled
from jaxfp8._src.mx_dot import matmul as matmul
from jaxfp8._src.mx_dot import to_scaled as to_scaled
from jaxfp8._src.mx_formats import get_format as get_format
from jaxfp8._src.mx_formats import MX_FORMATS as MX_FORMATS
from jaxfp8._src.mx_formats import MXFormat as MXFormat
from jaxfp8._src.mx_quantize import SCALE_MODES as SCALE_MODES

__all__ = [
    "MXArray", "MXFormat", "MX_FORMATS", "SCALE_MODES", "dequantize",
    "from_scaled", "get_format", "matmul", "quantize", "to_scaled",
]
