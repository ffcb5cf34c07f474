"""What the Triton kernels share: their run mode, their tiles and launch
parameters, and a quiet lowering.

The Triton kernels (``scaled_matmul/triton.py``, ``mx_matmul/triton.py``)
are written with Pallas' Triton backend, which JAX deprecates from 0.11 in
favour of Mosaic GPU; they stay, selectable, because they run on any GPU of
compute capability >= 8.9, where the Mosaic GPU kernels' ``wgmma`` needs
9.x. A kernel
runs in one of three modes, picked from the ``interpret`` argument:

- ``"compiled"``: ``pl.pallas_call`` lowered by the Triton backend (GPU only).
- ``"interpret"``: the same ``pl.pallas_call`` run by Pallas' interpreter
  (any backend; slow, for tests).
- ``"reference"``: the plain-jnp reference of the op, no Pallas at all.

``interpret=None`` means compiled on a GPU and reference elsewhere.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any
import warnings

import jax
import numpy as np

from jaxfp8._src.kernels import common

# Triton's fp8 conversions and dots need compute capability 8.9 (Ada, Hopper).
MIN_COMPUTE_CAPABILITY = 89


def resolve_mode(interpret: Any, fn: str) -> str:
  """Returns "compiled", "interpret" or "reference" for ``interpret``."""
  if interpret is not None and not isinstance(interpret, (bool, np.bool_)):
    raise TypeError(f"`interpret` argument to `{fn}` must be None, True or "
                    f"False, got {interpret!r}")
  backend = jax.default_backend()
  if interpret:
    return "interpret"
  if backend != "gpu":
    if interpret is None:
      return "reference"
    raise NotImplementedError(
        f"`{fn}` with interpret=False needs a GPU: the kernel is compiled by "
        f"Pallas' Triton backend, and the default backend is {backend!r}. "
        "Use interpret=True (Pallas interpreter) or interpret=None (jnp "
        "reference).")
  cc = common.gpu_compute_capability()
  if cc is not None and cc < MIN_COMPUTE_CAPABILITY:
    raise NotImplementedError(
        f"`{fn}` needs a GPU of compute capability >= 8.9 for fp8 tensor-core "
        f"dots (Triton has no fp8 dot below it); this one is {cc / 10:.1f}. "
        "Use interpret=True or the reference.")
  return "compiled"


@dataclasses.dataclass(frozen=True)
class Tiles:
  """Tile sizes and Triton launch parameters of one kernel call."""
  block_m: int
  block_n: int
  block_k: int
  num_warps: int
  num_stages: int
  group_m: int


def _check_tile(v: Any, arg: str, fn: str, minimum: int) -> int:
  if (not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1
      or v & (v - 1)):
    raise ValueError(f"`{arg}` argument to `{fn}` must be a power of two "
                     f"(Triton tiles are), got {v!r}")
  if v < minimum:
    raise ValueError(f"`{arg}` argument to `{fn}` must be at least {minimum} "
                     f"(the smallest fp8 MMA tile), got {v}")
  return int(v)


def choose_tiles(m: int, n: int, k: int, *, caps: tuple[int, int, int],
                 fn: str, min_k: int = 32, block_m: int | None = None,
                 block_n: int | None = None, block_k: int | None = None,
                 num_warps: int | None = None, num_stages: int | None = None,
                 group_m: int = 8) -> Tiles:
  """Tiles for an (m, n, k) product: given ones checked, the rest defaulted.

  Defaults are the largest power of two up to ``caps`` that the problem
  fills (at least 16 along M and N, ``min_k`` along K); shapes that don't
  divide the tiles are zero-padded by the caller.
  """
  bm = (common.pow2_at_least(m, 16) if block_m is None else
        _check_tile(block_m, "block_m", fn, 16))
  bn = (common.pow2_at_least(n, 16) if block_n is None else
        _check_tile(block_n, "block_n", fn, 16))
  bk = (common.pow2_at_least(k, min_k) if block_k is None else
        _check_tile(block_k, "block_k", fn, min_k))
  if block_m is None:
    bm = min(bm, caps[0])
  if block_n is None:
    bn = min(bn, caps[1])
  if block_k is None:
    bk = min(bk, max(caps[2], min_k))
  if num_warps is None:
    num_warps = 8 if bm * bn >= 128 * 128 else 4
  if num_stages is None:
    num_stages = 3
  for v, arg in ((num_warps, "num_warps"), (num_stages, "num_stages"),
                 (group_m, "group_m")):
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
      raise ValueError(f"`{arg}` argument to `{fn}` must be a positive "
                       f"integer, got {v!r}")
  return Tiles(bm, bn, bk, int(num_warps), int(num_stages), int(group_m))


def compiler_params(mode: str, tiles: Tiles):
  """Triton launch parameters for compiled mode (None otherwise)."""
  if mode != "compiled":
    return None
  from jax.experimental.pallas import triton as pltriton  # pylint: disable=g-import-not-at-top
  return pltriton.CompilerParams(num_warps=tiles.num_warps,
                                 num_stages=tiles.num_stages)


# JAX >= 0.11 warns on every Pallas-Triton lowering that the backend is
# deprecated (Mosaic GPU is its successor); the kernels are Triton's by
# design, so the warning tells a caller nothing they can act on.
_TRITON_DEPRECATION = "The Pallas Triton backend is deprecated"


@contextlib.contextmanager
def quiet_triton_deprecation(mode: str):
  """Silences only JAX's Triton-backend DeprecationWarning in compiled mode.

  The warning is raised when a compiled kernel is lowered (its first call per
  shape); other warnings, and other modes, pass through untouched.
  """
  if mode != "compiled":
    yield
    return
  with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=_TRITON_DEPRECATION,
                            category=DeprecationWarning)
    yield
