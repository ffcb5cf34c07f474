"""Tools built on jaxfp8: the ``jaxfp8`` command, its report, benchmarks and
docs generator.

A layer above the library: tools import :mod:`jaxfp8` (public and
``jaxfp8._src``); the library never imports them.
"""
