"""Shared test settings: deterministic hypothesis, CPU-sized examples."""
import os
import sys

import hypothesis

sys.path.insert(0, os.path.dirname(__file__))

hypothesis.settings.register_profile(
    "jaxfp8", deadline=None, max_examples=60, derandomize=True,
    suppress_health_check=[hypothesis.HealthCheck.too_slow])
hypothesis.settings.load_profile("jaxfp8")
