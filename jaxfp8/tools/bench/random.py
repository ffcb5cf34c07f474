"""``python -m jaxfp8 bench random``: narrow-format samplers against jax.random.

For each key implementation (threefry2x32, rbg, unsafe_rbg), times every
sampler of every distribution and format in one round-robin whose order
is drawn afresh each round (medians, every function jitted, 2^22 samples by
default):

- ``float32``: ``jax.random.<dist>(key, shape, jnp.float32)``, the float32
  sample alone (the ``x jax f32`` column);
- ``f32->fmt``: ``jax.random.<dist>(key, shape, jnp.float32).astype(fmt)``,
  the usual workaround -- the baseline of every ratio;
- ``native``: ``jax.random.<dist>(key, shape, fmt)`` where JAX accepts it
  (its samples are wrong: see docs/random.md);
- ``exact``, ``table``, ``cast``: ``jaxfp8.random.<dist>(..., method=...)``.

Prints, per key implementation, a markdown table of random bits per sample
(every word drawn counted), samples/s and ratios (higher is faster), then
the rows left out because they can't exist: ``f32->fmt`` and ``native`` for
formats JAX can't hold in arrays (float6 on JAX 0.10; their ratios are then
over jaxfp8's ``cast`` method), and the methods jaxfp8 refuses for a law and
format (E8M0 is unsigned: ``normal`` not at all, ``uniform`` by ``cast``).
"""
from __future__ import annotations

import argparse
import datetime
from typing import Callable

import jax
import jax.numpy as jnp

from jaxfp8._src.numerics import formats
from jaxfp8._src.random import continuous as samplers
from jaxfp8._src.random import exact_method
from jaxfp8._src.random import table_method
from jaxfp8.tools import timing
from jaxfp8.tools.options import int_at_least

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


def _refusal(our_fn, fmt, method: str) -> str | None:
  """Why jaxfp8 refuses this law, format and method (None: it doesn't).

  The samplers validate in Python, so tracing a tiny draw is enough.
  """
  try:
    jax.eval_shape(lambda k: our_fn(k, (8,), fmt.name, method),
                   jax.random.key(0))
  except (NotImplementedError, ValueError) as e:
    return str(e).split(";")[0]
  return None


KEY_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")


def _bits(dist: str, fmt, variant: str) -> float:
  params = _LAW_PARAMS.get(dist, {})
  if variant == "table":
    return table_method.bits_per_sample(dist, fmt, params)
  if variant == "exact":
    return exact_method.bits_per_sample(dist, fmt, params)
  return 32


def run(dists, fmts, n: int, repeats: int, notes: list[str] | None = None,
        impl: str = "threefry2x32") -> list[list[object]]:
  """Rows ``[dist, format, variant, bits/sample, Msamples/s, x f32->fmt,
  x jax f32, x native]`` for keys of implementation ``impl``.

  Every function of every law and format is timed in one round-robin whose
  order is drawn afresh each round (:func:`timing.interleaved_medians`), so
  noise and the slowdown after a large call hit all alike. ``x jax f32`` is
  the ratio to ``jax.random.<dist>(key, shape, jnp.float32)`` alone: the
  float32 sample, not rounded.

  Variants that can't exist are left out, with a line in ``notes``: the
  ``f32->fmt`` and ``native`` rows of formats JAX can't hold in arrays
  (float6 on JAX 0.10), whose ratios are then over jaxfp8's ``cast`` method
  (the same float32 draw, rounded by jaxfp8), and the methods jaxfp8 refuses
  for a law and format (``exact`` and ``table`` for unsigned E8M0).
  """
  notes = [] if notes is None else notes
  key = jax.random.key(0, impl=impl)
  shape = (n,)
  fns, groups = {}, []
  for dist in dists:
    jax_fn, our_fn = _DISTS[dist]
    f32 = (dist, "float32")
    fns[f32] = jax.jit(lambda k, jax_fn=jax_fn: jax_fn(k, shape, jnp.float32))
    for name in fmts:
      fmt = formats.get(name)
      here = {}
      if fmt.native:
        here["f32->fmt"] = jax.jit(
            lambda k, jax_fn=jax_fn, fmt=fmt: jax_fn(k, shape, jnp.float32)
            .astype(fmt.dtype))
        if _native_works(jax_fn, fmt):
          here["native"] = jax.jit(lambda k, jax_fn=jax_fn, fmt=fmt: jax_fn(
              k, shape, fmt.dtype))
      for m in METHODS:
        why = _refusal(our_fn, fmt, m)
        if why is not None:
          notes.append(f"{dist}, {fmt.name}: no {m} row ({why})")
          continue
        here[m] = jax.jit(lambda k, our_fn=our_fn, fmt=fmt, m=m: our_fn(
            k, shape, fmt.name, m))
      base_name = "f32->fmt" if "f32->fmt" in here else "cast"
      if base_name not in here:
        notes.append(f"{dist}, {fmt.name}: no rows (no baseline to compare "
                     "with)")
        continue
      if base_name != "f32->fmt":
        notes.append(f"{dist}, {fmt.name}: JAX {jax.__version__} can't hold "
                     "its arrays, so no f32->fmt or native rows; its "
                     "'x f32->fmt' column is over jaxfp8's cast method")
      fns.update({(dist, fmt.name, v): f for v, f in here.items()})
      groups.append((dist, fmt, base_name, list(here)))
  times = timing.interleaved_medians(
      {k: (lambda f=f: f(key)) for k, f in fns.items()}, repeats=repeats)
  rows = []
  for dist, fmt, base_name, variants in groups:
    base = times[(dist, fmt.name, base_name)]
    native = times.get((dist, fmt.name, "native"))
    f32 = times[(dist, "float32")]
    for variant in variants:
      t = times[(dist, fmt.name, variant)]
      rows.append([dist, fmt.name, variant,
                   f"{_bits(dist, fmt, variant):.3g}", f"{n / t / 1e6:.1f}",
                   f"{base / t:.2f}", f"{f32 / t:.2f}",
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
  ("DDG": a DDG tree, else one lookup; "n/a": ``exact`` doesn't serve the
  law in that format, e.g. any law in unsigned E8M0)."""
  rows = []
  for dist, params in _BITS_LAWS:
    label = dist + (" (" + ", ".join(f"{k}={v:g}" for k, v in params.items())
                    + ")" if params else "")
    row = [label]
    for name in fmts:
      fmt = formats.get(name)
      try:
        plan = exact_method.plan(dist, fmt.name, tuple(sorted(params.items())))
        bits = exact_method.bits_per_sample(dist, fmt, params)
      except (NotImplementedError, ValueError):
        row.append("n/a")
        continue
      row.append(f"{bits:.3g}" + (" (DDG)" if plan.kind == "ddg" else ""))
    rows.append(row)
  return timing.markdown_table(["exact: bits/sample"] + list(fmts), rows)


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(prog="jaxfp8 bench random",
                                   description=__doc__.splitlines()[0])
  parser.add_argument("--log2n", type=int_at_least(0), default=22,
                      help="samples per call: 2^log2n (default 22)")
  parser.add_argument("--repeats", type=int_at_least(1), default=9)
  parser.add_argument("--formats", nargs="+",
                      default=["float8_e4m3fn", "float8_e5m2"],
                      help="narrow formats by name or alias")
  parser.add_argument("--dists", nargs="+", choices=sorted(_DISTS),
                      default=["uniform", "normal", "truncated_normal"])
  parser.add_argument("--impls", nargs="+", choices=KEY_IMPLS,
                      default=list(KEY_IMPLS),
                      help="key implementations to time (default: all)")
  parser.add_argument("--bits", action="store_true",
                      help="print the bits-per-sample table of `exact` for "
                      "every law and the given formats, and exit")
  args = parser.parse_args(argv)
  try:
    fmts = list(dict.fromkeys(
        formats.get_narrow(f, arg="--formats", fn="bench random").name
        for f in args.formats))
  except (TypeError, ValueError) as e:
    parser.error(str(e))
  if args.bits:
    print(bits_table(fmts))
    return 0
  print(f"# jaxfp8.random benchmark, {datetime.date.today()}, "
        f"JAX {jax.__version__}, {jax.default_backend()} "
        f"({timing.cpu_name()}, {jax.device_count()} device(s)), "
        f"2^{args.log2n} samples, median of {args.repeats}, one round-robin "
        "per key implementation, in a fresh order each round")
  notes: list[str] = []
  for impl in args.impls:
    rows = run(args.dists, fmts, 2**args.log2n, args.repeats, notes, impl)
    print(f"\n## keys: {impl}\n")
    print(timing.markdown_table(
        ["dist", "format", "variant", "bits/sample", "Msamples/s",
         "x f32->fmt", "x jax f32", "x native"], rows))
  if notes:
    print("\nLeft out:")
    for note in dict.fromkeys(notes):
      print(f"- {note}")
  return 0
