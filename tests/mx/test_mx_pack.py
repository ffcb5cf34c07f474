"""Bit packing of MX element codes: the 4-, 6- and 8-bit layouts."""
from __future__ import annotations

import numpy as np

from jaxfp8 import mx
from jaxfp8._src.mx import pack as mx_pack
from mx_testing import to_device


def test_packed_bit_layouts():
  codes = to_device([0x1, 0xA, 0xF, 0x0], np.uint8)
  np.testing.assert_array_equal(mx_pack.pack(codes, 4), [0xA1, 0x0F])
  c = np.array([0b000001, 0b100010, 0b010011, 0b111100], np.uint8)
  w = int(c[0]) | int(c[1]) << 6 | int(c[2]) << 12 | int(c[3]) << 18
  np.testing.assert_array_equal(mx_pack.pack(to_device(c, np.uint8), 6),
                                [w & 0xFF, (w >> 8) & 0xFF, w >> 16])
  rng = np.random.default_rng(0)
  for bits in (4, 6, 8):
    codes = to_device(rng.integers(0, 2**bits, (3, 96)), np.uint8)
    packed = mx_pack.pack(codes, bits)
    assert packed.shape == (3, 96 * bits // 8)
    np.testing.assert_array_equal(mx_pack.unpack(packed, bits), codes)


def test_fp4_element_zero_in_low_nibble():
  x = np.zeros(32, np.float32)
  x[0], x[1] = 6.0, 0.5  # scale 1: codes 0x7 and 0x1
  a = mx.quantize(x, "mxfp4_e2m1")
  assert int(np.asarray(a.data)[0]) == 0x17
