"""What the Mosaic GPU kernels share (``kernels/mosaic_gpu_common.py``): the
run mode as a function of platform and compute capability, the tiles.
"""
from __future__ import annotations


import pytest

from jaxfp8._src.kernels import mosaic_gpu_common


@pytest.mark.parametrize("platform,cc,interpret,mode", [
    ("gpu", 90, None, "compiled"), ("gpu", 100, None, "reference"),
    ("gpu", 89, None, "reference"), ("cpu", None, None, "reference"),
    ("tpu", None, None, "reference"), ("gpu", 90, False, "compiled")])
def test_mode_is_a_function_of_platform_and_compute_capability(
    platform, cc, interpret, mode):
  assert mosaic_gpu_common.resolve_mode(interpret, "f", platform=platform,
                             compute_capability=cc) == mode


def test_compiled_mode_needs_hopper():
  for cc in (89, 100):
    with pytest.raises(NotImplementedError, match="Hopper GPU, compute "
                       "capability 9.x"):
      mosaic_gpu_common.resolve_mode(False, "f", platform="gpu", compute_capability=cc)
  with pytest.raises(NotImplementedError, match="'cpu' backend"):
    mosaic_gpu_common.resolve_mode(False, "f", platform="cpu")
  with pytest.raises(TypeError, match="`interpret` argument to `f`"):
    mosaic_gpu_common.resolve_mode("yes", "f")


def test_tiles_are_checked_and_fit_shared_memory():
  with pytest.raises(ValueError, match="`block_m` argument to `f`.*got 32"):
    mosaic_gpu_common.choose_tiles(64, 64, 64, fn="f", block_m=32)
  with pytest.raises(ValueError, match="`block_n`.*got 24"):
    mosaic_gpu_common.choose_tiles(64, 64, 64, fn="f", block_n=24)
  with pytest.raises(ValueError, match="multiple of 128"):
    mosaic_gpu_common.choose_tiles(64, 64, 64, fn="f", block_k=32, k_multiple=128)
  with pytest.raises(ValueError, match="shared memory"):
    mosaic_gpu_common.choose_tiles(64, 64, 64, fn="f", block_m=128, block_n=256,
                        max_concurrent_steps=8)
  big = mosaic_gpu_common.choose_tiles(8192, 8192, 8192, fn="f", out_itemsize=2)
  assert (big.block_m, big.block_n, big.block_k,
          big.max_concurrent_steps) == (128, 128, 128, 4)
  small = mosaic_gpu_common.choose_tiles(3, 40, 70, fn="f")
  assert (small.block_m, small.block_n) == (64, 64)
