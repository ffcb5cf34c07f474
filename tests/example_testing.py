"""Running an example script as a user would, and reading its result lines."""
from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(name: str, *args: str, cwd, timeout: float = 300):
  """``python examples/NAME ARGS`` in ``cwd`` with the checkout importable;
  the finished process (stdout, stderr, returncode)."""
  env = {**os.environ, "PYTHONPATH": os.pathsep.join(
      filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
  return subprocess.run(
      [sys.executable, os.path.join(ROOT, "examples", name), *args],
      capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def named_values(line: str, prefix: str) -> dict[str, float]:
  """``{name: value}`` of a ``prefix name=value ...`` line."""
  assert line.startswith(prefix + " "), line
  pairs = [p.split("=") for p in line.split()[1:]]
  assert all(len(p) == 2 for p in pairs), line
  return {k: float(v) for k, v in pairs}
