"""The forms jaxfp8._src.mx.tuning chooses between per JAX version: each
flag's two forms give the same bits.

The flags are read at trace time, so each setting gets a trace of its own:
a cleared jit cache or a freshly made function."""
from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxfp8 import mx
from jaxfp8._src.mx import pack as mx_pack
from jaxfp8._src.mx import quantize as mx_quantize
from jaxfp8._src.mx import scales
from jaxfp8._src.mx import tuning


@pytest.mark.parametrize("tiny", [False, True])
@pytest.mark.parametrize("fmt", ["mxfp6_e2m3", "mxfp6_e3m2"])
def test_6bit_packing_is_the_same_in_the_branch_or_after_it(fmt, tiny,
                                                            monkeypatch):
  # tuning.PACK_6BIT_IN_BRANCH picks where the codes are packed (per JAX
  # version, for speed): both places give the same bytes, in the fast branch
  # and (a block below its range) the exact one, NaN blocks included.
  rng = np.random.default_rng(3)
  x = rng.standard_normal((8, 256)).astype(np.float32)
  x[1, 40] = np.nan
  if tiny:
    x[2, :32] *= np.float32(2.0**-130)  # a block below the fast path's range
  got = {}
  for placement in (True, False):
    monkeypatch.setattr(tuning, "PACK_6BIT_IN_BRANCH", placement)
    mx_quantize._quantize_jit.clear_cache()
    q = mx.quantize(jax.device_put(x), fmt)
    got[placement] = (np.asarray(q.data), np.asarray(q.scales))
  mx_quantize._quantize_jit.clear_cache()
  for a, b in zip(got[True], got[False]):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("block_size", [16, 32])
def test_block_maxima_are_the_same_either_way(block_size, monkeypatch):
  # tuning.MAX_OF_ROW_PAIRS picks how blocks of 16 are reduced (per JAX
  # version, for speed): both ways give the same maxima, NaN and Inf too.
  x = np.random.default_rng(4).standard_normal((4, 256)).astype(np.float32)
  x[1, 17], x[2, 40], x[3, :16] = np.nan, -np.inf, -0.0
  bits = jax.device_put(x.view(np.uint32))
  want = np.abs(x).reshape(4, -1, block_size).view(np.uint32).max(axis=-1)
  for pairs in (True, False):
    monkeypatch.setattr(tuning, "MAX_OF_ROW_PAIRS", pairs)
    # A fresh function each time: a jit of the same one would reuse the
    # first trace, made under the other setting.
    got = jax.jit(lambda b: scales.block_max(b, block_size))(bits)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("runs", [True, False])
@pytest.mark.parametrize("n", [4, 8, 12, 16, 20, 32, 48, 96, 100])
def test_6bit_packing_is_the_little_endian_bit_stream(n, runs, monkeypatch):
  """Each row's codes c_i as the integer sum c_i << 6i, in n * 3 / 4 bytes
  little-endian: whole sets of four groups and the groups left over, written
  and read either way ``tuning.PACK_6BIT_AS_RUNS`` and
  ``tuning.UNPACK_6BIT_FROM_WORDS`` pick (per JAX version)."""
  monkeypatch.setattr(tuning, "PACK_6BIT_AS_RUNS", runs)
  monkeypatch.setattr(tuning, "UNPACK_6BIT_FROM_WORDS", runs)
  # Bits above the low 6 are set too: packing ignores them.
  raw = np.random.default_rng(n).integers(0, 256, (2, n)).astype(np.uint8)
  codes = raw & 0x3F
  want = [list(sum(int(c) << (6 * i) for i, c in enumerate(row)).to_bytes(
      n * 3 // 4, "little")) for row in codes]
  # Traced afresh (a new function) under this setting; unpack in the same
  # program, which outside jit would compile a program per op. Both ways to
  # the bytes: pack's own, and the two steps a quantizer splits by a branch.
  got, steps, back = jax.jit(lambda c: (
      mx_pack.pack(c, 6),
      mx_pack.pack_bytes(mx_pack.pack_groups(c, 6), 6),
      mx_pack.unpack(mx_pack.pack(c, 6), 6)))(raw)
  np.testing.assert_array_equal(got, np.array(want, np.uint8))
  np.testing.assert_array_equal(steps, np.array(want, np.uint8))
  np.testing.assert_array_equal(back, codes)
