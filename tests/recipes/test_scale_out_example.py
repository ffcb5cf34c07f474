"""examples/scale_out.py: FSDP training and ES across two local processes.

The example starts two processes of two CPU devices each (``--processes
2``), joined by ``jax.distributed``; here with one recipe and two steps
(``--quick`` trains five recipes for eight, about four CPU-minutes on a
2-core host).
"""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys

_ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(*args: str) -> subprocess.CompletedProcess:
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(
      filter(None, [_ROOT, os.environ.get("PYTHONPATH")]))}
  return subprocess.run(
      [sys.executable, os.path.join(_ROOT, "examples", "scale_out.py"),
       *args], capture_output=True, text=True, timeout=400, env=env)


def test_two_processes_train_and_evolve():
  proc = _run("--processes", "2", "--quick", "--recipes", "fp8_current",
              "--steps", "2", "--timeout", "360")
  assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
  out = proc.stdout
  assert out.startswith("2 processes, 4 devices (2 each, cpu)"), out
  base = re.search(r"^float32 GEMMs: all-gather (\S+) MB", out, re.M)
  assert base and float(base.group(1)) > 0, out
  m = re.search(r"^recipe=fp8_current loss=(\S+) gather_mb=(\S+) "
                r"gather_ratio=(\S+) ", out, re.M)
  assert m, out
  loss, ratio = float(m.group(1)), float(m.group(3))
  # 2 steps (the first at learning rate 0) from near-uniform guesses over
  # 256 bytes (log 256 = 5.55 nats)
  assert math.isfinite(loss) and 4.0 < loss < 7.0, out
  # The recipe's kernels travel as fp8 codes: under float32's bytes.
  assert 0 < ratio < 1.0, out
  es = re.search(r"^es popsize=64 dims=4096 dtype=float8_e4m3fn "
                 r"fitness_mean=(\S+) mean_moved=(\S+) all_reduce_kb=(\S+) "
                 r"all_gather_kb=(\S+) all_to_all_kb=(\S+) permute_kb=(\S+)",
                 out, re.M)
  assert es and float(es.group(2)) > 0, out
  # Each device drew its own members: only the fitness and the update move.
  assert float(es.group(5)) == 0 and float(es.group(6)) == 0, out
  assert float(es.group(4)) < 1.0 and float(es.group(3)) <= 16.5, out
  # Only process 0 prints.
  assert out.count("recipe=fp8_current") == 1, out


def test_a_failing_process_stops_the_launch():
  proc = _run("--processes", "2", "--quick", "--recipes", "nope",
              "--timeout", "120")
  assert proc.returncode != 0
  assert "unknown ['nope']" in proc.stderr, proc.stderr[-2000:]


def test_cluster_arguments_are_checked():
  proc = _run("--coordinator", "127.0.0.1:1")
  assert proc.returncode == 2
  assert "needs --num-processes and --process-id" in proc.stderr
  proc = _run("--processes", "2", "--auto")
  assert proc.returncode == 2 and "not with --coordinator or --auto" in (
      proc.stderr)
