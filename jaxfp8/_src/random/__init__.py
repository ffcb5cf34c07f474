"""Sampling narrow formats: the samplers behind :mod:`jaxfp8.random`.

The public functions, with jax.random's signatures, by what they draw:
``continuous`` (scalar laws: those with a CDF first, then the cast-only
ones), ``discrete`` (booleans, signs, counts, indices) and ``multivariate``
(vectors and matrices). ``draw`` checks a request and runs the method that
serves it; one module per method (``exact_method``, ``table_method``,
``cast_method``); the exact and table methods draw their laws by the plans of
``tree_plan`` (pure tables or DDG trees) and the pooled bytes of ``pool``;
shared pieces in ``common`` (formats, parameters, output), ``bits`` (random
draws of any width packed into 32-bit words) and ``config`` (the default
method). What each law is (parameters, domains, CDFs) is in
:mod:`jaxfp8._src.random.distributions`, its float64 CDF math in
:mod:`jaxfp8._src.random.cdfs`, the rounded laws they sample in
:mod:`jaxfp8._src.random.laws`.
"""
