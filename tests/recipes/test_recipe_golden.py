"""``fp8_dot_general`` and ``mx.dot_general`` give the bits they gave before
the recipe core: forward values and every gradient (operands, next delayed
states), against files recorded from the code before it (make_golden.py
says how, and that they must never be regenerated from the current code).

XLA's float32 code differs in the last bit across JAX versions, so each JAX
version has its own file; a JAX without one skips (record one from the old
code to cover it).
"""
from __future__ import annotations

import jax
import numpy as np
import pytest

import make_golden

PATH = make_golden.golden_path(jax.__version__)
pytestmark = pytest.mark.skipif(
    not PATH.exists(), reason=f"no golden file for JAX {jax.__version__}")


@pytest.fixture(scope="module")
def golden():
  meta, cases = make_golden.load(PATH)
  assert meta["jax"] == jax.__version__
  return cases


def test_golden_file_covers_every_case(golden):
  assert sorted(golden) == sorted(make_golden.CASES)
  assert PATH.stat().st_size < 1_000_000


@pytest.mark.parametrize("name", list(make_golden.CASES))
def test_same_bits_as_before_the_recipe_core(golden, name):
  got = make_golden.run_case(name)
  want = golden[name]
  assert [str(a.dtype) for a in got] == [d for d, _ in want]
  for i, (a, (_, bits)) in enumerate(zip(got, want)):
    diff = make_golden.bits(a) != bits
    assert not diff.any(), (
        f"{name}: leaf {i} differs in {int(diff.sum())} of {diff.size} "
        f"elements")
