"""The report's tables: each cell's verdict and the markdown of report.md.

:func:`judge` turns one side's result of one operation (from
:mod:`jaxfp8.tools.report.worker`) into a :class:`Cell`; :func:`write_report`
writes the summary, the legend and one table per format.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
import platform
from typing import Any

import numpy as np

from jaxfp8._src.numerics import formats
from jaxfp8.tools.report import laws as report_laws
from jaxfp8.tools.report import run as report_run
from jaxfp8.tools.report import worker as report_worker

SIDES = report_run.SIDES


# -- judging one cell ----------------------------------------------------------------
@dataclasses.dataclass
class Cell:
  verdict: str  # ok, wrong, error, abort, timeout, n/a
  status: str   # the text shown
  nan: str = ""
  distinct: str = ""
  distance: str = ""


def _esc(text: str) -> str:
  return text.replace("|", "\\|").replace("\n", " ")


def short(text: str, width: int = 90) -> str:
  text = " ".join(text.split())
  return text if len(text) <= width else text[:width - 1] + "…"


def _percent(x: float) -> str:
  return f"{x:.0%}" if x >= 0.01 else f"{x:.2%}"


def judge(op: report_worker.Op, result: dict[str, Any] | None,
          law: report_laws.Law | None) -> Cell:
  """The verdict and the table text for one side of one operation."""
  if result is None:
    return Cell("error", "not run")
  status = result["status"]
  if status == "n/a":
    return Cell("n/a", _esc(result["message"]))
  if status in ("error", "abort", "timeout"):
    word = {"error": "error", "abort": "**abort**", "timeout": "timeout"}
    return Cell(status, f"{word[status]}: {_esc(short(result['message']))}")
  if op.kind in ("sample", "init"):
    n, nan = result["n"], result["nan"]
    cell = Cell("ok", "ok", nan=f"{nan} ({_percent(nan / n)})" if nan else "0",
                distinct=str(len(result["counts"])))
    problems = []
    if result.get("wrong_dtype"):
      problems.append(f"returned {result['dtype']}")
    if law is not None:
      tv = report_laws.sample_distance(law, result["counts"], n, nan)
      cell.distance = f"TV {tv:.3f}"
      if tv > 2 * report_laws.tv_floor(law, n) + 0.01:
        problems.append("wrong law")
    if nan and (law is None or law[2] == 0):
      problems.append("NaN")
    if problems:
      cell.verdict = "wrong"
      cell.status = f"**wrong** ({', '.join(problems)})"
    return cell
  total = result["total"]
  cell = Cell("ok", "ok", nan=str(result["nan_from_finite"]))
  problems = []
  if result["nan_from_finite"]:
    problems.append(f"NaN for {result['nan_from_finite']} finite inputs")
  if op.kind == "dot":
    err = result.get("relerr")
    cell.distance = "rel err " + ("NaN/Inf" if err is None else f"{err:.1e}")
    if err is None or err > 1e-5:
      problems.append("inaccurate")
  else:
    cell.distance = f"{result['mismatch']}/{total} differ"
    if result["mismatch"]:
      problems.append(f"{result['mismatch']} of {total} values wrong")
  if problems:
    cell.verdict = "wrong"
    cell.status = f"**wrong** ({'; '.join(problems)})"
  return cell


# -- the report --------------------------------------------------------------------
def _versions() -> str:
  import jax  # pylint: disable=g-import-not-at-top
  import jaxlib  # pylint: disable=g-import-not-at-top
  import ml_dtypes  # pylint: disable=g-import-not-at-top
  from jaxfp8 import __version__  # pylint: disable=g-import-not-at-top
  return (f"JAX {jax.__version__}, jaxlib {jaxlib.__version__}, ml_dtypes "
          f"{ml_dtypes.__version__}, NumPy {np.__version__}, jaxfp8 "
          f"{__version__}, Python {platform.python_version()}; backend "
          f"{jax.default_backend()}, {os.cpu_count()} CPU cores "
          f"({platform.machine()})")


KEY_OPS = ("uniform", "normal", "truncated_normal", "glorot_normal",
           "constant under jit", "cast with overflow", "dot (f32 accumulate)")


def summary_tables(fmts: list[str], ops: list[report_worker.Op],
                   cells: dict[tuple[str, str, str], Cell]) -> list[str]:
  """The summary: counts per format, then key operations side by side."""
  verdicts = ("ok", "wrong", "error", "abort")
  head = ("| format | " + " | ".join(f"native {v}" for v in verdicts)
          + " | " + " | ".join(f"jaxfp8 {v}" for v in verdicts)
          + " | jaxfp8 n/a |")
  lines = [head, "|" + "---|" * (head.count("|") - 1)]
  for fmt in fmts:
    row = [f"`{fmt}`"]
    for side in SIDES:
      got = [cells[(side, fmt, op.name)].verdict for op in ops]
      for v in verdicts:
        k = sum(g == v or (v == "abort" and g == "timeout") for g in got)
        row.append(f"**{k}**" if k and v in ("wrong", "abort") else str(k))
      if side == "jaxfp8":
        row.append(str(sum(g == "n/a" for g in got)))
    lines.append("| " + " | ".join(row) + " |")
  key = [op for op in ops if op.name in KEY_OPS]
  if key:
    lines += ["", "Key operations, native JAX → jaxfp8:", "",
              "| format | " + " | ".join(op.name for op in key) + " |",
              "|" + "---|" * (len(key) + 1)]
    for fmt in fmts:
      row = [f"`{fmt}`"]
      for op in key:
        a, b = cells[("native", fmt, op.name)], cells[("jaxfp8", fmt, op.name)]
        row.append(f"{_brief(a)} → {_brief(b)}")
      lines.append("| " + " | ".join(row) + " |")
  return lines


def _brief(cell: Cell) -> str:
  if cell.verdict == "wrong" and cell.distance:
    return f"wrong ({cell.distance})"
  return cell.verdict


def format_table(fmt: str, ops: list[report_worker.Op],
                 cells: dict[tuple[str, str, str], Cell],
                 laws: dict[tuple[str, str], tuple[Any, str]], n: int
                 ) -> list[str]:
  lines = [
      "| operation | native JAX | NaN | distinct | distance | jaxfp8 | NaN "
      "| distinct | distance | exact law: distinct at n (of possible), TV "
      "noise |",
      "|---|---|---|---|---|---|---|---|---|---|"]
  for op in ops:
    a, b = cells[("native", fmt, op.name)], cells[("jaxfp8", fmt, op.name)]
    law, source = laws.get((fmt, op.name), (None, ""))
    if op.kind in ("sample", "init"):
      if law is None:
        exact = source
      else:
        expect, possible = report_laws.expected_distinct(law, n)
        floor = report_laws.tv_floor(law, n)
        exact = f"{expect:.0f} ({possible}), {floor:.3f}"
    else:
      exact = "—"
    lines.append(
        f"| {op.name} | {a.status} | {a.nan} | {a.distinct} | {a.distance} "
        f"| {b.status} | {b.nan} | {b.distinct} | {b.distance} | {exact} |")
  return lines


_LEGEND = """\
How to read the tables. Each row runs the same call natively
(`jax.random.<name>(key, shape=..., dtype=<format>)`, an initializer of
`jax.nn.initializers`, ...) and through jaxfp8 (`jaxfp8.random.<name>`,
`jaxfp8.nn.initializers.<name>`, `jaxfp8.cast`, `jaxfp8.ops.scaled_matmul`),
each in a worker subprocess, so a crash is a cell: **abort** means the process
died (its signal and XLA's message are shown) and the report went on in a new
worker. "not available" means the jaxfp8 function doesn't exist in this
install. For samplers and initializers, *distinct* is the number of different
values drawn and *distance* the total variation distance between the drawn
frequencies and the exact law of the real-valued draw rounded to nearest
(ties to even, saturating), whose expected distinct count at this sample size,
number of values with non-zero probability and TV noise level (the TV an exact
sampler shows at this sample size) are in the last column. A sampler is
**wrong** when its TV exceeds twice the noise level plus 0.01, when it draws
NaN from a law without NaN, or returns another dtype. Multivariate samplers
are judged on one coordinate's law. Casts compare every output with
round-to-nearest-even with saturation (`jaxfp8.cast`'s rule) on inputs that
include ties, subnormals, +-max, values just above max, +-1e30, +-Inf and
NaN; constants under jit compare the constant that comes back; matmul
(narrow output) compares with the exact product rounded once; dot
(`preferred_element_type=float32`) reports the largest error relative to the
largest exact entry. Every raw measurement (value counts, error messages,
seconds per call) is in `results.json` next to this file."""


def write_report(path: str, fmts: list[str], ops: list[report_worker.Op],
                 cells, laws, n: int, seed: int, plots: list[str],
                 plot_note: str, elapsed: float, cpu: float,
                 fast_compile: bool) -> None:
  now = datetime.datetime.now(datetime.timezone.utc)
  lines = [
      "# jaxfp8 report: narrow formats in the installed JAX", "",
      f"Generated {now:%Y-%m-%d %H:%M} UTC by `jaxfp8 report` in "
      f"{elapsed:.0f} s ({cpu:.0f} CPU-seconds in workers). {_versions()}. {n} samples per sampler, seed {seed}"
      + (f"; XLA flags `{report_run.FAST_XLA_FLAGS}` (faster compiles; "
         "`--xla-opt` to compile as usual)" if fast_compile else "") + ".",
      "",
      "## Summary", "",
      "Operations per format by verdict (ok, wrong law or values, error, "
      "process abort), native JAX and jaxfp8.", ""]
  lines += summary_tables(fmts, ops, cells)
  lines += ["", _LEGEND, ""]
  lines += ["## Pictures", ""]
  if plots:
    lines.append(plot_note)
    lines.append("")
    for p in plots:
      name = os.path.splitext(os.path.basename(p))[0]
      lines.append(f"- [{name}]({os.path.relpath(p, os.path.dirname(path))})")
  else:
    lines.append(plot_note)
  for fmt in fmts:
    f = formats.get(fmt)
    lines += ["", f"## {fmt}", "",
              f"{f.bits} bits, {f.exponent_bits} exponent / {f.mantissa_bits} "
              f"mantissa bits, max {f.max:g}, {len(f.values)} finite values, "
              f"{'Inf, ' if f.has_inf else ''}"
              f"{'NaN' if f.has_nan else 'no NaN'}; the installed JAX "
              f"{'holds' if f.native else 'cannot hold'} arrays of it.", ""]
    lines += format_table(fmt, ops, cells, laws, n)
  with open(path, "w", encoding="utf-8") as fh:
    fh.write("\n".join(lines) + "\n")
