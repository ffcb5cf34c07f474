"""The kernels lower through Pallas' Triton backend, checked without a GPU.

``jit(...).trace(...).lower(lowering_platforms=("cuda",))`` runs the Pallas
Triton lowering (kernel body to Triton IR) on any machine (inside
``compat.gpu_lowering_target()``: JAX >= 0.11 wants an abstract GPU device
to lower for CUDA without one), so unsupported
primitives, non-power-of-two tiles or dtype problems in the compiled path
show up in CI; what the lowering can't see (Triton's own compilation to PTX,
speed) is left to benchmarks/gpu_check.sh.
"""
from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8._src import compat
from jaxfp8._src.kernels import common
from jaxfp8._src.kernels.mx_matmul import triton as mx_matmul_lib
from jaxfp8._src.kernels.scaled_matmul import triton as scaled_matmul_lib

FP8_PAIRS = [(jnp.float8_e4m3fn, jnp.float8_e4m3fn),
             (jnp.float8_e5m2, jnp.float8_e5m2),
             (jnp.float8_e4m3fn, jnp.float8_e5m2)]
PAIR_IDS = ["e4m3", "e5m2", "mixed"]


def _lower_for_gpu(f, *args) -> str:
  with compat.gpu_lowering_target(), common.quiet_triton_deprecation(
      "compiled"):
    lowered = jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",))
  return lowered.as_text()


def _triton_calls(text: str) -> list[str]:
  return re.findall(r"custom_call @\S*triton\S* .*", text)


@pytest.mark.parametrize("dtypes", FP8_PAIRS, ids=PAIR_IDS)
@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (100, 300, 700)])
@pytest.mark.parametrize("widen", [False, True], ids=["fp8mma", "bf16mma"])
def test_scaled_matmul_lowers_to_triton(dtypes, m, n, k, widen):
  a = jax.ShapeDtypeStruct((m, k), dtypes[0])
  b = jax.ShapeDtypeStruct((n, k), dtypes[1])
  s = jax.ShapeDtypeStruct((), jnp.float32)
  tiles = common.choose_tiles(m, n, k, caps=scaled_matmul_lib._CAPS,
                              fn="test")
  f = functools.partial(scaled_matmul_lib._scaled_matmul,
                        out_dtype=np.dtype(jnp.bfloat16), mode="compiled",
                        tiles=tiles, widen=widen)
  [call] = _triton_calls(_lower_for_gpu(f, a, b, s, s))
  grid = -(-m // tiles.block_m) * -(-n // tiles.block_n)
  assert f"grid_x = {grid} : i32" in call
  assert f"num_warps = {tiles.num_warps} : i32" in call
  assert f"num_stages = {tiles.num_stages} : i32" in call


@pytest.mark.parametrize("fmts", [("mxfp8_e4m3", "mxfp8_e4m3"),
                                  ("mxfp8_e5m2", "mxfp8_e5m2"),
                                  ("mxfp8_e4m3", "mxfp8_e5m2")], ids=PAIR_IDS)
@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (100, 300, 700)])
@pytest.mark.parametrize("widen", [False, True], ids=["fp8mma", "bf16mma"])
def test_mx_matmul_lowers_both_paths_to_triton(fmts, m, n, k, widen):
  kp = -(-k // 32) * 32
  args = []
  for rows, fmt in ((m, fmts[0]), (n, fmts[1])):
    args += [jax.ShapeDtypeStruct((rows, kp), jaxfp8.mx.get_format(fmt).dtype),
             jax.ShapeDtypeStruct((rows, kp // 32), jnp.uint8)]
  tiles = common.choose_tiles(m, n, kp, caps=mx_matmul_lib._CAPS, fn="test")
  f = functools.partial(mx_matmul_lib._mx_matmul,
                        out_dtype=np.dtype(jnp.float32), mode="compiled",
                        tiles=tiles, block_size=32, path="auto", widen=widen)
  calls = _triton_calls(_lower_for_gpu(f, *args))
  names = sorted(re.search(r'name = "(\w+)"', c).group(1) for c in calls)
  assert names == ["mx_matmul", "mx_matmul_exact"]
