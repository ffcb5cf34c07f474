"""``jaxfp8 report``: what the installed JAX does with narrow formats, and jaxfp8.

For every narrow format and every audited operation (the float samplers of
``jax.random``, the initializers of ``jax.nn.initializers``, constants under
``jit``, casts with overflow, dot and matmul) the report runs the native JAX
call and the jaxfp8 call, each side in worker subprocesses: a native crash
(a float6 constant under ``jit`` aborts the process on JAX 0.10) becomes the
cell "abort" and the remaining operations run in a fresh worker. It measures
whether each call works, its NaN count, the distinct values it produced
against those an exact sampler would produce, and the total variation
distance to the exact rounded law, then writes ``report.md`` and, when
matplotlib is installed, one PNG per distribution family.

  jaxfp8 report --out report/                     # everything, < 3 min on 2 cores
  jaxfp8 report --formats e4m3 e2m1 --ops normal,truncated_normal,cast
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import difflib
import json
import os
import platform
import sys
import time
from typing import Any

import numpy as np

from jaxfp8._src.numerics import formats
from jaxfp8.tools.report import laws as report_laws
from jaxfp8.tools.report import plots as report_plots
from jaxfp8.tools.report import run as report_run
from jaxfp8.tools.report import worker as report_worker
from jaxfp8.tools.options import int_at_least

SIDES = report_run.SIDES
KINDS = ("sample", "init", "const", "cast", "dot", "matmul")
PLOT_FORMATS = ("float8_e4m3fn", "float8_e5m2", "float6_e2m3fn",
                "float4_e2m1fn")


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


def _short(text: str, width: int = 90) -> str:
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
    return Cell(status, f"{word[status]}: {_esc(_short(result['message']))}")
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


# -- command line --------------------------------------------------------------------
def _positive_seconds(text: str) -> float:
  try:
    value = float(text)
  except ValueError:
    value = float("nan")
  if not value > 0:  # also NaN
    raise argparse.ArgumentTypeError(
        f"must be a positive number of seconds, got {text!r}")
  return value


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(
      prog="jaxfp8 report",
      description="Audit the installed JAX for narrow formats (native vs "
                  "jaxfp8); writes report.md and PNG plots.")
  p.add_argument("--out", default="jaxfp8-report",
                 help="output directory (default: ./jaxfp8-report)")
  p.add_argument("--formats", nargs="+", default=None, metavar="FMT",
                 help="narrow formats by name or alias (default: all)")
  p.add_argument("--ops", default=None,
                 help="comma-separated operations, families or kinds "
                      f"({', '.join(KINDS)}); default: all")
  p.add_argument("--samples", type=int_at_least(64), default=1 << 16,
                 help="samples per sampler, at least 64 (default 65536)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--jobs", type=int_at_least(1),
                 default=max(1, min(2, os.cpu_count() or 1)),
                 help="parallel worker processes (default: 2)")
  p.add_argument("--timeout", type=_positive_seconds, default=180.0,
                 help="seconds one operation may run before it is a timeout")
  p.add_argument("--plot-formats", default=",".join(PLOT_FORMATS),
                 help="comma-separated formats drawn in the pictures, or "
                      "'all'")
  p.add_argument("--no-plots", action="store_true", help="skip the pictures")
  p.add_argument("--xla-opt", action="store_true",
                 help="compile with XLA's default optimization (slower)")
  p.add_argument("--list", action="store_true",
                 help="list the operations and formats, then exit")
  return p


def _select_ops(spec: str | None, n: int) -> list[report_worker.Op]:
  """The operations ``--ops`` names; ValueError naming the unknown ones."""
  ops = report_worker.catalogue(n)
  if spec is None:
    return ops
  wanted = [w.strip() for w in spec.split(",") if w.strip()]
  # Casts, constants, dot and matmul belong to no family (their family is "").
  known = ({op.name for op in ops} | {op.family for op in ops} | set(KINDS)
           ) - {""}
  if not wanted:
    raise ValueError(f"argument --ops: expected comma-separated operations, "
                     f"families or kinds, got {spec!r}")
  unknown = [w for w in wanted if w not in known]
  if unknown:
    close = [c for w in unknown
             for c in difflib.get_close_matches(w, known, n=3, cutoff=0.6)]
    hint = (f"did you mean {', '.join(map(repr, dict.fromkeys(close)))}? "
            if close else "")
    raise ValueError(f"argument --ops: unknown {', '.join(unknown)}; {hint}"
                     f"choose from: {', '.join(sorted(known))}")
  return [op for op in ops
          if op.name in wanted or op.family in wanted or op.kind in wanted]


def _narrow_names(names: list[str], option: str) -> list[str]:
  """Canonical names, first occurrence kept; ValueError naming ``option``."""
  try:
    return list(dict.fromkeys(
        formats.get_narrow(f, arg=option, fn="jaxfp8 report").name
        for f in names))
  except (TypeError, ValueError) as e:
    raise ValueError(str(e)) from e


def _plot(out_dir: str, plot_fmts: list[str],
          ops: list[report_worker.Op], results, laws, cells, n: int, log
          ) -> tuple[list[str], str]:
  if not report_plots.available():
    return [], ("Pictures skipped: matplotlib is not installed "
                "(`pip install \"jaxfp8[plot]\"`).")
  plot_dir = os.path.join(out_dir, "plots")
  os.makedirs(plot_dir, exist_ok=True)
  paths = []
  t0 = time.time()
  for op in ops:
    if op.kind not in ("sample", "init"):
      continue
    panels = []
    for fmt in plot_fmts:
      law = laws.get((fmt, op.name), (None, ""))[0]
      if law is None or (law[1] > 0).sum() + (law[2] > 0) < 2:
        continue  # no law, or a single point: nothing to picture
      sides = {}
      notes = {}
      for side in SIDES:
        r = results.get((side, fmt, op.name))
        c = cells[(side, fmt, op.name)]
        if r is not None and r["status"] == "ok":
          label = c.distance or c.verdict
          if c.verdict == "wrong":
            label += ", wrong"
          sides[side] = (r["counts"], r["n"], r["nan"], label)
        else:
          notes[side] = _short(c.status.replace("**", ""), 50)
      panels.append(report_plots.Panel(
          fmt, law[0], law[1], law[2], sides.get("native"),
          sides.get("jaxfp8"), notes.get("native", ""),
          notes.get("jaxfp8", "")))
    if panels:
      name = "".join(ch if ch.isalnum() or ch in "_-" else "_"
                     for ch in op.name).strip("_")
      paths.append(report_plots.plot_family(
          os.path.join(plot_dir, f"{name}.png"), op.name, panels, n))
  log(f"wrote {len(paths)} pictures in {time.time() - t0:.1f}s")
  if not paths:
    return [], ("No pictures: the selected operations and formats have no "
                "distribution to draw.")
  note = (f"One PNG per distribution family (formats: {', '.join(plot_fmts)}):"
          " grey bars are the exact probability of each representable value, "
          "red crosses native JAX's frequencies, blue dots jaxfp8's; the x "
          "axis gives every representable value one slot.")
  return paths, note


def main(argv: list[str] | None = None) -> int:
  """Runs the audit; returns the exit status (0 once report.md is written)."""
  parser = _parser()
  args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
  n = args.samples
  try:
    ops = _select_ops(args.ops, n)
    fmts = _narrow_names(args.formats or formats.names(narrow=True),
                         "--formats")
    if args.plot_formats == "all":
      plot_fmts = fmts
    else:
      wanted = [f.strip() for f in args.plot_formats.split(",") if f.strip()]
      wanted = _narrow_names(wanted, "--plot-formats")
      plot_fmts = [f for f in fmts if f in wanted] or fmts[:4]
  except ValueError as e:
    parser.error(str(e))
  if args.list:
    print("formats:", ", ".join(fmts))
    for op in ops:
      print(f"{op.kind:7s} {op.name}")
    return 0

  def log(msg: str) -> None:
    print(msg, flush=True)

  start = time.time()
  cpu0 = report_run.children_cpu()
  os.makedirs(args.out, exist_ok=True)
  # The pictured formats first: their pictures are drawn while the workers
  # go on with the other formats.
  order = plot_fmts + [f for f in fmts if f not in plot_fmts]
  jobs = [report_run.Job(side, fmt, [op.name for op in ops])
          for fmt in order for side in SIDES]
  log(f"jaxfp8 report: {len(ops)} operations x {len(fmts)} formats, native "
      f"JAX and jaxfp8, {len(jobs)} worker jobs on {args.jobs} processes")
  laws: dict[tuple[str, str], tuple[Any, str]] = {}
  cells: dict[tuple[str, str, str], Cell] = {}
  pictures: list[Any] = []

  def judge_format(fmt: str, results) -> None:
    for op in ops:
      if op.kind in ("sample", "init") and (fmt, op.name) not in laws:
        laws[(fmt, op.name)] = report_laws.rounded_law(
            op.law_dict(), formats.get(fmt), op)
      law = laws.get((fmt, op.name), (None, ""))[0]
      for side in SIDES:
        cells[(side, fmt, op.name)] = judge(
            op, results.get((side, fmt, op.name)), law)

  def after_job(results) -> None:
    if pictures or args.no_plots:
      return
    if all((side, f, op.name) in results
           for f in plot_fmts for side in SIDES for op in ops):
      for f in plot_fmts:
        judge_format(f, results)
      pictures.append(_plot(args.out, plot_fmts, ops, results, laws, cells,
                            n, log))

  with report_run.terminate_cleanly():
    results = report_run.run_all(jobs, n, args.seed, workers=args.jobs,
                      timeout=args.timeout, fast_compile=not args.xla_opt,
                      log=log, after_job=after_job)
  cpu = report_run.children_cpu() - cpu0
  log(f"workers done in {time.time() - start:.0f}s, {cpu:.0f} CPU-seconds")
  for fmt in fmts:
    judge_format(fmt, results)
  if args.no_plots:
    plots, note = [], "Pictures skipped (--no-plots)."
  else:
    if not pictures:
      after_job(results)
    plots, note = pictures[0]
  path = os.path.join(args.out, "report.md")
  write_report(path, fmts, ops, cells, laws, n, args.seed, plots, note,
               time.time() - start, cpu, not args.xla_opt)
  with open(os.path.join(args.out, "results.json"), "w",
            encoding="utf-8") as fh:
    json.dump({f"{s}|{f}|{o}": r for (s, f, o), r in results.items()}, fh)
  log(f"wrote {path} ({time.time() - start:.0f}s)")
  return 0
