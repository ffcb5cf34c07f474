"""Training recipes: the one way to train in low precision.

A recipe says how each GEMM of a training step (forward, input gradient,
weight gradient) quantizes its two operands. One ``dot_general`` runs any
recipe (per-tensor fp8 current or delayed, fp8 blockwise, MXFP8 and the
other MX formats, the NVFP4 pretraining recipe, bfloat16); ``ragged_dot``
runs its grouped (mixture-of-experts) GEMMs (``ragged_dot_general`` the
forms JAX differentiates them into), every expert a tensor of its
own. One Flax face for each API applies them: ``RecipeDotGeneral`` and
``linen_recipe`` for linen (state in the :data:`OVERWRITE_WITH_GRADIENT`
collection, keys from the ``"recipe"`` rng stream),
``NnxRecipeDotGeneral``, ``NnxRecipeRaggedDot``, ``nnx_recipe``,
``NnxRecipeState`` and ``nnx_apply_recipe_state`` for nnx; Qwix's
``quantize_model`` runs them through ``QwixRecipeProvider`` and
``QwixRecipeRule`` (extra ``jaxfp8[qwix]``). The Flax and Qwix names load
those libraries on first use.

>>> import jaxfp8
>>> jaxfp8.recipes.get_recipe("fp8_blockwise").fwd[1].block
(128, 128)
"""
from jaxfp8._src import deprecation as _deprecation
from jaxfp8._src.recipes.core import dot_general as dot_general
from jaxfp8._src.recipes.ragged import ragged_dot as ragged_dot
from jaxfp8._src.recipes.ragged_general import ragged_dot_general as ragged_dot_general
from jaxfp8._src.recipes.reference import dot_general_reference as dot_general_reference
from jaxfp8._src.recipes.state import init_state as init_state
from jaxfp8._src.recipes.layer_state import OVERWRITE_WITH_GRADIENT as OVERWRITE_WITH_GRADIENT
from jaxfp8._src.recipes.layer_state import split_overwrite_with_gradient as split_overwrite_with_gradient
from jaxfp8._src.recipes.registry import get_recipe as get_recipe
from jaxfp8._src.recipes.registry import recipe_table as recipe_table
from jaxfp8._src.recipes.registry import RECIPES as RECIPES
from jaxfp8._src.recipes.spec import Quantizer as Quantizer
from jaxfp8._src.recipes.spec import Recipe as Recipe

# Defined in integration modules that import Flax: loaded on first use.
_FLAX_NAMES: dict[str, str] = {
    name: "jaxfp8._src.faces." + module for name, module in (
        ("RecipeDotGeneral", "linen"), ("linen_recipe", "linen"),
        ("NnxRecipeDotGeneral", "nnx"), ("NnxRecipeRaggedDot", "nnx"),
        ("NnxRecipeState", "nnx"), ("QwixRecipeProvider", "qwix_provider"),
        ("QwixRecipeRule", "qwix_provider"),
        ("nnx_apply_recipe_state", "nnx"), ("nnx_recipe", "nnx"))}

__getattr__ = _deprecation.module_getattr("jaxfp8.recipes", {}, _FLAX_NAMES)


def __dir__():
  return sorted({*globals(), *_FLAX_NAMES})


__all__ = [
    "OVERWRITE_WITH_GRADIENT", "Quantizer", "RECIPES", "Recipe",
    "dot_general", "dot_general_reference", "get_recipe", "init_state",
    "ragged_dot", "ragged_dot_general", "recipe_table", "split_overwrite_with_gradient", *_FLAX_NAMES,
]
