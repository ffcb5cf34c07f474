"""Exact float64 references and checks shared by the GEMM kernel tests.

Every kernel result is compared with the float64 product of the dequantized
operands: elementwise within ``rtol * (|a| @ |b|.T)`` (the float32
accumulation bound) plus the output's own rounding (bf16: 2^-8 relative),
and, for float32 outputs, norm-wise within ``rtol``. The skips of the
compiled and interpreted test classes, and the CUDA lowering without a GPU,
are here too: every op's tests share them.
"""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8._src import compat
from jaxfp8._src.kernels import common
from jaxfp8._src.kernels import mosaic_gpu_common
from jaxfp8._src.kernels import triton_common

TINY = 2.0**-126  # float32 results below this may be flushed on CPU


def f64(x) -> np.ndarray:
  """Exact float64 values of an array (fp8 widened in NumPy)."""
  return np.asarray(x, np.float64)


def fp8(rng, shape, dtype, spread=0):
  """Normal samples times random powers of two (per row), cast to fp8."""
  x = rng.standard_normal(shape) * np.exp2(rng.integers(
      -spread, spread + 1, (shape[0],) + (1,) * (len(shape) - 1)))
  return jnp.asarray(np.clip(x, -400, 400), dtype)


def mx_f64(x) -> np.ndarray:
  """Exact float64 values of an mxfp8 MXArray (NaN where the scale is NaN)."""
  d = f64(np.asarray(x.data))
  c = np.asarray(x.scales).astype(np.int64)
  s = np.where(c == 255, np.nan, np.exp2(c - 127.0))
  v = d.reshape(d.shape[0], -1, x.block_size) * s[..., None]
  return v.reshape(d.shape)[:, :x.shape[1]]


def check(out, ref, bound, out_dtype, *, rtol: float = 1e-5) -> None:
  """``out`` against the float64 ``ref`` (see the module docstring)."""
  out = np.asarray(out).astype(np.float64)  # in NumPy: no eager astype
  assert out.shape == ref.shape, (out.shape, ref.shape)
  rounding = 2.0**-8 if np.dtype(out_dtype) == np.dtype(jnp.bfloat16) else 0.0
  err = np.abs(out - ref)
  allowed = rtol * bound + rounding * np.abs(ref) + TINY
  assert np.all(err <= allowed), f"max excess {np.max(err - allowed)}"
  if np.dtype(out_dtype) == np.float32 and np.linalg.norm(ref) > 0:
    rel = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    assert rel < rtol, rel


# -- where a kernel runs: the skips of the compiled and interpreted classes ----

def skip_unless_triton_gpu() -> None:
  """Skips unless the Triton kernels compile here (a GPU, cc >= 8.9)."""
  if jax.default_backend() == "cpu":
    pytest.skip("compiled Pallas kernels need a GPU")
  cc = common.gpu_compute_capability()
  if cc is not None and cc < triton_common.MIN_COMPUTE_CAPABILITY:
    pytest.skip(f"fp8 Triton dots need compute capability >= 8.9, this "
                f"GPU has {cc / 10:.1f}")


def skip_unless_cpu() -> None:
  """Skips on a GPU, where the compiled classes cover what the
  interpreted ones would only repeat, slowly."""
  if jax.default_backend() != "cpu":
    pytest.skip("interpreted on CPU; the compiled tests cover this backend")


def skip_unless_hopper() -> None:
  """Skips unless the Mosaic GPU kernels compile here (cc 9.x)."""
  if jax.default_backend() != "gpu":
    pytest.skip("compiled Mosaic GPU kernels need a GPU")
  cc = common.gpu_compute_capability()
  if not mosaic_gpu_common.is_hopper(cc):
    pytest.skip(f"the kernels' wgmma needs compute capability 9.x "
                f"(Hopper), this GPU has {cc}")


def skip_unless_mosaic_interpreter() -> None:
  """Skips where JAX has no Mosaic GPU interpreter (before 0.11), or on a
  GPU."""
  if compat.mosaic_gpu_interpret_params() is None:
    pytest.skip(f"JAX {jax.__version__} has no Mosaic GPU interpreter "
                "(JAX >= 0.11 ships it)")
  if jax.default_backend() == "gpu":
    pytest.skip("interpreted on CPU; the compiled tests cover this GPU")


# -- lowering for CUDA without a GPU -------------------------------------------

def lowered_mosaic_gpu(f, *args) -> str:
  """The CUDA lowering of ``jit(f)`` (Mosaic GPU kernels), as text."""
  with compat.gpu_lowering_target():
    return jax.jit(f).trace(*args).lower(
        lowering_platforms=("cuda",)).as_text()


def lowered_triton(f, *args) -> str:
  """The CUDA lowering of ``jit(f)`` (Triton kernels), as text."""
  with compat.gpu_lowering_target(), triton_common.quiet_triton_deprecation(
      "compiled"):
    lowered = jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",))
  return lowered.as_text()


def triton_calls(text: str) -> list[str]:
  """The Triton custom calls of a lowering."""
  return re.findall(r"custom_call @\S*triton\S* .*", text)


# What the Mosaic GPU kernel tests share: operand pairs, result dtypes,
# shapes (odd ones over several ragged tiles, and one tile) and the shapes
# lowered for CUDA.
E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2
PAIRS = [(E4M3, E4M3), (E5M2, E5M2), (E4M3, E5M2)]
PAIR_IDS = ["e4m3", "e5m2", "mixed"]
F32, BF16 = np.dtype(jnp.float32), np.dtype(jnp.bfloat16)
# (M, N, K, tiles)
SHAPES = [(37, 45, 200, dict(block_n=32)), (130, 70, 300, {}),
          (8, 16, 64, {})]
SHAPE_IDS = ["odd", "ragged-2x1", "one-tile"]
LOWER_SHAPES = [(4096, 4096, 4096), (100, 300, 700)]
OUTS = [np.dtype(jnp.bfloat16), np.dtype(jnp.float32)]


def skip_unless_mixed_pair(pair) -> None:
  """Skips where this JAX's Mosaic GPU wgmma takes no mixed fp8 pair."""
  if not mosaic_gpu_common.takes_pair(*pair):
    pytest.skip(f"this JAX's Mosaic GPU wgmma takes no mixed fp8 pair "
                f"({jax.__version__})")
