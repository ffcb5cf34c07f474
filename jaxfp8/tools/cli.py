"""The ``jaxfp8`` command: ``report``, ``bench <suite>`` and ``docs``.

Each bench suite is a module ``jaxfp8.tools.bench.<suite>`` with a
``main(argv) -> int``; ``report`` lives in ``jaxfp8.tools.report``. Bad options
end as argparse errors (one line on stderr, exit status 2), never tracebacks.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from jaxfp8.tools import bench as bench_pkg


def bench_suites() -> list[str]:
  """The suites' command names: module names with ``-`` for ``_``."""
  return sorted(m.name.replace("_", "-")
                for m in pkgutil.iter_modules(bench_pkg.__path__)
                if not m.name.startswith("_"))


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else list(argv)
  parser = argparse.ArgumentParser(
      prog="jaxfp8", description="FP8/FP6/FP4/MX for JAX: audit and benchmark.")
  sub = parser.add_subparsers(dest="command", required=True)
  sub.add_parser("report", help="audit the installed JAX (see --help)",
                 add_help=False)
  # Its own help flag is a plain switch, not argparse's exiting action: with
  # a suite, --help belongs to the suite and is passed on to it.
  b = sub.add_parser(
      "bench", help="run a benchmark suite (SUITE --help for its options)",
      usage="%(prog)s [-h] SUITE [suite options]",
      description="Run a benchmark suite; `jaxfp8 bench SUITE --help` lists "
                  "the suite's options.", add_help=False)
  b.add_argument("-h", "--help", action="store_true",
                 help="show this help, or with SUITE the suite's help")
  b.add_argument("suite", nargs="?", choices=bench_suites(), metavar="SUITE",
                 help=f"one of {', '.join(bench_suites())}")
  d = sub.add_parser("docs", help="regenerate the generated docs pages")
  d.add_argument("--out", default="docs")
  args, rest = parser.parse_known_args(argv)
  if args.command == "report":
    return importlib.import_module("jaxfp8.tools.report").main(rest)
  if args.command == "bench":
    if args.suite is None:
      if args.help:
        b.print_help()
        return 0
      b.error("the following arguments are required: suite")
    module = importlib.import_module(
        f"jaxfp8.tools.bench.{args.suite.replace('-', '_')}")
    return module.main((["--help"] if args.help else []) + rest)
  if rest:
    parser.error(f"unrecognized arguments: {' '.join(rest)}")
  from jaxfp8.tools import docgen  # pylint: disable=g-import-not-at-top
  for path in docgen.write_all(args.out):
    print(f"wrote {path}")
  return 0
