"""examples/evolve_snn.py --quick: an fp8 evosax population, twice the size
in fewer bytes, evolves a spyx spiking policy for CartPole as the float32
one does."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

for _name in ("evosax", "spyx", "gymnax"):
  pytest.importorskip(_name, reason=f"examples/evolve_snn.py needs {_name} "
                      f"(pip install -e \".[es]\")")

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_evolve_snn_quick_fp8_reaches_fp32(tmp_path):
  png = tmp_path / "curve.png"
  proc = subprocess.run(
      [sys.executable, os.path.join(_ROOT, "examples", "evolve_snn.py"),
       "--quick", "--out", str(png)], capture_output=True, text=True,
      timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  out = proc.stdout
  lines = out.strip().splitlines()
  m = re.fullmatch(r"final_return fp32=(\S+) fp8=(\S+) fp8_popsize=(\d+) "
                   r"fp32_popsize=(\d+)", lines[-1])
  assert m, lines[-1]
  fp32, fp8 = float(m[1]), float(m[2])
  fp8_popsize, fp32_popsize = int(m[3]), int(m[4])
  assert fp8_popsize == 2 * fp32_popsize
  head = re.search(r"(\d+) env steps max.*initial mean policy return (\S+)",
                   lines[0])
  assert head, lines[0]
  max_steps, initial = int(head[1]), float(head[2])
  # Both runs learn to balance the pole (the initial policy drops it early),
  # and the fp8 run, at twice the population, does as well as float32.
  assert initial < max_steps / 2, (initial, max_steps)
  assert fp8 >= 0.9 * max_steps, (fp8, max_steps)
  assert fp32 >= max_steps / 2, (fp32, max_steps)
  assert fp8 >= fp32 - 0.05 * max_steps, (fp32, fp8)
  # The population held between ask and tell: twice the members in fewer
  # bytes (fp8 noise against float32 members).
  held = [int(x.replace(",", "")) for x in
          re.findall(r"held between ask and tell ([\d,]+) bytes", out)]
  assert len(held) == 2 and held[1] < held[0], held
  sampling = re.findall(r"sampling ([\d.]+) ms per generation", out)
  assert len(sampling) == 2 and all(float(s) > 0 for s in sampling)
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
