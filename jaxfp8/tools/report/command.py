"""The ``jaxfp8 report`` command line: options, the run, the pictures.

:func:`main` selects operations and formats, runs them in worker
subprocesses (:mod:`jaxfp8.tools.report.run`), judges each cell
(:mod:`jaxfp8.tools.report.tables`) and writes ``report.md``,
``results.json`` and, with matplotlib, the pictures.
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import time
from typing import Any

from jaxfp8._src.numerics import formats
from jaxfp8.tools.options import int_at_least
from jaxfp8.tools.report import laws as report_laws
from jaxfp8.tools.report import plots as report_plots
from jaxfp8.tools.report import run as report_run
from jaxfp8.tools.report import tables as report_tables
from jaxfp8.tools.report import worker as report_worker
from jaxfp8.tools.report.tables import Cell
from jaxfp8.tools.report.tables import judge
from jaxfp8.tools.report.tables import write_report

SIDES = report_run.SIDES
KINDS = ("sample", "init", "const", "cast", "dot", "matmul")
PLOT_FORMATS = ("float8_e4m3fn", "float8_e5m2", "float6_e2m3fn",
                "float4_e2m1fn")


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
          notes[side] = report_tables.short(c.status.replace("**", ""), 50)
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
