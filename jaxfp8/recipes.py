"""Training recipes: how each GEMM of a training step quantizes its operands.

One ``dot_general`` runs any recipe (per-tensor fp8, MX, fp8 blockwise,
NVFP4, bfloat16) in the forward GEMM and both gradient GEMMs. The Flax
names (``RecipeDotGeneral`` and ``linen_recipe`` for linen,
``NnxRecipeDotGeneral``, ``nnx_recipe``, ``NnxRecipeState`` and
``nnx_apply_recipe_state`` for nnx) load Flax on first use.

>>> import jaxfp8
>>> jaxfp8.recipes.get_recipe("fp8_blockwise").fwd[1].block
(128, 128)
"""
from jaxfp8._src.recipes.core import dot_general as dot_general
from jaxfp8._src.recipes.core import init_state as init_state
from jaxfp8._src.recipes.registry import get_recipe as get_recipe
from jaxfp8._src.recipes.registry import recipe_table as recipe_table
from jaxfp8._src.recipes.registry import RECIPES as RECIPES
from jaxfp8._src.recipes.spec import Quantizer as Quantizer
from jaxfp8._src.recipes.spec import Recipe as Recipe

# Defined in integration modules that import Flax: loaded on first use.
# name -> module under jaxfp8._src.recipes.
_FLAX_NAMES: dict[str, str] = {
    "RecipeDotGeneral": "linen", "linen_recipe": "linen",
    "NnxRecipeDotGeneral": "nnx", "NnxRecipeState": "nnx",
    "nnx_apply_recipe_state": "nnx", "nnx_recipe": "nnx",
}


def __getattr__(name: str):
  if name in _FLAX_NAMES:
    import importlib  # pylint: disable=g-import-not-at-top
    module = importlib.import_module(f"jaxfp8._src.recipes.{_FLAX_NAMES[name]}")
    return getattr(module, name)
  raise AttributeError(f"module 'jaxfp8.recipes' has no attribute {name!r}")


def __dir__():
  return sorted({*globals(), *_FLAX_NAMES})


__all__ = [
    "Quantizer", "RECIPES", "Recipe", "dot_general", "get_recipe",
    "init_state", "recipe_table", *_FLAX_NAMES,
]
