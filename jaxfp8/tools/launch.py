"""Starts local processes that join one JAX runtime, and watches them.

What a multi-process run on one machine needs, for the tests
(tests/multiprocess.py) and the examples (examples/scale_out.py): a free
coordinator port, each process's environment (CPU devices simulated by
``XLA_FLAGS``), and a watch that never hangs: the processes of a
``jax.distributed`` run wait for each other in collectives, so when one
fails or the deadline passes, :func:`launch` kills the rest at once.

>>> import sys
>>> done = launch([[sys.executable, "-c", "print('hi')"]], timeout=60)
>>> done.failed, done.timed_out, done.outputs[0].strip()
(None, False, 'hi')
"""
from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import tempfile
import time
from typing import Mapping, Optional, Sequence

_DEVICE_COUNT = "--xla_force_host_platform_device_count"


def free_port() -> int:
  """A TCP port free on 127.0.0.1 now (for the coordinator)."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def cpu_env(local_devices: int, base: Optional[Mapping[str, str]] = None,
            **extra: str) -> dict[str, str]:
  """``base`` (default: this process's environment) for a CPU process of
  ``local_devices`` simulated devices: ``JAX_PLATFORMS=cpu`` and ``XLA_FLAGS``
  with its device count replaced; ``extra`` variables added.

  >>> env = cpu_env(2, {"XLA_FLAGS": "--xla_force_host_platform_device_count"
  ...                   "=8 --xla_cpu_use_thunk_runtime=true"})
  >>> env["XLA_FLAGS"]
  '--xla_cpu_use_thunk_runtime=true --xla_force_host_platform_device_count=2'
  """
  env = dict(os.environ if base is None else base, JAX_PLATFORMS="cpu",
             **extra)
  env["XLA_FLAGS"] = " ".join(
      [f for f in env.get("XLA_FLAGS", "").split()
       if not f.startswith(_DEVICE_COUNT)]
      + [f"{_DEVICE_COUNT}={local_devices}"])
  return env


@dataclasses.dataclass(frozen=True)
class Finished:
  """How the processes of one :func:`launch` ended.

  Attributes:
    returncodes: each process's exit code (negative: killed by a signal,
      as the others are when one fails or the deadline passes).
    outputs: each process's output, stdout and stderr merged ("" for one
      whose output went to the terminal).
    failed: the index of the first process seen to exit non-zero (the
      others then killed), or None.
    timed_out: whether the deadline passed first (every process killed).
  """
  returncodes: tuple[int, ...]
  outputs: tuple[str, ...]
  failed: Optional[int]
  timed_out: bool

  @property
  def ok(self) -> bool:
    return self.failed is None and not self.timed_out


def launch(commands: Sequence[Sequence[str]],
           envs: Optional[Sequence[Mapping[str, str]]] = None, *,
           timeout: float, first_to_terminal: bool = False) -> Finished:
  """Runs ``commands`` at once, one process each, until all exit, one exits
  non-zero (the rest are killed), or ``timeout`` seconds pass (all killed).

  Output goes to temporary files, not pipes: a pipe nobody reads while the
  processes run would block the one that fills it.

  Args:
    commands: one argument list per process.
    envs: one environment per process (default: this process's).
    timeout: the deadline in seconds, for all of them together.
    first_to_terminal: process 0 writes to this process's stdout and stderr
      (a demo's live output) instead of a file.

  Returns:
    A :class:`Finished`.
  """
  if envs is not None and len(envs) != len(commands):
    raise ValueError(f"`envs` argument to `launch` must have one entry per "
                     f"command ({len(commands)}), got {len(envs)}")
  logs, procs = [], []
  try:
    for i, cmd in enumerate(commands):
      log = (None if i == 0 and first_to_terminal
             else tempfile.TemporaryFile("w+"))
      logs.append(log)
      procs.append(subprocess.Popen(
          list(cmd), env=None if envs is None else dict(envs[i]),
          stdout=log, stderr=None if log is None else subprocess.STDOUT,
          text=True))
    deadline = time.monotonic() + timeout
    failed, timed_out = None, False
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
  outputs = []
  for log in logs:
    if log is None:
      outputs.append("")
      continue
    log.seek(0)
    outputs.append(log.read())
    log.close()
  if failed is None and not timed_out:
    failed = next((i for i, p in enumerate(procs) if p.returncode), None)
  return Finished(tuple(p.returncode for p in procs), tuple(outputs),
                  failed, timed_out)
