"""Timing helpers shared by the bench suites: medians and same-run ratios."""
from __future__ import annotations

import platform
import random
import statistics
import time
from typing import Callable, Hashable, Sequence

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


def round_orders(names: Sequence[Hashable], repeats: int,
                 seed: int = 0) -> list[list[Hashable]]:
  """The order of each round of :func:`interleaved_medians`: a permutation
  of ``names`` drawn afresh per round (seeded: the same every run).

  A rotation alone (``names[r:] + names[:r]``) keeps every function's
  predecessor: the function listed after a full-size float32 sampler was
  timed after it in every round but one, and ran 30-40% slower for it (the
  same program measured 6.2x behind ``native`` and 8.8x one place later).

  >>> round_orders(["a", "b", "c"], 2)
  [['a', 'c', 'b'], ['c', 'b', 'a']]
  """
  rng = random.Random(seed)
  orders = []
  for _ in range(repeats):
    order = list(names)
    rng.shuffle(order)
    orders.append(order)
  return orders


def interleaved_medians(fns: dict[Hashable, Callable[[], object]], *,
                        repeats: int = 7, warmup: int = 2
                        ) -> dict[Hashable, float]:
  """Medians of several functions timed round-robin, so noise hits all alike.

  Each round runs every function once, in an order drawn afresh per round
  (:func:`round_orders`): a function timed right after a large one runs
  measurably slower (caches, allocator), and no function should always take
  that place.
  """
  _check_repeats(repeats, "interleaved_medians")
  if not fns:
    raise ValueError("`fns` argument to `interleaved_medians` must name at "
                     "least one function, got none")
  for fn in fns.values():
    for _ in range(warmup):
      jax.block_until_ready(fn())
  times: dict[Hashable, list[float]] = {k: [] for k in fns}
  for order in round_orders(list(fns), repeats):
    for k in order:
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


def cpu_name() -> str:
  """The host CPU's model name (``/proc/cpuinfo`` where there is one, else
  what :mod:`platform` says), with ``AVX-512`` appended where it has it:
  the benchmarks' figures move with both."""
  name, avx512 = "", False
  try:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
      for line in f:
        if line.startswith("model name") and not name:
          name = line.split(":", 1)[1].strip()
        elif line.startswith("flags"):
          avx512 = avx512 or " avx512f" in line
  except OSError:
    pass
  name = name or platform.processor() or platform.machine()
  return f"{name}, AVX-512" if avx512 else name
