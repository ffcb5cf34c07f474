"""Sampling narrow formats: the samplers behind :mod:`jaxfp8.random`.

One module per method (``exact``, ``table``, ``cast``); shared pieces in
``common`` (keys, formats, parameters, output), ``bits`` (random draws of any
width packed into 32-bit words) and ``config`` (the default method);
``samplers`` holds the public functions with jax.random's signatures. The
laws they sample live in :mod:`jaxfp8._src.laws`.
"""
