"""Runs test code on several local JAX processes joined by JAX's runtime.

:func:`run` starts ``processes`` Python processes on this machine, each with
``local_devices`` simulated CPU devices, joined into one global runtime by
``jax.distributed.initialize`` (gloo collectives, the CPU backend's), and
returns what each printed; :func:`run_one` runs the same code in one
process holding all the devices, the reference a multi-process result must
equal. The code sees ``PROCESSES`` (its count) and runs after JAX is joined,
so ``jax.devices()`` is the global list in both.

A process that fails or exits makes the others wait in a collective, so
:func:`run` watches them all: the first to exit non-zero, or the deadline,
kills the rest and fails the test with each process's last output.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

_PREAMBLE = textwrap.dedent(r"""
    import json, os, sys, traceback

    def _exit_now(*exc_info):
      # At once: a normal exit would first wait for the other processes in
      # jax.distributed's shutdown barrier.
      traceback.print_exception(*exc_info)
      sys.stderr.flush()
      os._exit(1)

    sys.excepthook = _exit_now
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    PROCESSES = int(os.environ["JAXFP8_TEST_PROCESSES"])
    if PROCESSES > 1:
      jax.distributed.initialize(
          os.environ["JAXFP8_TEST_COORDINATOR"], PROCESSES,
          int(os.environ["JAXFP8_TEST_PROCESS_ID"]),
          initialization_timeout=60)
    assert jax.process_count() == PROCESSES, jax.process_count()

    def emit(result):
      print("RESULT " + json.dumps(result), flush=True)
""")


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env(processes: int, local_devices: int, **extra: str) -> dict[str, str]:
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             JAXFP8_TEST_PROCESSES=str(processes), **extra)
  env["XLA_FLAGS"] = " ".join(
      [f for f in env.get("XLA_FLAGS", "").split()
       if not f.startswith("--xla_force_host_platform_device_count")]
      + [f"--xla_force_host_platform_device_count={local_devices}"])
  return env


def _result(out: str, what: str) -> dict:
  lines = [l for l in out.splitlines() if l.startswith("RESULT ")]
  if not lines:
    pytest.fail(f"{what} printed no RESULT line; its output ends:\n"
                f"{out[-2000:]}")
  return json.loads(lines[-1][len("RESULT "):])


def run(code: str, *, processes: int = 2, local_devices: int = 2,
        env: dict[str, str] | None = None,
        timeout: float = 240.0) -> list[dict]:
  """Runs ``code`` on ``processes`` joined processes; their RESULTs, in order.

  ``code`` calls ``emit(dict)`` (JSON) to return its result; ``env`` adds
  environment variables (where to write files, say). Fails the test (never
  hangs) when a process exits non-zero or the deadline passes.
  """
  port = _free_port()
  logs, procs = [], []
  for i in range(processes):
    log = tempfile.TemporaryFile("w+")
    child_env = _env(processes, local_devices, **(env or {}),
                     JAXFP8_TEST_COORDINATOR=f"127.0.0.1:{port}",
                     JAXFP8_TEST_PROCESS_ID=str(i))
    procs.append(subprocess.Popen(
        [sys.executable, "-c", _PREAMBLE + textwrap.dedent(code)],
        env=child_env,
        stdout=log, stderr=subprocess.STDOUT, text=True))
    logs.append(log)
  deadline = time.monotonic() + timeout
  failed, timed_out = None, False
  try:
    while any(p.poll() is None for p in procs):
      failed = next((i for i, p in enumerate(procs)
                     if p.poll() not in (None, 0)), None)
      timed_out = time.monotonic() > deadline
      if failed is not None or timed_out:
        break
      time.sleep(0.05)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
    for p in procs:
      p.wait()
  outs = []
  for log in logs:
    log.seek(0)
    outs.append(log.read())
    log.close()
  if failed is None and not timed_out:
    failed = next((i for i, p in enumerate(procs) if p.returncode), None)
  if failed is not None:
    pytest.fail(f"process {failed} of {processes} exited with code "
                f"{procs[failed].returncode} (the others were killed); its "
                f"output ends:\n{outs[failed][-3000:]}")
  if timed_out:
    tails = "\n".join(f"--- process {i} ---\n{o[-1500:]}"
                      for i, o in enumerate(outs))
    pytest.fail(f"{processes} processes did not finish within {timeout} s "
                f"(killed):\n{tails}")
  return [_result(o, f"process {i}") for i, o in enumerate(outs)]


def run_one(code: str, *, devices: int = 4,
            env: dict[str, str] | None = None,
            timeout: float = 240.0) -> dict:
  """Runs ``code`` in one process holding ``devices`` devices; its RESULT."""
  try:
    proc = subprocess.run(
        [sys.executable, "-c", _PREAMBLE + textwrap.dedent(code)],
        env=_env(1, devices, **(env or {})), capture_output=True, text=True,
        timeout=timeout)
  except subprocess.TimeoutExpired as e:  # run() killed it
    out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (
        e.stdout or "")
    pytest.fail(f"the one-process run did not finish within {timeout} s "
                f"(killed); its output ends:\n{out[-3000:]}")
  if proc.returncode != 0:
    pytest.fail(f"the one-process run exited with code {proc.returncode}; "
                f"its output ends:\n{(proc.stdout + proc.stderr)[-3000:]}")
  return _result(proc.stdout, "the one-process run")
