"""MX (OCP Microscaling) block formats and NVFP4: quantize, dequantize, matmul.

>>> import jax.numpy as jnp, jaxfp8
>>> a = jaxfp8.mx.quantize(jnp.arange(32.0), "mxfp4_e2m1")
>>> a.nbytes
17
"""
from jaxfp8._src.mx.array import dequantize as dequantize
from jaxfp8._src.mx.array import MXArray as MXArray
from jaxfp8._src.mx.array import quantize as quantize
from jaxfp8._src.mx.formats import get_format as get_format
from jaxfp8._src.mx.formats import MX_FORMATS as MX_FORMATS
from jaxfp8._src.mx.formats import MXFormat as MXFormat
from jaxfp8._src.mx.matmul import from_scaled as from_scaled
from jaxfp8._src.mx.matmul import matmul as matmul
from jaxfp8._src.mx.matmul import to_scaled as to_scaled
from jaxfp8._src.mx.recipes import get_recipe as get_recipe
from jaxfp8._src.mx.recipes import MXRecipe as MXRecipe
from jaxfp8._src.mx.scales import SCALE_MODES as SCALE_MODES
from jaxfp8._src.mx.serving import dequantize_params as dequantize_params
from jaxfp8._src.mx.serving import packed_bytes as packed_bytes
from jaxfp8._src.mx.serving import quantize_params as quantize_params
from jaxfp8._src.mx.train import dot_general as dot_general
from jaxfp8._src.mx.train import fake_quantize as fake_quantize

# Defined in jaxfp8._src.mx.linen and jaxfp8._src.mx.nnx, which import Flax:
# loaded on first use.
_LINEN_NAMES = ("MXDotGeneral", "linen_mx")
_NNX_NAMES = ("NnxMXDotGeneral", "NnxStochasticMXDotGeneral", "nnx_mx")


def __getattr__(name: str):
  if name in _LINEN_NAMES:
    from jaxfp8._src.mx import linen as mx_linen  # pylint: disable=g-import-not-at-top
    return getattr(mx_linen, name)
  if name in _NNX_NAMES:
    from jaxfp8._src.mx import nnx as mx_nnx  # pylint: disable=g-import-not-at-top
    return getattr(mx_nnx, name)
  raise AttributeError(f"module 'jaxfp8.mx' has no attribute {name!r}")


def __dir__():
  return sorted({*globals(), *_LINEN_NAMES, *_NNX_NAMES})


__all__ = [
    "MXArray", "MXDotGeneral", "MXFormat", "MXRecipe", "MX_FORMATS",
    "NnxMXDotGeneral", "NnxStochasticMXDotGeneral", "SCALE_MODES", "dequantize", "dequantize_params",
    "dot_general", "fake_quantize", "from_scaled", "get_format", "get_recipe",
    "linen_mx", "matmul", "nnx_mx", "packed_bytes", "quantize",
    "quantize_params", "to_scaled",
]
