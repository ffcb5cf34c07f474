"""Precision policies, scaling, an fp8 ``dot_general`` and narrow-parameter optax.

The Flax names (``Fp8DotGeneral`` for linen, ``NnxFp8DotGeneral`` and
``Fp8State`` for nnx, and their helpers) load Flax on first use.
"""
from jaxfp8._src.fp8.dot import fp8_dot_general as fp8_dot_general
from jaxfp8._src.fp8.dot import fp8_dot_general_reference as fp8_dot_general_reference
from jaxfp8._src.fp8.dot import OVERWRITE_WITH_GRADIENT as OVERWRITE_WITH_GRADIENT
from jaxfp8._src.fp8.dot import split_overwrite_with_gradient as split_overwrite_with_gradient
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

# Defined in jaxfp8._src.fp8.flax_modules, which imports Flax: loaded on first use.
_FLAX_NAMES = (
    "Fp8DotGeneral", "Fp8State", "NnxFp8DotGeneral", "nnx_apply_fp8_state",
)


def __getattr__(name: str):
  if name in _FLAX_NAMES:
    from jaxfp8._src.fp8 import flax_modules as fp8_flax  # pylint: disable=g-import-not-at-top
    return getattr(fp8_flax, name)
  raise AttributeError(f"module 'jaxfp8.policy' has no attribute {name!r}")


def __dir__():
  return sorted({*globals(), *_FLAX_NAMES})


__all__ = [
    "CurrentScaling", "DelayedScaling", "DynamicLossScale", "Fp8DotGeneral",
    "Fp8State", "NnxFp8DotGeneral", "NoOpLossScale", "OVERWRITE_WITH_GRADIENT",
    "Policy", "REDUCTIONS", "StaticLossScale", "StochasticRoundingState",
    "all_finite", "amax", "apply_updates", "compute_scale", "dequantize", "fp8_dot_general",
    "fp8_dot_general_reference", "get_policy", "loss_scale_from_jmp",
    "nnx_apply_fp8_state", "quantize", "split_overwrite_with_gradient",
    "stochastic_round", "with_stochastic_rounding",
]
