"""Shared test settings: deterministic hypothesis, CPU-sized examples.

Two hypothesis profiles: ``jaxfp8`` (the default, for CI: derandomized, so
every run draws the same cases, and sized so tests/test_properties.py runs in
about a minute on two cores) and ``long`` (ten times the examples, by hand:
``HYPOTHESIS_PROFILE=long python -m pytest tests/test_properties.py``).

XLA compiles the suite's programs at LLVM ``-O0``: most of the suite's time is
XLA compiling thousands of small programs that then run once, and ``-O0`` cuts
the CPU time of compile-heavy files by a fifth to two fifths (measured on
tests/test_random.py and tests/test_es.py). LLVM keeps IEEE semantics at every
level (XLA's fast math is off), so results are the same bit for bit.
``JAXFP8_TEST_XLA_OPT=default`` keeps XLA's own level. Subprocesses the tests
start inherit it: they add their own flags to ``XLA_FLAGS``.
"""
import os
import sys

import hypothesis

_OPT = os.environ.get("JAXFP8_TEST_XLA_OPT", "0")
if (_OPT != "default"
    and "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", "")):
  os.environ["XLA_FLAGS"] = " ".join(
      filter(None, [os.environ.get("XLA_FLAGS", ""),
                    f"--xla_backend_optimization_level={_OPT}"]))

sys.path.insert(0, os.path.dirname(__file__))

_SHARED = dict(deadline=None, derandomize=True,
               suppress_health_check=[hypothesis.HealthCheck.too_slow])
hypothesis.settings.register_profile("jaxfp8", max_examples=60, **_SHARED)
hypothesis.settings.register_profile("long", max_examples=600, **_SHARED)
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "jaxfp8"))


# Tests that run for 5 s or more (most start a subprocess: an example, a
# 4-device run, a report worker), or whose module fixture does: collected
# first, so that pytest-xdist starts them early and no worker ends the run
# alone on one of them while the other is idle.
_LONG_FIRST = (
    "tests/test_sharded_training.py",
    "tests/test_es_sharding.py",
    "tests/test_mx_train_example.py",
    "tests/test_es_example.py",
    "tests/test_report.py::test_a_hung_operation_is_a_timeout_cell",
    "tests/test_policy_example.py",
    "tests/test_mx_sharding.py",
    "tests/test_wheel.py",
    "tests/test_checkpoint.py",
    "tests/test_cli.py::test_bench_random_leaves_out_rows_that_cannot_exist",
)


def pytest_collection_modifyitems(items):
  items.sort(key=lambda item: not item.nodeid.startswith(_LONG_FIRST))
