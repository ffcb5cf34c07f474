"""What every kernel shares (``kernels/common.py``): the grouped program
order.
"""
from __future__ import annotations


import jax
import numpy as np
import pytest

from jaxfp8._src.kernels import common


@pytest.mark.parametrize("grid_m,grid_n,group_m", [(10, 3, 4), (5, 7, 8),
                                                    (1, 1, 8), (9, 2, 1)])
def test_grouped_program_order_covers_every_tile_once(grid_m, grid_n,
                                                      group_m):
  pids = jax.device_put(np.arange(grid_m * grid_n, dtype=np.int32))
  i, j = common.tile_of_program(pids, grid_m, grid_n, group_m)
  tiles = sorted(zip(np.asarray(i).tolist(), np.asarray(j).tolist()))
  assert tiles == [(a, b) for a in range(grid_m) for b in range(grid_n)]
