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

import os
import re
import subprocess
import sys

import pytest

import xla_flags

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Each selection must select tests (pytest exits 5 if none), and all must pass.
SELECTIONS = {
    "cast": ["tests/numerics/test_cast.py", "-k",
             "corner_values or integer_path or ml_dtypes or decode_inverts"
             " or hypothesis_inputs or never_nan or wide_16_bit"],
    "mx": ["tests/mx/test_mx_quantize.py", "tests/mx/test_mx_tuning.py", "-k",
           "not bit_exact_against_float64_reference",
           "tests/numerics/test_formats.py"],
}


@pytest.mark.skipif(xla_flags.ELEMENTAL_EMITTER not in
                    os.environ.get("XLA_FLAGS", "").split(),
                    reason="the suite already runs with XLA's fusion emitters")
@pytest.mark.parametrize("name", sorted(SELECTIONS))
def test_passes_with_xla_fusion_emitters(name):
  proc = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-n", "0",
       *SELECTIONS[name]], cwd=_ROOT, env=xla_flags.default_codegen_env(),
      capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
  passed = re.search(r"(\d+) passed", proc.stdout)
  assert passed and int(passed.group(1)) > 20, proc.stdout[-2000:]
