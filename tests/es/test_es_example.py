"""examples/neuroevolution.py --quick: an fp8 population trains as well."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import xla_flags

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _default_optimization_env() -> dict[str, str]:
  """The environment without conftest's code generation flags: the example
  spends its time running 800 generations, not compiling, and runs 2.7x faster
  at XLA's default level (measured: 7.3 s against 19.5 s on 2 idle cores) and
  a further 1.3x faster with XLA's fusion emitters (10.1 s against 13.0 s)."""
  env = xla_flags.default_codegen_env(JAX_PLATFORMS="cpu")
  env["XLA_FLAGS"] = xla_flags.without(env["XLA_FLAGS"], xla_flags.OPT_LEVEL)
  return env


def test_neuroevolution_quick_fp8_matches_fp32():
  proc = subprocess.run(
      [sys.executable, os.path.join(_ROOT, "examples", "neuroevolution.py"),
       "--quick"], capture_output=True, text=True, timeout=300,
      env=_default_optimization_env())
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = proc.stdout.strip().splitlines()
  m = re.fullmatch(r"final_loss fp32=(\S+) fp8=(\S+) initial=(\S+)", lines[-1])
  assert m, lines[-1]
  fp32, fp8, initial = map(float, m.groups())
  assert abs(fp8 - fp32) <= 0.1 * fp32, (fp32, fp8)
  assert max(fp32, fp8) < initial / 10, (fp32, fp8, initial)
  # Both runs report their population's memory: fp8 is a quarter of fp32.
  mib = [float(x) for x in re.findall(r"population\s+([\d.]+) MiB", proc.stdout)]
  assert len(mib) == 2 and abs(mib[1] * 4 - mib[0]) < 0.02, mib
