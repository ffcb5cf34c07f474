"""Precision policies, per-tensor scaling state, loss scales and narrow-parameter optax.

Training GEMMs in fp8 are recipes of :mod:`jaxfp8.recipes` (``"fp8_current"``,
``"fp8_delayed"``); the fp8 ``dot_general`` and its Flax modules this module
had (``fp8_dot_general``, ``fp8_dot_general_reference``, ``Fp8DotGeneral``,
``NnxFp8DotGeneral``, ``Fp8State``, ``nnx_apply_fp8_state``,
``OVERWRITE_WITH_GRADIENT``, ``split_overwrite_with_gradient``) are
deprecated aliases for this release.

>>> import jaxfp8
>>> jaxfp8.policy.get_policy("p=f32,c=e4m3,o=bf16").compute_dtype
dtype(float8_e4m3fn)
"""
from jaxfp8._src import deprecation as _deprecation
from jaxfp8._src.fp8.loss_scaling import all_finite as all_finite
from jaxfp8._src.fp8.loss_scaling import DynamicLossScale as DynamicLossScale
from jaxfp8._src.fp8.loss_scaling import loss_scale_from_jmp as loss_scale_from_jmp
from jaxfp8._src.fp8.loss_scaling import NoOpLossScale as NoOpLossScale
from jaxfp8._src.fp8.loss_scaling import StaticLossScale as StaticLossScale
from jaxfp8._src.fp8.optim import apply_updates as apply_updates
from jaxfp8._src.fp8.optim import stochastic_round as stochastic_round
from jaxfp8._src.fp8.optim import StochasticRoundingState as StochasticRoundingState
from jaxfp8._src.fp8.optim import with_stochastic_rounding as with_stochastic_rounding
from jaxfp8._src.fp8.policy import get_policy as get_policy
from jaxfp8._src.fp8.policy import Policy as Policy
from jaxfp8._src.fp8.scaling import amax as amax
from jaxfp8._src.fp8.scaling import compute_scale as compute_scale
from jaxfp8._src.fp8.scaling import CurrentScaling as CurrentScaling
from jaxfp8._src.fp8.scaling import DelayedScaling as DelayedScaling
from jaxfp8._src.fp8.scaling import dequantize as dequantize
from jaxfp8._src.fp8.scaling import quantize as quantize
from jaxfp8._src.fp8.scaling import REDUCTIONS as REDUCTIONS

_SRC = "jaxfp8._src."
_DELAYED = ("jaxfp8.recipes.dot_general(..., recipe='fp8_delayed', "
            "state=jaxfp8.recipes.init_state('fp8_delayed'))")
# Deprecated training names: name -> (module, attribute, replacement).
_DEPRECATED = {
    "fp8_dot_general": (
        _SRC + "deprecated.fp8_dot", "fp8_dot_general",
        "jaxfp8.recipes.dot_general(..., recipe='fp8_current') (with "
        "DelayedScaling arguments: " + _DELAYED + ")"),
    "fp8_dot_general_reference": (
        _SRC + "deprecated.fp8_dot", "fp8_dot_general_reference",
        "jaxfp8.recipes.dot_general_reference(..., recipe='fp8_current')"),
    "OVERWRITE_WITH_GRADIENT": (
        _SRC + "recipes.layer_state", "OVERWRITE_WITH_GRADIENT",
        "jaxfp8.recipes.OVERWRITE_WITH_GRADIENT"),
    "split_overwrite_with_gradient": (
        _SRC + "recipes.layer_state", "split_overwrite_with_gradient",
        "jaxfp8.recipes.split_overwrite_with_gradient"),
    "Fp8DotGeneral": (
        _SRC + "deprecated.fp8_flax", "Fp8DotGeneral",
        "jaxfp8.recipes.RecipeDotGeneral(recipe='fp8_delayed') (linen)"),
    "NnxFp8DotGeneral": (
        _SRC + "deprecated.fp8_flax", "NnxFp8DotGeneral",
        "jaxfp8.recipes.NnxRecipeDotGeneral('fp8_delayed') (nnx)"),
    "Fp8State": (_SRC + "deprecated.fp8_flax", "Fp8State",
                 "jaxfp8.recipes.NnxRecipeState"),
    "nnx_apply_fp8_state": (_SRC + "deprecated.fp8_flax", "nnx_apply_fp8_state",
                            "jaxfp8.recipes.nnx_apply_recipe_state"),
}

__getattr__ = _deprecation.module_getattr("jaxfp8.policy", _DEPRECATED)


def __dir__():
  return sorted({*globals(), *_DEPRECATED})


__all__ = [
    "CurrentScaling", "DelayedScaling", "DynamicLossScale", "Fp8DotGeneral",
    "Fp8State", "NnxFp8DotGeneral", "NoOpLossScale", "OVERWRITE_WITH_GRADIENT",
    "Policy", "REDUCTIONS", "StaticLossScale", "StochasticRoundingState",
    "all_finite", "amax", "apply_updates", "compute_scale", "dequantize", "fp8_dot_general",
    "fp8_dot_general_reference", "get_policy", "loss_scale_from_jmp",
    "nnx_apply_fp8_state", "quantize", "split_overwrite_with_gradient",
    "stochastic_round", "with_stochastic_rounding",
]
