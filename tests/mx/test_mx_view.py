"""MXArray views (transpose, reshape, indexing) against the same views of
the dequantized values."""
from __future__ import annotations

import numpy as np
import pytest

from jaxfp8 import mx
from mx_testing import device_normal


@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp6_e3m2", "mxfp4_e2m1",
                                 "nvfp4"])
def test_views_match_the_dequantized_views(fmt):
  x = device_normal(0, (2, 3, 96))
  a = mx.quantize(x, fmt)
  d = np.asarray(a.dequantize())
  np.testing.assert_array_equal(a.T.dequantize(), d.T)
  np.testing.assert_array_equal(a.transpose(1, 2, 0).dequantize(),
                                d.transpose(1, 2, 0))
  np.testing.assert_array_equal(a.reshape(6, 96).dequantize(),
                                d.reshape(6, 96))
  np.testing.assert_array_equal(a.reshape(3, 2, 1, 96).dequantize(),
                                d.reshape(3, 2, 1, 96))
  b = a.T  # blocked axis first
  bs = a.block_size
  for idx in [(1,), (1, slice(None), slice(bs, None)), (Ellipsis, slice(0, bs)),
              (slice(None, None, -1), 2, slice(bs, 2 * bs))]:
    np.testing.assert_array_equal(a[idx].dequantize(), d[idx])
  np.testing.assert_array_equal(b[bs:, 1:].dequantize(), d.T[bs:, 1:])
  packed = a[0, :, bs:]
  assert packed.nbytes < a.nbytes
  with pytest.raises(IndexError, match="int index on its blocked axis"):
    a[..., 3]
  with pytest.raises(IndexError, match="block boundaries"):
    a[..., 1:]
  with pytest.raises(ValueError, match="keep the blocked axis"):
    a.reshape(2, 288)
  with pytest.raises(ValueError, match="permutation"):
    a.transpose(0, 0, 1)
