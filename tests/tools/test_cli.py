"""Tests for the ``jaxfp8`` command line: help, bad options, odd formats."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

from jaxfp8.tools import cli
from jaxfp8.tools import options
from jaxfp8.tools import timing

# (arguments, the option the one-line error must name, a word of the reason)
BAD_BENCH_OPTIONS = [
    (["mx", "--size", "8", "--repeats", "1"], "--size", "multiple of 32"),
    (["mx", "--size", "48"], "--size", "multiple of 32"),
    (["mx", "--size", "0"], "--size", ">= 1"),
    (["mx", "--size", "32", "--repeats", "0"], "--repeats", ">= 1"),
    (["mx", "--formats", ","], "--formats", "MX formats"),
    (["mx", "--formats", "mxfp9"], "--formats", "mxfp8_e4m3"),
    (["es", "--popsize", "3"], "--popsize", "even"),
    (["es", "--popsize", "0"], "--popsize", ">= 2"),
    (["es", "--params", "0"], "--params", ">= 1"),
    (["es", "--repeats", "0"], "--repeats", ">= 1"),
    (["es", "--format", "e8m0"], "--format", "signed"),
    (["es", "--format", "bogus"], "--format", "bogus"),
    (["es", "--format", "float32"], "--format", "narrow"),
    (["es", "--methods", "exact,nope"], "--methods", "nope"),
    (["random", "--repeats", "0"], "--repeats", ">= 1"),
    (["random", "--log2n", "-1"], "--log2n", ">= 0"),
    (["random", "--formats", "bogus"], "--formats", "bogus"),
    (["random", "--formats", "float32"], "--formats", "narrow"),
]


def _exit_code(argv, capsys) -> tuple[int, str, str]:
  with pytest.raises(SystemExit) as info:
    cli.main(argv)
  out, err = capsys.readouterr()
  return info.value.code, out, err


@pytest.mark.parametrize("argv,option,reason", BAD_BENCH_OPTIONS,
                         ids=[" ".join(a) for a, _, _ in BAD_BENCH_OPTIONS])
def test_bad_bench_option_is_a_usage_error(argv, option, reason, capsys):
  code, _, err = _exit_code(["bench", *argv], capsys)
  assert code == 2
  message = err.strip().splitlines()[-1]
  assert message.startswith(f"jaxfp8 bench {argv[0]}: error:"), err
  assert option in message and reason in message, message


def test_bench_help_lists_the_suites(capsys):
  assert cli.main(["bench", "--help"]) == 0
  out = capsys.readouterr().out
  assert out.startswith("usage: jaxfp8 bench [-h] SUITE")
  assert "es, fsdp, mx, mx-train, random" in out
  assert cli.main(["bench", "-h"]) == 0
  assert "es, fsdp, mx, mx-train, random" in capsys.readouterr().out


def test_bench_suite_help_is_the_suites_own(capsys):
  code, out, _ = _exit_code(["bench", "mx", "--help"], capsys)
  assert code == 0
  assert out.startswith("usage: jaxfp8 bench mx") and "block size" in out
  code, out, _ = _exit_code(["bench", "--help", "es"], capsys)
  assert code == 0 and out.startswith("usage: jaxfp8 bench es")


def test_bench_without_a_suite_or_with_an_unknown_one(capsys):
  code, _, err = _exit_code(["bench"], capsys)
  assert code == 2 and "required: suite" in err
  code, _, err = _exit_code(["bench", "nope"], capsys)
  assert code == 2 and "invalid choice: 'nope'" in err


def test_int_at_least():
  parse = options.int_at_least(2)
  assert parse("2") == 2
  for text in ("1", "-3", "2.5", "two"):
    with pytest.raises(argparse.ArgumentTypeError, match=f"got '{text}'"):
      parse(text)


def test_timing_needs_a_repeat():
  with pytest.raises(ValueError, match="`repeats` argument to `median_seconds`"):
    timing.median_seconds(lambda: 0, repeats=0)
  with pytest.raises(ValueError, match="`repeats` argument to `interleaved"):
    timing.interleaved_medians({"f": lambda: 0}, repeats=0)
  with pytest.raises(ValueError, match="`fns` argument"):
    timing.interleaved_medians({}, repeats=1)


def test_round_orders_vary_each_functions_predecessor():
  """Every round is a permutation, the same every run, and no function
  follows the same one in every round (a rotation kept them fixed)."""
  names = [f"f{i}" for i in range(18)]
  orders = timing.round_orders(names, 5)
  assert orders == timing.round_orders(names, 5)
  assert all(sorted(o) == sorted(names) for o in orders)
  for name in names:
    before = {o[o.index(name) - 1] if o.index(name) else None for o in orders}
    assert len(before) > 1


def test_bench_mx_smallest_size(capsys):
  assert cli.main(["bench", "mx", "--size", "32", "--repeats", "1",
                   "--formats", "mxfp8_e4m3"]) == 0
  assert "| mxfp8_e4m3 |" in capsys.readouterr().out
  assert cli.main(["bench", "mx", "--size", "16", "--repeats", "1",
                   "--formats", "nvfp4"]) == 0  # blocks of 16
  assert "| nvfp4 |" in capsys.readouterr().out


def test_bench_es_float6_runs_with_jaxfp8_cast_baselines(capsys):
  assert cli.main(["bench", "es", "--format", "float6_e2m3fn", "--popsize",
                   "2", "--params", "8", "--repeats", "1", "--methods",
                   "exact"]) == 0
  out = capsys.readouterr().out
  assert "can't hold float6_e2m3fn arrays" in out
  assert "| perturbations exact |" in out
  assert "| perturbations exact, antithetic |" in out
  assert "| float32-then-cast | " in out


def test_bench_random_leaves_out_rows_that_cannot_exist(capsys):
  assert cli.main(["bench", "random", "--formats", "float6_e2m3fn", "e8m0",
                   "--dists", "uniform", "normal", "--log2n", "3",
                   "--repeats", "1"]) == 0
  out = capsys.readouterr().out
  rows = {tuple(c.strip() for c in line.split("|")[1:4])
          for line in out.splitlines() if line.startswith("| ")}
  # float6: jaxfp8's methods run; JAX can't hold the baseline's arrays.
  for m in ("exact", "table", "cast"):
    assert ("uniform", "float6_e2m3fn", m) in rows
  assert ("uniform", "float6_e2m3fn", "f32->fmt") not in rows
  assert "uniform, float6_e2m3fn: JAX" in out
  # e8m0 is unsigned: only `cast` serves uniform; normal is refused.
  assert ("uniform", "float8_e8m0fnu", "cast") in rows
  assert ("uniform", "float8_e8m0fnu", "exact") not in rows
  assert "uniform, float8_e8m0fnu: no exact row" in out
  assert not any(r[:2] == ("normal", "float8_e8m0fnu") and r[2] in (
      "exact", "table", "cast") for r in rows)
  assert "normal, float8_e8m0fnu: no cast row" in out


def test_bench_random_bits_table_with_e8m0(capsys):
  assert cli.main(["bench", "random", "--bits", "--formats", "e8m0",
                   "e4m3"]) == 0
  out = capsys.readouterr().out
  assert "| uniform | n/a | 8.3 (DDG) |" in out


def test_command_line_errors_are_one_line_not_tracebacks():
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  run = subprocess.run(
      [sys.executable, "-m", "jaxfp8", "bench", "mx", "--size", "8"],
      capture_output=True, text=True, timeout=60, env=env, check=False)
  assert run.returncode == 2, run.stderr
  assert "Traceback" not in run.stderr
  assert run.stderr.strip().splitlines()[-1] == (
      "jaxfp8 bench mx: error: argument --size: must be a multiple of 32, "
      "the block size of the chosen formats, got 8")
  run = subprocess.run([sys.executable, "-m", "jaxfp8", "bench", "--help"],
                       capture_output=True, text=True, timeout=60, env=env,
                       check=False)
  assert run.returncode == 0 and "SUITE" in run.stdout, run.stderr
