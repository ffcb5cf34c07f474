"""Shared test settings: deterministic hypothesis, CPU-sized examples.

Two hypothesis profiles: ``jaxfp8`` (the default, for CI: derandomized, so
every run draws the same cases, and sized so tests/numerics/test_properties.py runs in
about a minute on two cores) and ``long`` (ten times the examples, by hand:
``HYPOTHESIS_PROFILE=long python -m pytest tests/numerics/test_properties.py``).

XLA compiles the suite's programs with cheaper code generation (LLVM ``-O0``
and, on jaxlib 0.10, XLA's elemental IR emitter): most of the suite's time is
XLA compiling thousands of small programs that then run once. tests/xla_flags.py
says what each flag costs and which tests run without it;
``JAXFP8_TEST_XLA_OPT=default`` keeps XLA's own settings. Subprocesses the tests
start inherit the flags: they add their own to ``XLA_FLAGS``.
"""
import os
import sys

import hypothesis

sys.path.insert(0, os.path.dirname(__file__))

import xla_flags  # pylint: disable=g-import-not-at-top

_have = os.environ.get("XLA_FLAGS", "")
_add = [f for f in xla_flags.suite_flags() if f.split("=")[0] not in _have]
if _add:
  os.environ["XLA_FLAGS"] = " ".join(filter(None, [_have] + _add))

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
    "tests/recipes/test_recipes_across_processes.py",
    "tests/recipes/test_gather.py::test_fsdp_step",
    "tests/es/test_es_across_processes.py",
    "tests/test_checkpoint_across_processes.py",
    "tests/test_multiprocess.py",
    "tests/recipes/test_scale_out_example.py",
    "tests/fp8/test_sharded_training.py",
    "tests/es/test_es_sharding.py",
    "tests/recipes/test_transformer_example.py",
    "tests/recipes/test_moe_example.py::test_quick_run_trains_every_recipe",
    "tests/recipes/test_ragged.py::test_experts_sharded",
    "tests/es/test_evolve_snn_example.py",
    "tests/es/test_evosax_strategy.py::test_jaxfp8_es_imports_without_evosax",
    "tests/es/test_evosax_strategy.py::test_sharded_population_matches_one_device",
    "tests/mx/test_mx_train_example.py",
    "tests/es/test_es_example.py",
    "tests/test_default_codegen.py",
    "tests/tools/test_report.py::test_a_hung_operation_is_a_timeout_cell",
    "tests/fp8/test_policy_example.py",
    "tests/mx/test_mx_sharding.py",
    "tests/test_wheel.py",
    "tests/test_checkpoint.py",
    "tests/tools/test_cli.py::test_bench_random_leaves_out_rows_that_cannot_exist",
    "tests/tools/test_cli.py::test_command_line_errors_are_one_line_not_tracebacks",
    "tests/random/test_random_api.py::test_out_sharding_same_samples_on_four_devices",
    "tests/random/test_random_api.py::test_vmap_over_keys",
    "tests/numerics/test_properties.py::test_es",
    "tests/numerics/test_hardening.py::test_float6_codearray_into_jnp_asarray",
    "tests/random/test_random_scipy_laws.py::test_import_without_scipy",
    "tests/faces/test_qwix_provider.py::test_linen_model_trains_as_under",
    "tests/tools/test_bench_fsdp.py",
    "tests/tools/test_bench_train.py::test_bench_train_quick",
)


def pytest_collection_modifyitems(items):
  items.sort(key=lambda item: not item.nodeid.startswith(_LONG_FIRST))
