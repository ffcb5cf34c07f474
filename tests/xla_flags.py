"""The XLA flags the suite compiles with (set by conftest.py), and helpers for
the subprocesses that must run without some of them.

The suite's time is mostly XLA compiling thousands of small programs that run
once, so conftest.py asks XLA's CPU backend for cheaper code generation:

- ``--xla_backend_optimization_level=0`` (LLVM ``-O0``). Results are the same
  bit for bit: LLVM keeps IEEE semantics at every level and XLA's fast math is
  off.
- ``--xla_cpu_use_fusion_emitters=false`` on jaxlib 0.10 (the flag is gone in
  0.11): XLA's elemental IR emitter instead of its MLIR fusion emitters.
  About 2.4x less compile time; the suite's wall time on 2 cores went from
  351-390 s to 255-273 s (fresh clones, 2026-12-01). Its float32 code may
  differ in the last bit between a program and its sharded twin, and more
  native float6 operations abort under it, so the tests of those properties
  run without it (:func:`default_codegen_env`), and
  tests/test_default_codegen.py runs the conversion tests again with XLA's
  own emitters.

On jaxlib 0.12 only the first exists. Of the flags that do, none tried
cuts more: ``--xla_llvm_disable_expensive_passes=true`` measured no faster
and ``--xla_cpu_parallel_codegen_split_count=1`` slower (the benchmark log,
docs/benchmarks/log.md, has the figures); ``-O0`` alone makes the newest-JAX
leg about as fast as the jaxlib 0.10 leg with both. Neither does a persistent
compilation cache shared by the workers: few programs repeat across
processes.

``JAXFP8_TEST_XLA_OPT=default`` turns both off.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys

OPT_LEVEL = "--xla_backend_optimization_level"
ELEMENTAL_EMITTER = "--xla_cpu_use_fusion_emitters=false"


def _jaxlib_minor() -> tuple[int, int]:
  # Read from the package metadata: importing jaxlib here would be harmless,
  # but XLA must not start before conftest.py has set XLA_FLAGS.
  parts = importlib.metadata.version("jaxlib").split(".")[:2]
  return int(parts[0]), int(parts[1])


def suite_flags() -> list[str]:
  """The flags conftest.py adds to ``XLA_FLAGS`` (none if asked not to)."""
  if os.environ.get("JAXFP8_TEST_XLA_OPT", "0") == "default":
    return []
  flags = [f"{OPT_LEVEL}=0"]
  if (_jaxlib_minor() < (0, 11)
      and os.environ.get("JAXFP8_TEST_XLA_EMITTERS") != "default"):
    flags.append(ELEMENTAL_EMITTER)
  return flags


def without(flags: str, *prefixes: str) -> str:
  """``flags`` (an ``XLA_FLAGS`` string) less those starting with a prefix."""
  return " ".join(f for f in flags.split()
                  if not any(f.startswith(p) for p in prefixes))


def default_codegen_env(**extra: str) -> dict[str, str]:
  """``os.environ`` with XLA's own fusion emitters (the suite's ``-O0`` kept),
  for tests of what XLA's default code generation does."""
  env = dict(os.environ, JAXFP8_TEST_XLA_EMITTERS="default", **extra)
  env["XLA_FLAGS"] = without(env.get("XLA_FLAGS", ""),
                             ELEMENTAL_EMITTER.split("=")[0])
  return env


def child_result(code: str, env: dict[str, str], *, timeout: int = 300) -> dict:
  """Runs ``python -c code`` in ``env`` and returns the JSON it printed last
  on a line starting ``RESULT `` (tests on simulated devices, which must be
  set before JAX starts)."""
  proc = subprocess.run([sys.executable, "-c", code], env=env,
                        capture_output=True, text=True, timeout=timeout)
  lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
  assert proc.returncode == 0 and lines, proc.stderr[-3000:]
  return json.loads(lines[-1][len("RESULT "):])
