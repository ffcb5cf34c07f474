"""Timing helpers shared by the bench suites: medians and same-run ratios."""
from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence

import jax


def _check_repeats(repeats: int, fn: str) -> None:
  if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
    raise ValueError(f"`repeats` argument to `{fn}` must be an integer >= 1 "
                     f"(a median needs a time), got {repeats!r}")


def median_seconds(fn: Callable[[], object], *, repeats: int = 7,
                   warmup: int = 2) -> float:
  """Median wall time of ``fn()`` (its result blocked on), after warm-up."""
  _check_repeats(repeats, "median_seconds")
  for _ in range(warmup):
    jax.block_until_ready(fn())
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def interleaved_medians(fns: dict[str, Callable[[], object]], *,
                        repeats: int = 7, warmup: int = 2) -> dict[str, float]:
  """Medians of several functions timed round-robin, so noise hits all alike.

  The order rotates from one round to the next: a function timed right after
  a large one runs measurably slower (caches, allocator), and no function
  should always take that place.
  """
  _check_repeats(repeats, "interleaved_medians")
  if not fns:
    raise ValueError("`fns` argument to `interleaved_medians` must name at "
                     "least one function, got none")
  for fn in fns.values():
    for _ in range(warmup):
      jax.block_until_ready(fn())
  times: dict[str, list[float]] = {k: [] for k in fns}
  names = list(fns)
  for r in range(repeats):
    for k in names[r % len(names):] + names[:r % len(names)]:
      fn = fns[k]
      t0 = time.perf_counter()
      jax.block_until_ready(fn())
      times[k].append(time.perf_counter() - t0)
  return {k: statistics.median(v) for k, v in times.items()}


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
  lines = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
  lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
  return "\n".join(lines)
