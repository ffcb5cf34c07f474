"""benchmarks/gpu_check.py: its checks catch wrong results; it skips by budget.

The full ``--cpu-smoke`` (every code path in the interpreters, about a minute
on two cores) is run by hand; these tests cover, in seconds, the parts whose
failure would go unseen on a GPU: the bound that decides PASS and FAIL, and
the budget logic that drops work and says so.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(name="gpu_check")
def _gpu_check():
  """A fresh copy of the script (it keeps its results in module globals)."""
  spec = importlib.util.spec_from_file_location(
      "gpu_check", ROOT / "benchmarks" / "gpu_check.py")
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def test_compare_passes_the_product_and_fails_a_wrong_or_unwritten_one(
    gpu_check):
  rng = np.random.default_rng(0)
  av, bv = rng.standard_normal((8, 64)), rng.standard_normal((6, 64))
  ref = av @ bv.T
  f32 = np.float32
  assert gpu_check.compare("ok", ref.astype(f32), av, bv, f32)
  wrong = ref.copy()
  wrong[3, 2] += 1e-3 * np.abs(av[3]) @ np.abs(bv[2])
  assert not gpu_check.compare("wrong", wrong.astype(f32), av, bv, f32)
  # Within the fp8 MMA bound of a 64-long accumulation, not float32's.
  assert gpu_check.compare("mma", wrong.astype(f32), av, bv, f32,
                           tol=gpu_check.mma_tol(4096))
  unwritten = ref.copy()
  unwritten[5:, :] = np.nan  # a tile left as the poisoned memory had it
  assert not gpu_check.compare("nan", unwritten.astype(f32), av, bv, f32,
                               tol=gpu_check.mma_tol(4096))
  # tol=0: exact, as the checks of -1/0/1 operands ask; one ulp off fails.
  av, bv = rng.integers(-1, 2, (8, 64)), rng.integers(-1, 2, (6, 64))
  exact = (av @ bv.T).astype(f32)
  assert gpu_check.compare("exact", exact, av, bv, f32, tol=0)
  exact[0, 0] = np.nextafter(exact[0, 0], f32(np.inf))
  assert not gpu_check.compare("ulp", exact, av, bv, f32, tol=0)
  assert [c["ok"] for c in gpu_check.RESULTS["checks"]] == [
      True, False, True, False, True, False]


def test_mma_tolerance_grows_with_the_accumulation_chain(gpu_check):
  assert gpu_check.mma_tol(32) == pytest.approx(1e-5 + 2.0**-12)
  assert gpu_check.mma_tol(4096) == pytest.approx(1e-5 + 128 * 2.0**-12)


def test_a_spent_budget_skips_the_work_and_says_so(gpu_check, tmp_path,
                                                   monkeypatch, capsys):
  monkeypatch.setenv("OUT", str(tmp_path))
  assert gpu_check.main(["--cpu-smoke", "--budget", "0",
                         "--skip-correctness"]) == 0
  out = capsys.readouterr().out
  skipped = json.loads((tmp_path / "gpu_check.json").read_text())["skipped"]
  text = " ".join(skipped)
  for what in ("timings at 128^3", "training step bf16",
               "training step fp8_blockwise"):
    assert what in text, skipped
  assert "time budget" in text
  # The short table and the skipped list come last.
  tail = out.rstrip().splitlines()
  assert tail[-1].startswith(f"skipped ({len(skipped)}):"), tail[-3:]
  assert "## GPU check" in out and "| met |" in out
