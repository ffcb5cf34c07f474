"""The conversion tests again, compiled by XLA's own fusion emitters.

The suite compiles with XLA's elemental IR emitter on jaxlib 0.10, because it
compiles faster (tests/xla_flags.py). Users get the fusion emitters, and the
two differ where jaxfp8 depends on XLA most: its converts (the elemental one
gives the NaN code for a negative value that rounds to zero in an ``fnuz``
format; the fusion ones abort on more float6 operations). So the tests of every
cast corner, of MX at the fast path's boundaries and of the native probe run
here a second time, in a pytest of their own without that flag.
"""
from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

import xla_flags

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: (files, the -k expression selecting tests in them). Each selection
# must select more than 20 tests, and all must pass.
SELECTIONS = {
    "cast": (["tests/numerics/test_cast.py"],
             "corner_values or integer_path or ml_dtypes or decode_inverts"
             " or hypothesis_inputs or never_nan or wide_16_bit"),
    "mx": (["tests/mx/test_mx_quantize.py", "tests/mx/test_mx_tuning.py",
            "tests/numerics/test_formats.py"],
           "not bit_exact_against_float64_reference"),
}


def _pytest_args(names):
  """One pytest's arguments for the selections `names`: every file, and
  each selection's -k expression confined to its own files (a -k term
  matches a test's module by its file name)."""
  files = [f for n in names for f in SELECTIONS[n][0]]
  terms = [f"(({' or '.join(os.path.basename(f) for f in SELECTIONS[n][0])})"
           f" and ({SELECTIONS[n][1]}))" for n in names]
  return [*files, "-k", " or ".join(terms)]


def _run(names, tmp):
  """Runs the selections `names` in one pytest: (outcome of each test by
  "module[.Class]::test", the pytest's exit status, the end of its output)."""
  report = tmp / "report.xml"
  proc = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-n", "0",
       f"--junitxml={report}", *_pytest_args(names)],
      cwd=_ROOT, env=xla_flags.default_codegen_env(), capture_output=True,
      text=True, timeout=600)
  outcomes = {}
  if report.exists():
    for case in ET.parse(report).getroot().iter("testcase"):
      kinds = [child.tag for child in case
               if child.tag in ("failure", "error", "skipped")]
      outcomes[f"{case.get('classname')}::{case.get('name')}"] = (
          kinds[0] if kinds else "passed")
  return outcomes, proc.returncode, proc.stdout[-4000:] + proc.stderr[-2000:]


@pytest.fixture(scope="module")
def fusion_emitter_run(request, tmp_path_factory):
  """The outcome of every selected test, from ONE pytest for all the
  selections this session runs (a pytest apiece started Python, JAX and
  the test modules once more), and the end of its output."""
  names = sorted({item.callspec.params["name"] for item in
                  request.session.items if item.module is request.module})
  if not os.environ.get("PYTEST_XDIST_WORKER"):
    outcomes, returncode, output = _run(
        names, tmp_path_factory.mktemp("default_codegen"))
  else:
    # Under pytest-xdist the tests may run in different workers: the first
    # to take the lock runs the pytest, the others read what it found.
    # getbasetemp().parent is this run's, shared by its workers.
    shared = tmp_path_factory.getbasetemp().parent / "default_codegen"
    shared.mkdir(exist_ok=True)
    with open(shared / "lock", "w") as lock:
      fcntl.flock(lock, fcntl.LOCK_EX)
      result = shared / "result.json"
      if not result.exists():
        result.write_text(json.dumps(_run(names, shared)))
      outcomes, returncode, output = json.loads(result.read_text())
  # 0: all passed; 1: some failed (each selection judges its own).
  assert returncode in (0, 1) and outcomes, output
  return outcomes, output


@pytest.mark.skipif(xla_flags.ELEMENTAL_EMITTER not in
                    os.environ.get("XLA_FLAGS", "").split(),
                    reason="the suite already runs with XLA's fusion emitters")
@pytest.mark.parametrize("name", sorted(SELECTIONS))
def test_passes_with_xla_fusion_emitters(name, fusion_emitter_run):
  outcomes, output = fusion_emitter_run
  modules = {f[:-len(".py")].replace("/", ".") for f in SELECTIONS[name][0]}
  mine = {test: outcome for test, outcome in outcomes.items()
          if test.split("::")[0].split(".Test")[0] in modules}
  failed = sorted(t for t, outcome in mine.items()
                  if outcome in ("failure", "error"))
  assert not failed, (failed[:20], output)
  passed = sum(outcome == "passed" for outcome in mine.values())
  assert passed > 20, (mine, output)
