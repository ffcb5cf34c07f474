"""Benchmark suites for ``python -m jaxfp8 bench <suite>``; timing in
:mod:`jaxfp8.tools.timing`."""
