"""examples/mlp_fp8.py: fp8 training learns like bf16 (short run here)."""
from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest

pytest.importorskip("flax")

_PATH = pathlib.Path(__file__).resolve().parents[2] / "examples" / "mlp_fp8.py"


def _example():
  spec = importlib.util.spec_from_file_location("mlp_fp8", _PATH)
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module  # Flax's dataclasses look the module up
  spec.loader.exec_module(module)
  return module


def test_fp8_training_tracks_bf16(capsys):
  example = _example()
  steps = 60
  assert example.main(["--steps", str(steps)]) == 0
  last = capsys.readouterr().out.strip().splitlines()[-1]
  assert last.startswith("final_loss fp8=")
  values = dict(part.split("=") for part in last.split()[1:])
  fp8, bf16 = float(values["fp8"]), float(values["bf16"])
  # both learned (the targets' variance is about 1.3) ...
  _, x_eval, y_eval = example.make_data(0)
  variance = float(((y_eval - y_eval.mean(0)) ** 2).mean())
  assert bf16 < 0.5 * variance and fp8 < 0.5 * variance
  # ... and fp8 learned as well as bf16
  assert abs(fp8 - bf16) <= 0.10 * bf16, (fp8, bf16)
