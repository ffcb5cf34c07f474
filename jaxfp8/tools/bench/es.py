"""``python -m jaxfp8 bench es``: population sampling, fp8 against float32.

Times, round-robin in one run, the sampling of a population of ``popsize``
perturbations of ``params`` parameters:

- ``jax.random.normal`` in float32 (what evosax-style strategies draw);
- float32-then-cast: ``jax.random.normal(float32).astype(fmt)``;
- :func:`jaxfp8.es.perturbations` in ``fmt`` with each sampling method;
- the same with antithetic sampling, against float32-then-cast of half the
  population mirrored the fastest way (the sign bit of the uint8 codes);
- :func:`jaxfp8.es.sample_population` (candidates ``mean + sigma * eps``
  rounded into ``fmt``) against float32 candidates cast to ``fmt``.

Ratios are throughput over float32-then-cast's (higher is faster). Target:
>= 1.5x for ``perturbations`` (exact method) at 4096 x 10,000.

Formats the installed JAX can't hold in arrays (float6 on JAX 0.10) have no
``astype``: their baselines round the float32 draws with :func:`jaxfp8.cast`
(uint8 codes) instead, and the output says so.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform

import jax
import jax.numpy as jnp

from jaxfp8._src import cast as cast_lib
from jaxfp8._src import es
from jaxfp8._src import formats
from jaxfp8.tools import timing
from jaxfp8.tools.options import int_at_least
from jaxfp8._src.random import config


def _num(x: float) -> str:
  # Whole numbers at the default size; small runs keep two digits, not "0".
  return f"{x:.0f}" if x >= 10 else f"{x:.2g}"


def _rows(med: dict[str, float], groups, samples: int) -> list[list[str]]:
  rows = []
  for name, base, note in groups:
    t = med[name]
    rows.append([name, _num(t * 1e3), _num(samples / t / 1e6),
                 f"{med[base] / t:.2f}x", note])
  return rows


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="jaxfp8 bench es")
  parser.add_argument("--popsize", type=int_at_least(2), default=4096,
                      help="population size; even, as the antithetic rows "
                      "pair +eps with -eps (default 4096)")
  parser.add_argument("--params", type=int_at_least(1), default=10_000)
  parser.add_argument("--format", default="float8_e4m3fn",
                      help="a signed narrow format (default float8_e4m3fn)")
  parser.add_argument("--methods", default=",".join(config.METHODS))
  parser.add_argument("--repeats", type=int_at_least(1), default=5)
  args = parser.parse_args(argv)
  if args.popsize % 2:
    parser.error(f"argument --popsize: must be even (the antithetic rows "
                 f"pair +eps with -eps), got {args.popsize}")
  try:
    fmt = formats.get_narrow(args.format, arg="--format", fn="bench es")
  except (TypeError, ValueError) as e:
    parser.error(str(e))
  if not fmt.signed:
    parser.error(f"argument --format: must be a signed narrow format "
                 f"(perturbations are symmetric about 0), got {fmt.name}")
  methods = [m.strip() for m in args.methods.split(",") if m.strip()]
  unknown = [m for m in methods if m not in config.METHODS]
  if unknown:
    parser.error(f"argument --methods: unknown {', '.join(unknown)}; choose "
                 f"from {', '.join(config.METHODS)}")
  pop, n, dt = args.popsize, args.params, fmt.dtype
  half = pop // 2
  key = jax.random.key(0)
  mean = jnp.linspace(-1.0, 1.0, n)

  def to_fmt(v):
    if fmt.native:
      return v.astype(dt)
    return cast_lib.cast(v, fmt)  # XLA can't compile arrays of it: codes

  normal32 = jax.jit(lambda k: jax.random.normal(k, (pop, n)))
  cast = jax.jit(lambda k: to_fmt(jax.random.normal(k, (pop, n))))
  # The strongest antithetic baseline: cast half, mirror the codes.
  cast_anti = jax.jit(lambda k: es.mirror(
      to_fmt(jax.random.normal(k, (half, n))), fmt))
  cand32 = jax.jit(lambda k: (mean + 0.1 * jax.random.normal(k, (pop, n))))
  cand_cast = jax.jit(
      lambda k: to_fmt(mean + 0.1 * jax.random.normal(k, (pop, n))))
  fns = {
      "normal float32": lambda: normal32(key),
      "float32-then-cast": lambda: cast(key),
      "float32-then-cast, antithetic": lambda: cast_anti(key),
      "candidates float32": lambda: cand32(key),
      "candidates float32-then-cast": lambda: cand_cast(key),
  }
  groups = [("normal float32", "float32-then-cast", "4 bytes/sample"),
            ("float32-then-cast", "float32-then-cast", "baseline")]
  for m in methods:
    name = f"perturbations {m}"
    fns[name] = lambda m=m: es.perturbations(key, pop, n, dt, antithetic=False,
                                             method=m)
    groups.append((name, "float32-then-cast", ""))
  groups.append(("float32-then-cast, antithetic",
                 "float32-then-cast, antithetic", "baseline (antithetic)"))
  for m in methods:
    name = f"perturbations {m}, antithetic"
    fns[name] = lambda m=m: es.perturbations(key, pop, n, dt, method=m)
    groups.append((name, "float32-then-cast, antithetic", ""))
  fns["sample_population (default method)"] = lambda: es.sample_population(
      key, mean, 0.1, pop, dt, antithetic=False)
  groups += [("candidates float32", "candidates float32-then-cast",
              "mean + 0.1 eps, float32"),
             ("candidates float32-then-cast", "candidates float32-then-cast",
              "baseline (candidates)"),
             ("sample_population (default method)",
              "candidates float32-then-cast", "rounding='nearest'")]
  med = timing.interleaved_medians(fns, repeats=args.repeats, warmup=1)

  now = datetime.datetime.now(datetime.timezone.utc)
  print(f"# ES population sampling: {pop} x {n} = {pop * n / 1e6:.1f}M "
        f"samples into {fmt.name}")
  print(f"{now:%Y-%m-%d %H:%M} UTC, jax {jax.__version__}, "
        f"{jax.default_backend()} ({jax.devices()[0].device_kind}), "
        f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}"
        f"; default method {config.get_default_method()!r}")
  print("speed-up: throughput over the same-run baseline of its group "
        "(float32-then-cast, antithetic or not); higher is faster")
  if not fmt.native:
    print(f"JAX {jax.__version__} can't hold {fmt.name} arrays, so the "
          "float32-then-cast baselines round with jaxfp8.cast (uint8 codes) "
          "instead of astype")
  print()
  print(timing.markdown_table(
      ["sampler", "median ms", "M samples/s", "speed-up", "note"],
      _rows(med, groups, pop * n)))
  if "perturbations exact" in med:
    exact = med["float32-then-cast"] / med["perturbations exact"]
    print(f"\ntarget >= 1.5x over float32-then-cast (exact, not antithetic): "
          f"{exact:.2f}x -> {'met' if exact >= 1.5 else 'MISSED'}")
  return 0
