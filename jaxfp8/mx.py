"""MX (OCP Microscaling) block formats and NVFP4: quantize, dequantize, serve.

Formats (:data:`MX_FORMATS`), exact quantization into them (:func:`quantize`,
:class:`MXArray`, :func:`fake_quantize`), products of MX arrays
(:func:`matmul`, :func:`to_scaled` / :func:`from_scaled`) and packed weights
for serving (:func:`quantize_params`). Training in MX is a recipe of
:mod:`jaxfp8.recipes` (``recipe="mxfp8"``); the training names this module
had (``dot_general``, ``MXRecipe``, ``get_recipe``, ``linen_mx``,
``nnx_mx``, ``MXDotGeneral``, ``NnxMXDotGeneral``,
``NnxStochasticMXDotGeneral``) are deprecated aliases for this release.

>>> import jax.numpy as jnp, jaxfp8
>>> a = jaxfp8.mx.quantize(jnp.arange(32.0), "mxfp4_e2m1")
>>> a.nbytes
17
"""
from jaxfp8._src import deprecation as _deprecation
from jaxfp8._src.mx.array import dequantize as dequantize
from jaxfp8._src.mx.array import MXArray as MXArray
from jaxfp8._src.mx.array import quantize as quantize
from jaxfp8._src.mx.fake_quantize import fake_quantize as fake_quantize
from jaxfp8._src.mx.formats import get_format as get_format
from jaxfp8._src.mx.formats import MX_FORMATS as MX_FORMATS
from jaxfp8._src.mx.formats import MXFormat as MXFormat
from jaxfp8._src.mx.matmul import from_scaled as from_scaled
from jaxfp8._src.mx.matmul import matmul as matmul
from jaxfp8._src.mx.matmul import to_scaled as to_scaled
from jaxfp8._src.mx.scales import SCALE_MODES as SCALE_MODES
from jaxfp8._src.mx.serving import dequantize_params as dequantize_params
from jaxfp8._src.mx.serving import packed_bytes as packed_bytes
from jaxfp8._src.mx.serving import quantize_params as quantize_params

_SRC = "jaxfp8._src."
# Deprecated training names: name -> (module, attribute, replacement).
_DEPRECATED = {
    "MXRecipe": (_SRC + "recipes.mx_recipe", "MXRecipe",
                 "jaxfp8.recipes.get_recipe('mxfp8', **fields) (MXRecipe's "
                 "fields are its overrides) or a jaxfp8.recipes.Recipe"),
    "get_recipe": (_SRC + "recipes.mx_recipe", "get_recipe",
                   "jaxfp8.recipes.get_recipe, which reads the same MX names "
                   "and 'f=...,d=...,w=...' strings, except 'nvfp4': there "
                   "the NVFP4 training recipe; the nvfp4 format in all three "
                   "GEMMs is 'f=nvfp4,d=nvfp4,w=nvfp4'"),
    "dot_general": (_SRC + "deprecated.mx_dot", "dot_general",
                    "jaxfp8.recipes.dot_general(..., recipe='mxfp8')"),
    "MXDotGeneral": (_SRC + "deprecated.mx_flax", "MXDotGeneral",
                     "jaxfp8.recipes.RecipeDotGeneral (keys from the "
                     "'recipe' rng stream)"),
    "linen_mx": (_SRC + "deprecated.mx_flax", "linen_mx",
                 "jaxfp8.recipes.linen_recipe (whose default recipe is "
                 "'fp8_current': pass 'mxfp8')"),
    "NnxMXDotGeneral": (_SRC + "deprecated.mx_flax", "NnxMXDotGeneral",
                        "jaxfp8.recipes.NnxRecipeDotGeneral"),
    "NnxStochasticMXDotGeneral": (
        _SRC + "deprecated.mx_flax", "NnxStochasticMXDotGeneral",
        "jaxfp8.recipes.NnxRecipeDotGeneral(recipe, rngs=nnx.Rngs(recipe=seed))"),
    "nnx_mx": (_SRC + "deprecated.mx_flax", "nnx_mx",
               "jaxfp8.recipes.nnx_recipe (whose default recipe is "
               "'fp8_current': pass 'mxfp8')"),
}

__getattr__ = _deprecation.module_getattr("jaxfp8.mx", _DEPRECATED)


def __dir__():
  return sorted({*globals(), *_DEPRECATED})


__all__ = [
    "MXArray", "MXDotGeneral", "MXFormat", "MXRecipe", "MX_FORMATS",
    "NnxMXDotGeneral", "NnxStochasticMXDotGeneral", "SCALE_MODES", "dequantize", "dequantize_params",
    "dot_general", "fake_quantize", "from_scaled", "get_format", "get_recipe",
    "linen_mx", "matmul", "nnx_mx", "packed_bytes", "quantize",
    "quantize_params", "to_scaled",
]
