"""Benchmark suites for ``python -m jaxfp8 bench <suite>``; see ``_timing``."""
