"""examples/transformer_lm.py --quick: every recipe asked for trains."""
from __future__ import annotations

import math
import re

from example_testing import named_values as _losses
from example_testing import run_example

_NAMES = ("bf16", "fp8_delayed", "nvfp4")  # --quick's: stateless, state, keys


def test_quick_run_trains_every_recipe_and_draws_the_curves(tmp_path):
  png = tmp_path / "curves.png"
  proc = run_example("transformer_lm.py", "--quick", "--out", str(png),
                     cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = proc.stdout.strip().splitlines()
  final = _losses(lines[-2], "final_loss")
  held = _losses(lines[-1], "heldout_loss")
  assert tuple(final) == _NAMES and tuple(held) == _NAMES, lines[-2:]
  assert all(math.isfinite(v) for v in (*final.values(), *held.values()))
  # The first step's loss of each run, from its progress line: training
  # lowers it (a uniform guess over 256 bytes is log 256 = 5.55 nats).
  first = {m.group(1): float(m.group(2)) for m in re.finditer(
      r"^\[(\w+)\] step 1/\d+ loss (\S+)$", proc.stdout, re.M)}
  assert tuple(first) == _NAMES, proc.stdout
  assert final["bf16"] < first["bf16"] - 1.0, (first, final)
  assert final["bf16"] < math.log(256) - 1.0, final
  for name in _NAMES:
    assert final[name] < first[name], (name, first, final)
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert "reference corpus" in proc.stdout
