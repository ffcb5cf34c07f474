"""examples/mx_train.py, short: it trains, serves and prints its final line."""
from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_example_short_run():
  out = subprocess.run(
      [sys.executable, os.path.join(ROOT, "examples", "mx_train.py"),
       "--steps", "40"], capture_output=True, text=True, timeout=600,
      cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, check=True).stdout
  last = out.strip().splitlines()[-1]
  m = re.fullmatch(r"final_loss bf16=(\S+) mxfp8=(\S+) mxfp8_hp_wgrad=(\S+) "
                   r"serve_mxfp4=(\S+) serve_mxfp8=(\S+)", last)
  assert m, out
  bf16, mxfp8, hp, s4, s8 = map(float, m.groups())
  assert mxfp8 <= 1.10 * bf16 and hp <= 1.10 * bf16
  assert s8 <= 1.05 * mxfp8 and s4 <= 1.5 * mxfp8
  assert "0.531 B/weight" in out
