"""The ``jaxfp8`` command: ``report``, ``bench <suite>`` and ``docs``.

Each bench suite is a module ``jaxfp8._src.bench.<suite>`` with a
``main(argv) -> int``; ``report`` lives in ``jaxfp8._src.report``.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from jaxfp8._src import bench as _bench_pkg


def bench_suites() -> list[str]:
  return sorted(m.name for m in pkgutil.iter_modules(_bench_pkg.__path__)
                if not m.name.startswith("_"))


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else list(argv)
  parser = argparse.ArgumentParser(
      prog="jaxfp8", description="FP8/FP6/FP4/MX for JAX: audit and benchmark.")
  sub = parser.add_subparsers(dest="command", required=True)
  sub.add_parser("report", help="audit the installed JAX (see --help)",
                 add_help=False)
  b = sub.add_parser("bench", help="run a benchmark suite (SUITE --help for its options)",
                     add_help=False)
  b.add_argument("suite", choices=bench_suites())
  d = sub.add_parser("docs", help="regenerate the generated docs pages")
  d.add_argument("--out", default="docs")
  args, rest = parser.parse_known_args(argv)
  if args.command == "report":
    return importlib.import_module("jaxfp8._src.report").main(rest)
  if args.command == "bench":
    module = importlib.import_module(f"jaxfp8._src.bench.{args.suite}")
    return module.main(rest)
  if rest:
    parser.error(f"unrecognized arguments: {' '.join(rest)}")
  from jaxfp8._src import docgen  # pylint: disable=g-import-not-at-top
  for path in docgen.write_all(args.out):
    print(f"wrote {path}")
  return 0
