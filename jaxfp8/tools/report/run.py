"""Runs the report's operations in worker subprocesses, crash-isolated.

Each worker serves one side (native JAX or jaxfp8) and many formats in turn;
the parent sends one task per line and reads ``BEGIN``/``RESULT`` lines back
(see :mod:`jaxfp8.tools.report.worker`). When a worker dies, the task it had begun becomes the
cell "abort" (with the signal and XLA's last message) and the tasks after it
run in a fresh worker; a task that does not answer in time is a "timeout".
The time limit counts from a task's ``BEGIN``: a worker's start (importing
JAX, under whatever load the machine has) and the gap between tasks get
:data:`START_SECONDS` at least.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import os
import pathlib
import queue
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from jaxfp8.tools.report import worker as report_worker

SIDES = ("native", "jaxfp8")
# How long a worker may take to start or to begin its next task, whatever
# the per-operation timeout: starting one imports JAX (seconds idle, tens of
# seconds on a loaded machine), and that is not the operation hanging.
START_SECONDS = 120.0
# XLA spends most of the report compiling; its CPU backend at optimization
# level 0 compiles the samplers faster (about 1.5x less worker CPU time).
# Measured on JAX 0.10.2 over 3 formats x 44 operations: every value is the
# same, except that float32 QR (orthogonal) moves 2-3 of 65,536 entries
# across a rounding boundary. --xla-opt turns this off.
FAST_XLA_FLAGS = ("--xla_backend_optimization_level=0 "
                  "--xla_llvm_disable_expensive_passes=true")
_BOOT = (
    "import sys\n"
    "if sys.path and sys.path[0] == '': del sys.path[0]\n"
    "import importlib.util as u\n"
    "s = u.spec_from_file_location('_jaxfp8_report_worker', sys.argv[1])\n"
    "m = u.module_from_spec(s); sys.modules[s.name] = m\n"
    "s.loader.exec_module(m)\n"
    "sys.exit(m.main())\n")


# -- running the workers ------------------------------------------------------------
@dataclasses.dataclass
class Job:
  side: str
  fmt: str
  ops: list[str]


def task_id(fmt: str, op: str) -> str:
  return f"{fmt}::{op}"


def worker_env(fast_compile: bool) -> dict[str, str]:
  env = dict(os.environ)
  # The directory holding the jaxfp8 package (jaxfp8/tools/report/run.py).
  root = str(pathlib.Path(__file__).resolve().parents[3])
  env["PYTHONPATH"] = os.pathsep.join(
      p for p in (root, env.get("PYTHONPATH", "")) if p)
  if fast_compile:
    env["XLA_FLAGS"] = " ".join(
        p for p in (env.get("XLA_FLAGS", ""), FAST_XLA_FLAGS) if p)
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
  return env


def _crash_message(rc: int, stderr: str) -> str:
  if rc < 0:
    try:
      what = signal.Signals(-rc).name
    except ValueError:
      what = f"signal {-rc}"
  else:
    what = f"exit code {rc}"
  lines = [l.strip() for l in stderr.splitlines() if l.strip()]
  reason = next((l for l in lines if "Check failed" in l or "Fatal" in l
                 or l[:1] == "F" and l[1:5].isdigit()),
                lines[-1] if lines else "")
  if "] " in reason:
    reason = reason.split("] ", 1)[1]
  return f"{what}: {reason[:160]}" if reason else what


class Worker:
  """One worker subprocess of one side, fed tasks line by line."""

  def __init__(self, side: str, n: int, seed: int, env: dict[str, str]):
    self.side = side
    self._err = tempfile.TemporaryFile("w+")
    self.proc = subprocess.Popen(
        [sys.executable, "-c", _BOOT, report_worker.__file__],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
        text=True, env=env)
    self.lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=self._pump, daemon=True).start()
    self._send(json.dumps({"side": side, "n": n, "seed": seed}))

  def _pump(self):
    for line in self.proc.stdout:
      self.lines.put(line)
    self.lines.put(None)

  def _send(self, line: str) -> bool:
    try:
      self.proc.stdin.write(line + "\n")
      self.proc.stdin.flush()
      return True
    except (BrokenPipeError, OSError):
      return False

  def submit(self, tasks: list[dict[str, str]]) -> bool:
    return all(self._send(json.dumps(t)) for t in tasks)

  def crash_message(self) -> str:
    rc = self.proc.wait()
    self._err.seek(0)
    return _crash_message(rc, self._err.read())

  def close(self, kill: bool = False) -> None:
    if self.proc.poll() is None:
      if kill:
        self.proc.kill()
      else:
        self._send("END")
      try:
        self.proc.stdin.close()
      except OSError:
        pass
      try:
        self.proc.wait(timeout=30)
      except subprocess.TimeoutExpired:
        self.proc.kill()
        self.proc.wait()
    self._err.close()


class WorkerPool:
  """Live workers of one thread of the report, at most one per side."""

  def __init__(self, n: int, seed: int, env: dict[str, str]):
    self.n, self.seed, self.env = n, seed, env
    self.workers: dict[str, Worker] = {}

  def get(self, side: str) -> Worker:
    w = self.workers.get(side)
    if w is None or w.proc.poll() is not None:
      w = self.workers[side] = Worker(side, self.n, self.seed, self.env)
    return w

  def drop(self, side: str) -> None:
    w = self.workers.pop(side, None)
    if w is not None:
      w.close(kill=True)

  def close(self) -> None:
    for side in list(self.workers):
      self.workers.pop(side).close()


def run_job(job: Job, pool: WorkerPool, *, timeout: float, log
            ) -> dict[str, dict[str, Any]]:
  """Runs one job's operations; a crash ends one cell, the rest rerun.

  Returns ``{op name: result}``; every operation gets a result.
  """
  results: dict[str, dict[str, Any]] = {}
  pending = list(job.ops)
  fresh_failures = 0
  while pending:
    worker = pool.get(job.side)
    worker.submit([{"id": task_id(job.fmt, op), "fmt": job.fmt, "op": op}
                   for op in pending])
    running, timed_out, started = None, False, False
    while len(results) < len(job.ops):
      wait = timeout if running is not None else max(timeout, START_SECONDS)
      try:
        line = worker.lines.get(timeout=wait)
      except queue.Empty:
        timed_out = True
        break
      if line is None:  # the worker died
        break
      if line.startswith("BEGIN "):
        running, started = line[6:].strip().split("::", 1)[1], True
      elif line.startswith("RESULT "):
        result = json.loads(line[7:])
        results[result.pop("id").split("::", 1)[1]] = result
        running = None
    pending = [op for op in pending if op not in results]
    if not pending:
      break
    if timed_out:
      pool.drop(job.side)
      message = f"no answer within {wait:.0f} s"
    else:
      message = worker.crash_message()
      pool.drop(job.side)
    if running is None:  # died between tasks, or before the first one
      fresh_failures += 0 if started else 1
      if fresh_failures >= 2:
        for op in pending:
          results[op] = {"status": "error",
                         "message": f"worker failed: {message}"}
        log(f"  {job.side} {job.fmt}: worker failed ({message})")
        break
      continue
    results[running] = {"status": "timeout" if timed_out else "abort",
                        "message": message}
    log(f"  {job.side} {job.fmt} {running}: {results[running]['status']} "
        f"({message[:100]}); continuing in a new worker")
    pending = [o for o in pending if o not in results]
  return results


def run_all(jobs: list[Job], n: int, seed: int, *, workers: int,
            timeout: float, fast_compile: bool, log, after_job=None
            ) -> dict[tuple[str, str, str], dict[str, Any]]:
  """Runs every job on ``workers`` threads, each with its own workers.

  ``after_job(results so far)`` is called in the calling thread after each
  job, while the remaining jobs run.
  """
  if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
    raise ValueError(f"`workers` argument to `run_all` must be an integer "
                     f">= 1, got {workers!r}")
  env = worker_env(fast_compile)
  out: dict[tuple[str, str, str], dict[str, Any]] = {}
  local = threading.local()
  pools: list[WorkerPool] = []
  lock = threading.Lock()
  done, start = 0, time.time()

  def one(job: Job):
    if not hasattr(local, "pool"):
      local.pool = WorkerPool(n, seed, env)
      with lock:
        pools.append(local.pool)
    t0 = time.time()
    res = run_job(job, local.pool, timeout=timeout, log=log)
    return job, res, time.time() - t0

  try:
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as ex:
      futures = [ex.submit(one, j) for j in jobs]
      for future in concurrent.futures.as_completed(futures):
        job, res, secs = future.result()
        done += 1
        statuses: dict[str, int] = {}
        for op, r in res.items():
          out[(job.side, job.fmt, op)] = r
          statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        summary = ", ".join(f"{v} {k}" for k, v in sorted(statuses.items()))
        log(f"[{done}/{len(jobs)} {time.time() - start:5.1f}s] {job.side:6s} "
            f"{job.fmt}: {len(res)} ops in {secs:.1f}s ({summary})")
        if after_job is not None:
          after_job(out)
  finally:
    for pool in pools:
      pool.close()
  return out


def children_cpu() -> float:
  """CPU seconds of the finished child processes (the workers) so far."""
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def terminate_cleanly():
  """SIGTERM unwinds (closing the workers) instead of killing at once."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  def handler(signum, frame):
    del frame
    raise SystemExit(128 + signum)
  previous = signal.signal(signal.SIGTERM, handler)
  try:
    yield
  finally:
    signal.signal(signal.SIGTERM, previous)
