"""Per-tensor scaling of narrow tensors, and loss scales for narrow trees.

Current scaling (the scale from this tensor's amax) and delayed scaling (from
an amax history, Transformer Engine's recipe) for fp8 training, and jmp-style
loss scales. The same names stay importable from :mod:`jaxfp8.policy`.

>>> import jax.numpy as jnp, jaxfp8
>>> x = jnp.array([0.5, -3.0, 896.0])
>>> scale = jaxfp8.scaling.compute_scale(jaxfp8.scaling.amax(x), "e4m3")
>>> scale
Array(2., dtype=float32)
>>> jaxfp8.scaling.quantize(x, "e4m3", scale)
Array([0.25, -1.5, 448], dtype=float8_e4m3fn)
"""
from jaxfp8._src.fp8.loss_scaling import all_finite as all_finite
from jaxfp8._src.fp8.loss_scaling import DynamicLossScale as DynamicLossScale
from jaxfp8._src.fp8.loss_scaling import loss_scale_from_jmp as loss_scale_from_jmp
from jaxfp8._src.fp8.loss_scaling import NoOpLossScale as NoOpLossScale
from jaxfp8._src.fp8.loss_scaling import StaticLossScale as StaticLossScale
from jaxfp8._src.fp8.scaling import amax as amax
from jaxfp8._src.fp8.scaling import compute_scale as compute_scale
from jaxfp8._src.fp8.scaling import CurrentScaling as CurrentScaling
from jaxfp8._src.fp8.scaling import DelayedScaling as DelayedScaling
from jaxfp8._src.fp8.scaling import dequantize as dequantize
from jaxfp8._src.fp8.scaling import quantize as quantize
from jaxfp8._src.fp8.scaling import REDUCTIONS as REDUCTIONS

__all__ = [
    "CurrentScaling", "DelayedScaling", "DynamicLossScale", "NoOpLossScale",
    "REDUCTIONS", "StaticLossScale", "all_finite", "amax", "compute_scale",
    "dequantize", "loss_scale_from_jmp", "quantize",
]
