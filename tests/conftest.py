"""Shared test settings: deterministic hypothesis, CPU-sized examples.

Two hypothesis profiles: ``jaxfp8`` (the default, for CI: derandomized, so
every run draws the same cases, and sized so tests/test_properties.py runs in
about a minute on two cores) and ``long`` (ten times the examples, by hand:
``HYPOTHESIS_PROFILE=long python -m pytest tests/test_properties.py``).
"""
import os
import sys

import hypothesis

sys.path.insert(0, os.path.dirname(__file__))

_SHARED = dict(deadline=None, derandomize=True,
               suppress_health_check=[hypothesis.HealthCheck.too_slow])
hypothesis.settings.register_profile("jaxfp8", max_examples=60, **_SHARED)
hypothesis.settings.register_profile("long", max_examples=600, **_SHARED)
hypothesis.settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "jaxfp8"))
