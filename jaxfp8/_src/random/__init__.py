"""Sampling narrow formats: the samplers behind :mod:`jaxfp8.random`.

The public functions, with jax.random's signatures, by what they draw:
``continuous`` (scalar laws: those with a CDF first, then the cast-only
ones), ``discrete`` (booleans, signs, counts, indices) and ``multivariate``
(vectors and matrices). ``draw`` checks a request and runs the method that
serves it; one module per method (``exact_method``, ``table_method``,
``cast_method``); shared pieces in ``common`` (formats, parameters, output),
``bits`` (random draws of any width packed into 32-bit words) and ``config``
(the default method). What each law is (parameters, domains, CDFs) is in
:mod:`jaxfp8._src.random.distributions`, the rounded laws they sample in
:mod:`jaxfp8._src.random.laws`.
"""
