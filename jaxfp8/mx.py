"""MX (OCP Microscaling) block formats and NVFP4: quantize, dequantize, matmul.

>>> import jax.numpy as jnp, jaxfp8
>>> a = jaxfp8.mx.quantize(jnp.arange(32.0), "mxfp4_e2m1")
>>> a.nbytes
17
"""
from jaxfp8._src.mx.array import dequantize as dequantize
from jaxfp8._src.mx.array import MXArray as MXArray
from jaxfp8._src.mx.array import quantize as quantize
from jaxfp8._src.mx.matmul import from_scaled as from_scaled
from jaxfp8._src.mx.matmul import matmul as matmul
from jaxfp8._src.mx.matmul import to_scaled as to_scaled
from jaxfp8._src.mx.formats import get_format as get_format
from jaxfp8._src.mx.formats import MX_FORMATS as MX_FORMATS
from jaxfp8._src.mx.formats import MXFormat as MXFormat
from jaxfp8._src.mx.recipes import get_recipe as get_recipe
from jaxfp8._src.mx.recipes import MXRecipe as MXRecipe
from jaxfp8._src.mx.scales import SCALE_MODES as SCALE_MODES
from jaxfp8._src.mx.train import dot_general as dot_general
from jaxfp8._src.mx.train import fake_quantize as fake_quantize

# Defined in jaxfp8._src.mx.flax_modules, which imports Flax: loaded on first use.
_FLAX_NAMES = (
    "MXDotGeneral", "NnxMXDotGeneral", "NnxStochasticMXDotGeneral",
    "dequantize_params", "linen_mx", "nnx_mx", "packed_bytes",
    "quantize_params",
)


def __getattr__(name: str):
  if name in _FLAX_NAMES:
    from jaxfp8._src.mx import flax_modules as mx_flax  # pylint: disable=g-import-not-at-top
    return getattr(mx_flax, name)
  raise AttributeError(f"module 'jaxfp8.mx' has no attribute {name!r}")


def __dir__():
  return sorted({*globals(), *_FLAX_NAMES})


__all__ = [
    "MXArray", "MXDotGeneral", "MXFormat", "MXRecipe", "MX_FORMATS",
    "NnxMXDotGeneral", "NnxStochasticMXDotGeneral", "SCALE_MODES", "dequantize", "dequantize_params",
    "dot_general", "fake_quantize", "from_scaled", "get_format", "get_recipe",
    "linen_mx", "matmul", "nnx_mx", "packed_bytes", "quantize",
    "quantize_params", "to_scaled",
]
