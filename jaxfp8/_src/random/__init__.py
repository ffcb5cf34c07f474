"""Sampling narrow formats: the samplers behind :mod:`jaxfp8.random`.

One module per method (``exact``, ``table``, ``cast``), shared pieces in
``common`` (keys, formats, parameters, output) and ``config`` (the default
method); ``samplers`` holds the public functions with jax.random's signatures.
"""
