"""Runs test code on several local JAX processes joined by JAX's runtime.

:func:`run` starts ``processes`` Python processes on this machine, each with
``local_devices`` simulated CPU devices, joined into one global runtime by
``jax.distributed.initialize`` (gloo collectives, the CPU backend's), and
returns what each printed; :func:`run_one` runs the same code in one
process holding all the devices, the reference a multi-process result must
equal. The code sees ``PROCESSES`` (its count) and runs after JAX is joined,
so ``jax.devices()`` is the global list in both.

A process that fails or exits makes the others wait in a collective, so
:func:`run` watches them all (:func:`jaxfp8.tools.launch.launch`): the first
to exit non-zero, or the deadline, kills the rest and fails the test with
each process's last output.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from jaxfp8.tools import launch

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


def _env(processes: int, local_devices: int, **extra: str) -> dict[str, str]:
  return launch.cpu_env(local_devices, JAXFP8_TEST_PROCESSES=str(processes),
                        **extra)


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
  port = launch.free_port()
  command = [sys.executable, "-c", _PREAMBLE + textwrap.dedent(code)]
  done = launch.launch(
      [command] * processes,
      [_env(processes, local_devices, **(env or {}),
            JAXFP8_TEST_COORDINATOR=f"127.0.0.1:{port}",
            JAXFP8_TEST_PROCESS_ID=str(i)) for i in range(processes)],
      timeout=timeout)
  outs = done.outputs
  if done.failed is not None:
    pytest.fail(f"process {done.failed} of {processes} exited with code "
                f"{done.returncodes[done.failed]} (the others were killed); "
                f"its output ends:\n{outs[done.failed][-3000:]}")
  if done.timed_out:
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
