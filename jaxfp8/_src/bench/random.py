"""``python -m jaxfp8 bench random``: narrow-format samplers against jax.random.

For each distribution and format, times side by side in one run (interleaved
medians, every function jitted, 2^22 samples by default):

- ``f32->fmt``: ``jax.random.<dist>(key, shape, jnp.float32).astype(fmt)``,
  the usual workaround -- the baseline of every ratio;
- ``native``: ``jax.random.<dist>(key, shape, fmt)`` where JAX accepts it
  (its samples are wrong: see docs/random.md);
- ``exact``, ``table``, ``cast``: ``jaxfp8.random.<dist>(..., method=...)``.

Prints a markdown table of samples/s and ratios (higher is faster).
"""
from __future__ import annotations

import argparse
import datetime
import platform
from typing import Callable

import jax
import jax.numpy as jnp

from jaxfp8._src import formats
from jaxfp8._src.bench import _timing
from jaxfp8._src.random import exact as exact_method
from jaxfp8._src.random import samplers
from jaxfp8._src.random import table as table_method

# name -> (jax.random call with a dtype, jaxfp8.random call with a method)
_DISTS: dict[str, tuple[Callable, Callable]] = {
    "uniform": (lambda k, s, d: jax.random.uniform(k, s, d),
                lambda k, s, d, m: samplers.uniform(k, s, d, method=m)),
    "normal": (lambda k, s, d: jax.random.normal(k, s, d),
               lambda k, s, d, m: samplers.normal(k, s, d, method=m)),
    "truncated_normal": (
        lambda k, s, d: jax.random.truncated_normal(k, -2.0, 2.0, s, d),
        lambda k, s, d, m: samplers.truncated_normal(k, -2.0, 2.0, s, d,
                                                     method=m)),
    "exponential": (lambda k, s, d: jax.random.exponential(k, s, d),
                    lambda k, s, d, m: samplers.exponential(k, s, d,
                                                            method=m)),
    "laplace": (lambda k, s, d: jax.random.laplace(k, s, d),
                lambda k, s, d, m: samplers.laplace(k, s, d, method=m)),
}
_LAW_PARAMS = {"truncated_normal": {"lower": -2.0, "upper": 2.0}}
METHODS = ("exact", "table", "cast")


def _native_works(jax_fn, fmt) -> bool:
  try:
    jax.block_until_ready(jax_fn(jax.random.key(0), (8,), fmt.dtype))
    return True
  except Exception:  # pylint: disable=broad-except
    return False


def run(dists, fmts, n: int, repeats: int) -> list[list[object]]:
  """Rows ``[dist, format, variant, bits/sample, Msamples/s, x f32->fmt,
  x native]``."""
  key = jax.random.key(0)
  shape = (n,)
  rows = []
  for dist in dists:
    jax_fn, our_fn = _DISTS[dist]
    for name in fmts:
      fmt = formats.get(name)
      fns = {"f32->fmt": jax.jit(
          lambda k, jax_fn=jax_fn, fmt=fmt: jax_fn(k, shape, jnp.float32)
          .astype(fmt.dtype))}
      if fmt.native and _native_works(jax_fn, fmt):
        fns["native"] = jax.jit(lambda k, jax_fn=jax_fn, fmt=fmt: jax_fn(
            k, shape, fmt.dtype))
      for m in METHODS:
        fns[m] = jax.jit(lambda k, our_fn=our_fn, fmt=fmt, m=m: our_fn(
            k, shape, fmt.name, m))
      times = _timing.interleaved_medians(
          {k: (lambda f=f: f(key)) for k, f in fns.items()}, repeats=repeats)
      base, native = times["f32->fmt"], times.get("native")
      params = _LAW_PARAMS.get(dist, {})
      bits = {"f32->fmt": 32, "native": 32, "cast": 32,
              "table": table_method.bits_per_sample(dist, fmt, params),
              "exact": exact_method.bits_per_sample(dist, fmt, params)}
      for variant, t in times.items():
        rows.append([dist, fmt.name, variant, f"{bits[variant]:.3g}",
                     f"{n / t / 1e6:.1f}", f"{base / t:.2f}",
                     f"{native / t:.2f}" if native else "n/a"])
  return rows


_BITS_LAWS = [
    ("uniform", {}), ("uniform", {"minval": -1.0, "maxval": 1.0}),
    ("uniform", {"minval": 0.0, "maxval": 3.0}), ("normal", {}),
    ("truncated_normal", {"lower": -2.0, "upper": 2.0}), ("laplace", {}),
    ("logistic", {}), ("exponential", {}), ("gumbel", {}), ("cauchy", {}),
    ("lognormal", {"sigma": 1.0}), ("rayleigh", {"scale": 1.0}),
    ("maxwell", {}), ("double_sided_maxwell", {"loc": 0.0, "scale": 1.0}),
    ("weibull_min", {"scale": 1.0, "concentration": 2.0}),
    ("pareto", {"b": 3.0}),
    ("triangular", {"left": -1.0, "mode": 0.0, "right": 1.0}),
]


def bits_table(fmts) -> str:
  """Markdown table: random bits per sample of ``exact``, by law and format
  ("2L": two-level plan)."""
  rows = []
  for dist, params in _BITS_LAWS:
    label = dist + (" (" + ", ".join(f"{k}={v:g}" for k, v in params.items())
                    + ")" if params else "")
    row = [label]
    for name in fmts:
      fmt = formats.get(name)
      plan = exact_method.plan(dist, fmt.name, tuple(sorted(params.items())))
      bits = exact_method.bits_per_sample(dist, fmt, params)
      row.append(f"{bits:.3g}" + (" (2L)" if plan.kind == "two_level" else ""))
    rows.append(row)
  return _timing.markdown_table(["exact: bits/sample"] + list(fmts), rows)


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(prog="jaxfp8 bench random",
                                   description=__doc__.splitlines()[0])
  parser.add_argument("--log2n", type=int, default=22,
                      help="samples per call: 2^log2n (default 22)")
  parser.add_argument("--repeats", type=int, default=9)
  parser.add_argument("--formats", nargs="+",
                      default=["float8_e4m3fn", "float8_e5m2"])
  parser.add_argument("--dists", nargs="+", choices=sorted(_DISTS),
                      default=["uniform", "normal", "truncated_normal"])
  parser.add_argument("--bits", action="store_true",
                      help="print the bits-per-sample table of `exact` for "
                      "every law and the given formats, and exit")
  args = parser.parse_args(argv)
  if args.bits:
    print(bits_table(args.formats))
    return 0
  rows = run(args.dists, args.formats, 2**args.log2n, args.repeats)
  print(f"# jaxfp8.random benchmark, {datetime.date.today()}, "
        f"JAX {jax.__version__}, {jax.default_backend()} "
        f"({platform.machine()}, {jax.device_count()} device(s)), "
        f"2^{args.log2n} samples, median of {args.repeats}")
  print(_timing.markdown_table(
      ["dist", "format", "variant", "bits/sample", "Msamples/s",
       "x f32->fmt", "x native"], rows))
  return 0
