"""Tests for ``jaxfp8 report``: crash isolation, laws, judging, the PNGs."""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8 import formats
from jaxfp8._src.random import laws
from jaxfp8.tools import cli
from jaxfp8.tools import report
from jaxfp8.tools.report import laws as report_laws
from jaxfp8.tools.report import plots as report_plots
from jaxfp8.tools.report import run as report_run
from jaxfp8.tools.report import tables as report_tables
from jaxfp8.tools.report import worker as report_worker

import xla_flags

NARROW = formats.names(narrow=True)
SIGNED = [f.name for f in formats.all_formats(narrow=True) if f.signed]
OPS = {op.name: op for op in report_worker.catalogue(1 << 12)}
LAW_DISTS = ["uniform", "normal", "truncated_normal", "laplace", "gumbel",
             "lognormal", "pareto", "triangular", "double_sided_maxwell"]

needs_matplotlib = pytest.mark.skipif(not report_plots.available(),
                                      reason="matplotlib not installed")


def _env():
  # The report's workers show what JAX does natively, so they compile with
  # XLA's own emitters (its elemental one aborts on more float6 operations).
  env = report_run.worker_env(fast_compile=True)
  env["XLA_FLAGS"] = xla_flags.without(env["XLA_FLAGS"],
                                       xla_flags.ELEMENTAL_EMITTER)
  return env


# -- the numbers the report judges against -----------------------------------------
@pytest.mark.parametrize("fmt", NARROW)
def test_reference_cast_equals_jaxfp8_cast(fmt):
  x = report_worker.cast_inputs(fmt)
  got = np.asarray(jaxfp8.decode(jaxfp8.cast(x, fmt), jnp.float32), np.float64)
  if fmt == "float8_e8m0fnu":  # decode of 2^-127 goes through float32 subnormals
    got = formats.get(fmt).code_table.astype(np.float64)[
        np.asarray(jaxfp8.encode(x, fmt).codes)]
  want = report_worker.reference_cast(x, fmt)
  np.testing.assert_array_equal(got, want)
  np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2",
                                 "float6_e3m2fn", "float4_e2m1fn"])
@pytest.mark.parametrize("dist", LAW_DISTS)
def test_report_laws_agree_with_jaxfp8_laws(fmt, dist):
  """The report's assembly of each rounded law from the CDF (the one it uses
  for scaled laws, mixtures and E8M0) equals laws.rounded_law's."""
  op = OPS[dist]
  mine = report_laws._from_cdf(op.law_dict(), formats.get(fmt))
  values, probs = laws.rounded_law(dist, fmt, **dict(op.kwargs))
  np.testing.assert_array_equal(mine[0], values)
  np.testing.assert_allclose(mine[1], probs, rtol=1e-9, atol=1e-15)
  assert mine[2] == 0


def test_scaled_and_mixture_laws():
  pytest.importorskip("scipy")
  fmt = formats.get("e4m3")
  law, source = report_laws.rounded_law(OPS["delta_orthogonal"].law_dict(),
                                        fmt)
  assert source == "scipy"
  values, probs, p_nan = law
  assert probs.sum() + p_nan == pytest.approx(1.0, abs=1e-12)
  assert probs[values == 0][0] > 8 / 9  # the zero taps, plus rounding to 0
  law, _ = report_laws.rounded_law(OPS["constant(0.1)"].law_dict(), fmt)
  assert law[1][law[0] == 0.1015625][0] == 1.0  # 0.1 rounds to 0.1015625
  # E8M0: half of N(0, 1) is negative, hence NaN.
  law, _ = report_laws.rounded_law(OPS["normal"].law_dict(),
                                   formats.get("e8m0"), OPS["normal"])
  assert law[2] == pytest.approx(0.5)


def test_total_variation_and_noise_floor():
  fmt = formats.get("e4m3")
  law = (*laws.rounded_law("normal", fmt), 0.0)
  n = 1 << 16
  rng = np.random.default_rng(0)
  draws = rng.choice(len(law[0]), size=n, p=law[1])
  vals, counts = np.unique(law[0][draws], return_counts=True)
  counts = [[float(v), int(c)] for v, c in zip(vals, counts)]
  tv = report_laws.sample_distance(law, counts, n, 0)
  floor = report_laws.tv_floor(law, n)
  assert 0.5 * floor < tv < 1.5 * floor
  # All NaN is as far from the law as can be; one value is nearly so.
  assert report_laws.sample_distance(law, [], n, n) == pytest.approx(1.0)
  assert report_laws.sample_distance(law, [[1.0, n]], n, 0) == pytest.approx(
      1 - law[1][law[0] == 1.0][0])
  expect, possible = report_laws.expected_distinct(law, n)
  assert possible == int((law[1] > 0).sum()) and expect < possible


def test_judge():
  fmt = formats.get("e4m3")
  op = OPS["normal"]
  law = (*laws.rounded_law("normal", fmt), 0.0)
  n = 4096
  nan_cell = report_tables.judge(op, {"status": "ok", "n": n, "nan": n, "counts": [],
                               "dtype": fmt.name}, law)
  assert nan_cell.verdict == "wrong" and "NaN" in nan_cell.status
  exact = [[float(v), int(round(p * n))] for v, p in zip(*law[:2])
           if round(p * n)]
  total = sum(c for _, c in exact)
  ok = report_tables.judge(op, {"status": "ok", "n": total, "nan": 0,
                         "counts": exact, "dtype": fmt.name}, law)
  assert ok.verdict == "ok", ok
  one_value = report_tables.judge(op, {"status": "ok", "n": n, "nan": 0,
                                "counts": [[0.0, n]], "dtype": fmt.name}, law)
  assert one_value.verdict == "wrong" and "wrong law" in one_value.status
  as_f32 = report_tables.judge(op, {"status": "ok", "n": total, "nan": 0,
                             "counts": exact, "dtype": "float32",
                             "wrong_dtype": True}, law)
  assert as_f32.verdict == "wrong" and "float32" in as_f32.status
  abort = report_tables.judge(op, {"status": "abort", "message": "SIGABRT: x"}, law)
  assert abort.verdict == "abort" and "**abort**" in abort.status
  na = report_tables.judge(op, {"status": "n/a",
                         "message": "jaxfp8.random.gumbel: not available"},
                    law)
  assert na.verdict == "n/a" and "not available" in na.status


@pytest.mark.parametrize("fmt", NARROW)
def test_jaxfp8_cast_row_is_exact_in_every_format(fmt):
  """fnuz NaN (code 0x80) has its sign bit set; E8M0 sends 0 and -1 to NaN."""
  res = report_worker.Runner("jaxfp8", 256, 0).run(fmt, "cast with overflow")
  assert res["status"] == "ok", res
  assert res["mismatch"] == 0 and res["nan_from_finite"] == 0, res
  cell = report_tables.judge(OPS["cast with overflow"], res, None)
  assert cell.verdict == "ok", cell


def test_missing_jaxfp8_api_is_a_not_available_cell():
  runner = report_worker.Runner("jaxfp8", 256, 0)
  runner.ops["gumbel2"] = report_worker.Op("gumbel2", "sample",
                                           "random.gumbel2", shape=(8,))
  res = runner.run("float8_e4m3fn", "gumbel2")
  assert res == {"status": "n/a",
                 "message": "jaxfp8.random.gumbel2: not available"}
  cell = report_tables.judge(runner.ops["gumbel2"], res, None)
  assert cell.verdict == "n/a" and "not available" in cell.status


def test_native_cast_row_counts_overflow_nan():
  res = report_worker.Runner("native", 256, 0).run("float8_e4m3fn",
                                                  "cast with overflow")
  x = report_worker.cast_inputs("float8_e4m3fn")
  with np.errstate(over="ignore"):
    want_nan = np.isnan(x.astype(jnp.float8_e4m3fn).astype(np.float64))
  assert (want_nan & np.isfinite(x)).any()  # ml_dtypes: 465 -> NaN
  assert res["nan_from_finite"] == int((want_nan & np.isfinite(x)).sum())
  assert report_tables.judge(OPS["cast with overflow"], res, None).verdict == (
      "wrong" if res["nan_from_finite"] else "ok")


# -- crash isolation ---------------------------------------------------------------
def test_abort_is_one_cell_and_the_rest_runs(monkeypatch):
  ops = ["cast with overflow", "constant under jit"]
  env = dict(_env())
  env[report_worker.FAULT_ENV] = (
      report_run.task_id("float8_e5m2", ops[0]) + "=abort")
  logged = []
  pool = report_run.WorkerPool(256, 0, env)
  try:
    res = report_run.run_job(report_run.Job("native", "float8_e5m2", ops), pool,
                         timeout=120, log=logged.append)
  finally:
    pool.close()
  assert res[ops[0]]["status"] == "abort"
  assert "SIGABRT" in res[ops[0]]["message"]
  assert res[ops[1]]["status"] == "ok" and res[ops[1]]["mismatch"] == 0
  assert any("abort" in line for line in logged)


def test_a_hung_operation_is_a_timeout_cell():
  ops = ["constant under jit", "cast with overflow"]
  env = dict(_env())
  env[report_worker.FAULT_ENV] = (
      report_run.task_id("float8_e4m3fn", ops[0]) + "=hang")
  pool = report_run.WorkerPool(256, 0, env)
  try:
    # 2 s from the task's BEGIN: the workers' start has its own limit.
    res = report_run.run_job(report_run.Job("native", "float8_e4m3fn", ops),
                             pool, timeout=2, log=lambda _: None)
  finally:
    pool.close()
  assert res[ops[0]] == {"status": "timeout",
                         "message": "no answer within 2 s"}
  assert res[ops[1]]["status"] == "ok"


def test_native_float6_constant_aborts_without_ending_the_report():
  # JAX 0.10.2 and 0.12.0.1 abort (tests/numerics/test_guard.py says when a
  # JAX stops).
  ops = ["constant under jit", "cast with overflow"]
  pool = report_run.WorkerPool(256, 0, _env())
  try:
    res = report_run.run_job(report_run.Job("native", "float6_e2m3fn", ops), pool,
                         timeout=120, log=lambda _: None)
  finally:
    pool.close()
  assert res[ops[0]]["status"] == "abort"
  assert res[ops[1]]["status"] in ("ok", "error")  # ran, in a fresh worker


def test_native_worker_draws_what_jax_draws_in_process():
  """The native cell measures the very samples jax.random gives."""
  pool = report_run.WorkerPool(1 << 12, 0, _env())
  try:
    res = report_run.run_job(report_run.Job("native", "float8_e4m3fn", ["uniform"]),
                         pool, timeout=120, log=lambda _: None)["uniform"]
  finally:
    pool.close()
  want = np.asarray(jax.random.uniform(jax.random.key(0), (1 << 12,),
                                       jnp.float8_e4m3fn), np.float64)
  vals, counts = np.unique(want, return_counts=True)
  assert res["counts"] == [[float(v), int(c)] for v, c in zip(vals, counts)]


# -- the command ---------------------------------------------------------------------
@needs_matplotlib
def test_report_command_small(tmp_path, capsys):
  out = tmp_path / "rep"
  rc = cli.main(["report", "--out", str(out), "--formats", "e4m3",
                 "--ops", "normal,truncated_normal,glorot_normal,cast",
                 "--samples", "4096", "--plot-formats", "e4m3"])
  assert rc == 0
  text = (out / "report.md").read_text()
  assert "## Summary" in text and "## float8_e4m3fn" in text
  rows = {line.split(" | ")[0][2:]: line for line in text.splitlines()
          if line.startswith("| ") and " | " in line}
  for name in ("normal", "truncated_normal", "glorot_normal",
               "cast with overflow"):
    assert name in rows, name
    cells = rows[name].split(" | ")
    assert cells[5] == "ok", rows[name]  # the jaxfp8 column
  # Native truncated_normal and glorot_normal in e4m3fn: all NaN (JAX
  # 0.10.2 and 0.12.0.1).
  assert "**wrong**" in rows["truncated_normal"].split(" | ")[1]
  for family in ("normal", "truncated_normal", "glorot_normal"):
    w, h = report_plots.png_size(str(out / "plots" / f"{family}.png"))
    assert w > 100 and h > 100
  progress = capsys.readouterr().out
  assert "[2/2" in progress and "wrote" in progress


def test_report_without_matplotlib_says_pictures_skipped(tmp_path,
                                                         monkeypatch):
  monkeypatch.setattr(report_plots, "available", lambda: False)
  out = tmp_path / "rep"
  assert report.main(["--out", str(out), "--formats", "e5m2", "--ops",
                      "const", "--samples", "256"]) == 0
  text = (out / "report.md").read_text()
  assert "Pictures skipped: matplotlib is not installed" in text
  assert "| constant under jit | ok |" in text
  assert not (out / "plots").exists()


BAD_REPORT_OPTIONS = [
    (["--ops", "nope"], "argument --ops: unknown nope; choose from: ball, "),
    (["--ops", ","], "argument --ops: expected"),
    (["--formats", "e4m2"], "`--formats`"),
    (["--formats", "float32"], "`--formats` argument to `jaxfp8 report` must "
     "be a narrow format"),
    (["--samples", "0"], "argument --samples: must be an integer >= 64"),
    (["--jobs", "0"], "argument --jobs: must be an integer >= 1, got '0'"),
    (["--timeout", "0"], "argument --timeout: must be a positive number"),
    (["--plot-formats", "bogus"], "'bogus' for argument `--plot-formats`"),
    (["--plot-formats", "e4m3,float32"], "`--plot-formats` argument"),
]


@pytest.mark.parametrize("argv,message", BAD_REPORT_OPTIONS,
                         ids=[" ".join(a) for a, _ in BAD_REPORT_OPTIONS])
def test_bad_arguments(argv, message, capsys):
  with pytest.raises(SystemExit) as info:
    cli.main(["report", *argv, "--list"])
  assert info.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()
  assert err[-1].startswith("jaxfp8 report: error: "), err
  assert message in err[-1], err[-1]


def test_run_all_needs_a_worker():
  with pytest.raises(ValueError, match="`workers` argument to `run_all`"):
    report_run.run_all([], 64, 0, workers=0, timeout=1.0, fast_compile=True,
                       log=print)


def test_list(capsys):
  assert cli.main(["report", "--list", "--ops", "sample"]) == 0
  out = capsys.readouterr().out
  assert "float8_e4m3fn" in out and "truncated_normal" in out
  assert "glorot_normal" not in out


# -- the pictures ----------------------------------------------------------------
@needs_matplotlib
def test_plot_is_a_valid_nonempty_png(tmp_path):
  from matplotlib import image  # pylint: disable=g-import-not-at-top
  n = 1 << 14
  panels = []
  for fmt in ("float8_e4m3fn", "float4_e2m1fn"):
    values, probs = laws.rounded_law("normal", fmt)
    rng = np.random.default_rng(1)
    vals, counts = np.unique(values[rng.choice(len(values), n, p=probs)],
                             return_counts=True)
    counts = [[float(v), int(c)] for v, c in zip(vals, counts)]
    panels.append(report_plots.Panel(
        fmt, values, probs, 0.0, native=None,
        jaxfp8=(counts, n, 0, "TV 0.01"), native_note="error: refused"))
  path = report_plots.plot_family(str(tmp_path / "normal.png"), "normal",
                                  panels, n)
  with open(path, "rb") as fh:
    assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
  width, height = report_plots.png_size(path)
  assert width >= 400 and height >= 200
  assert os.path.getsize(path) > 10_000
  pixels = image.imread(path)
  assert pixels.shape[:2] == (height, width)
  assert pixels[..., :3].std() > 0.05  # not a blank canvas
  with pytest.raises(ValueError, match="not a PNG"):
    report_plots.png_size(__file__)
