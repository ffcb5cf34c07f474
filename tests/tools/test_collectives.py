"""``jaxfp8.tools.collectives``: the bytes of a program's collectives."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxfp8.tools.collectives import collective_bytes
from jaxfp8.tools.collectives import KINDS

# Lines as XLA prints them (CPU's synchronous forms, GPU's async pairs).
_HLO = """
  %all-gather = f32[512,1024]{1,0} all-gather(f32[128,1024]{1,0} %p), channel_id=1, dimensions={0}
  %all-gather.1 = f8e4m3fn[512,1024]{1,0} all-gather(f8e4m3fn[128,1024]{1,0} %q), dimensions={0}
  %all-reduce = s32[] all-reduce(%m), channel_id=2, to_apply=%max
  %all-reduce.2 = (f32[16]{0}, bf16[8,2]{1,0}) all-reduce(%a, %b), to_apply=%add
  %ags = (u8[32,64]{1,0}, u8[128,64]{1,0}) all-gather-start(u8[32,64]{1,0} %c), dimensions={0}
  %agd = u8[128,64]{1,0} all-gather-done((u8[32,64]{1,0}, u8[128,64]{1,0}) %ags)
  %fusion = f32[512,1024]{1,0} fusion(%all-gather), kind=kLoop, calls=%f
"""


def test_each_kind_sums_its_results_bytes():
  got = collective_bytes(_HLO)
  assert set(got) == set(KINDS)
  # float32 and fp8 gathers, then the async start's result only
  assert got["all-gather"] == 512 * 1024 * 4 + 512 * 1024 + 128 * 64
  assert got["all-reduce"] == 4 + 16 * 4 + 8 * 2 * 2
  assert got["reduce-scatter"] == got["all-to-all"] == 0


def test_a_program_on_one_device_communicates_nothing():
  compiled = jax.jit(lambda x: x @ x.T).lower(jnp.ones((8, 8))).compile()
  assert collective_bytes(compiled) == dict.fromkeys(KINDS, 0)


def test_bad_input_is_named():
  with pytest.raises(TypeError, match="`compiled` argument to "
                                      "`collective_bytes`.*int"):
    collective_bytes(3)
  with pytest.raises(ValueError, match="unknown HLO element type 'f9'"):
    collective_bytes("%x = f9[4]{0} all-reduce(%y), to_apply=%add")
