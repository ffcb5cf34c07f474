"""``jaxfp8 report``: what the installed JAX does with narrow formats, and jaxfp8.

For every narrow format and every audited operation (the float samplers of
``jax.random``, the initializers of ``jax.nn.initializers``, constants under
``jit``, casts with overflow, dot and matmul) the report runs the native JAX
call and the jaxfp8 call, each side in worker subprocesses: a native crash
(a float6 constant under ``jit`` aborts the process on JAX 0.10) becomes the
cell "abort" and the remaining operations run in a fresh worker. It measures
whether each call works, its NaN count, the distinct values it produced
against those an exact sampler would produce, and the total variation
distance to the exact rounded law, then writes ``report.md`` and, when
matplotlib is installed, one PNG per distribution family.

  jaxfp8 report --out report/                     # everything, < 3 min on 2 cores
  jaxfp8 report --formats e4m3 e2m1 --ops normal,truncated_normal,cast
"""
from jaxfp8.tools.report.command import main as main

__all__ = ["main"]
