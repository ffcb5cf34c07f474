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
>= 3x for ``perturbations`` (exact method, not antithetic) at 4096 x 10,000
(issue #17; it was 1.5x before).

Formats the installed JAX can't hold in arrays (float6 on JAX 0.10) have no
``astype``: their baselines round the float32 draws with :func:`jaxfp8.cast`
(uint8 codes) instead, and the output says so.

``--memory`` measures memory instead of time: for each of ``perturbations``
(antithetic or not), ``OpenAIES.ask`` and ``sample_population``, in ``fmt``
and in float32, the compiled program's ``memory_analysis()`` (argument +
output + temporaries) and the peak RSS of a fresh process that compiles and
runs it once (``getrusage``), with ratios fp8 / float32. Target: <= 0.25x
for the antithetic population at 4096 x 100,000 (``--size 4096x100000``).

``--evosax`` compares evosax's own ``ask`` with
:class:`jaxfp8.es.EvosaxStrategy`'s (its noise in ``fmt`` by each method),
for evosax's ``Open_ES`` (antithetic) and ``SNES`` (not): times at
``popsize`` x ``params``, round-robin in one run, as speed-ups over evosax's
(higher is faster); and memory by the compiled programs'
``memory_analysis()`` (output + temporaries: what ``ask`` hands out and
what it needs to make it; also each ``tell``'s argument + output +
temporaries) at 4096 x 100,000, compiled, not run. Target: <= 0.3x
evosax's ``ask``. ``--quick`` shrinks every mode to a smoke test (64 x 1000,
one repeat; ``--evosax`` then measures memory at that size too).
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import resource
import subprocess
import sys

import jax
import jax.numpy as jnp
import optax

from jaxfp8._src.es import population as es
from jaxfp8._src.es.openai_es import OpenAIES
from jaxfp8._src.numerics import cast as cast_lib
from jaxfp8._src.numerics import formats
from jaxfp8._src.random import config
from jaxfp8.tools import timing
from jaxfp8.tools.options import int_at_least

# Throughput of perturbations (exact, not antithetic) over float32-then-cast.
_SPEED_TARGET = 3.0
# The wrapped evosax ask's program (output + temp) over evosax's own.
_EVOSAX_MEMORY_TARGET = 0.3
_EVOSAX_MEMORY_SIZE = (4096, 100_000)
_EVOSAX_STRATEGIES = ("Open_ES", "SNES")


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

# -- memory: one fresh process per case --------------------------------------

MEMORY_CASES = ("perturbations", "perturbations, not antithetic",
                "OpenAIES.ask", "sample_population")


def _memory_fn(case: str, pop: int, n: int, dtype: str):
  """The jitted function of a memory case, and its arguments."""
  key = jax.random.key(0)
  if case == "perturbations":
    return jax.jit(lambda k: es.perturbations(k, pop, n, dtype)), (key,)
  if case == "perturbations, not antithetic":
    return jax.jit(lambda k: es.perturbations(k, pop, n, dtype,
                                              antithetic=False)), (key,)
  if case == "OpenAIES.ask":
    strategy = OpenAIES(pop, optax.sgd(1.0), dtype=dtype)
    state = strategy.init(jnp.zeros(n))
    return jax.jit(strategy.ask), (key, state)
  mean = jnp.linspace(-1.0, 1.0, n)
  return jax.jit(lambda k, m: es.sample_population(k, m, 0.1, pop, dtype)), (
      key, mean)


def _rss_bytes() -> int:
  with open("/proc/self/statm") as f:  # pages: size resident ...
    return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_case(case: str, pop: int, n: int, dtype: str) -> dict[str, int]:
  """Compiles and runs one case in this process; its memory figures, bytes.

  Meant for a fresh process (``bench es --memory`` starts one per case), so
  that the peak RSS is this case's alone: ``rss_before`` is the resident
  size after the compilation, ``peak_rss`` the process's maximum
  (``ru_maxrss``) after one call whose result is kept.
  """
  fn, args = _memory_fn(case, pop, n, dtype)
  compiled = fn.lower(*args).compile()
  m = compiled.memory_analysis()
  rss_before = _rss_bytes() if os.path.exists("/proc/self/statm") else 0
  out = jax.block_until_ready(compiled(*args))
  peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB
  del out
  return {"argument": m.argument_size_in_bytes,
          "output": m.output_size_in_bytes, "temp": m.temp_size_in_bytes,
          "alias": m.alias_size_in_bytes, "rss_before": rss_before,
          "peak_rss": peak}


def _run_memory_case(case: str, pop: int, n: int, dtype: str) -> dict:
  here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__)))))  # the directory holding jaxfp8/
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
      p for p in (here, env.get("PYTHONPATH", "")) if p)
  code = ("import json, sys; from jaxfp8.tools.bench import es; "
          "print('MEMORY ' + json.dumps(es.memory_case(*sys.argv[1:2], "
          "int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])))")
  proc = subprocess.run([sys.executable, "-c", code, case, str(pop), str(n),
                         dtype], env=env, capture_output=True, text=True,
                        check=False)
  lines = [l for l in proc.stdout.splitlines() if l.startswith("MEMORY ")]
  if proc.returncode or not lines:
    raise RuntimeError(f"bench es --memory: case {case!r} in {dtype} failed "
                       f"(exit {proc.returncode}): {proc.stderr[-2000:]}")
  return json.loads(lines[-1][len("MEMORY "):])


def _mib(b: float) -> str:
  return f"{b / 2**20:.0f}" if b >= 10 * 2**20 else f"{b / 2**20:.2f}"


def memory_table(pop: int, n: int, fmt_name: str) -> tuple[str, dict]:
  """The memory table of ``bench es --memory``, and the raw figures."""
  figures, rows = {}, []
  for case in MEMORY_CASES:
    for dtype in ("float32", fmt_name):
      r = _run_memory_case(case, pop, n, dtype)
      r["program"] = r["argument"] + r["output"] + r["temp"] - r["alias"]
      r["rss_increase"] = r["peak_rss"] - r["rss_before"]
      figures[(case, dtype)] = r
    wide, narrow = figures[(case, "float32")], figures[(case, fmt_name)]
    for dtype, r in (("float32", wide), (fmt_name, narrow)):
      ratio = dtype != "float32"
      rows.append([
          case, dtype, _mib(r["output"]), _mib(r["temp"]), _mib(r["program"]),
          f"{r['program'] / wide['program']:.3f}x" if ratio else "",
          _mib(r["peak_rss"]), _mib(r["rss_increase"]),
          f"{r['rss_increase'] / wide['rss_increase']:.3f}x" if ratio else "",
          f"{r['peak_rss'] / wide['peak_rss']:.3f}x" if ratio else ""])
  table = timing.markdown_table(
      ["call", "dtype", "output MiB", "temp MiB", "program MiB",
       "program ratio", "peak RSS MiB", "RSS increase MiB", "increase ratio",
       "peak RSS ratio"], rows)
  return table, figures


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
  parser.add_argument("--size", default=None, metavar="POPxPARAMS",
                      help="popsize and params at once, e.g. 4096x100000 "
                      "(overrides --popsize and --params)")
  parser.add_argument("--memory", action="store_true",
                      help="measure memory instead of time: each call's "
                      "compiled memory analysis and the peak RSS of a fresh "
                      "process, fp8 against float32")
  parser.add_argument("--evosax", action="store_true",
                      help="evosax's own ask against jaxfp8.es.EvosaxStrategy"
                      "'s: time at POPxPARAMS, memory (compiled analysis) at "
                      "4096x100000")
  parser.add_argument("--quick", action="store_true",
                      help="a smoke test: 64x1000, one repeat")
  args = parser.parse_args(argv)
  if args.quick:
    args.popsize, args.params, args.repeats = 64, 1000, 1
  if args.size is not None:
    try:
      args.popsize, args.params = (int(v) for v in args.size.lower().split("x"))
      if args.popsize < 2 or args.params < 1:
        raise ValueError
    except ValueError:
      parser.error(f"argument --size: must be POPxPARAMS with POP >= 2 and "
                   f"PARAMS >= 1, e.g. 4096x100000, got {args.size!r}")
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
  if args.evosax:
    try:
      import evosax  # pylint: disable=g-import-not-at-top,unused-import
    except ImportError:
      parser.error("argument --evosax: needs evosax (pip install evosax)")
    return _print_evosax(pop, n, fmt, methods, args.repeats,
                         (pop, n) if args.quick else _EVOSAX_MEMORY_SIZE)
  if args.memory:
    return _print_memory(pop, n, fmt)
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
        f"{os.cpu_count()} cores, {timing.cpu_name()}"
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
    print(f"\ntarget >= {_SPEED_TARGET:g}x over float32-then-cast (exact, not "
          f"antithetic): {exact:.2f}x -> "
          f"{'met' if exact >= _SPEED_TARGET else 'MISSED'}")
  return 0


def _print_memory(pop: int, n: int, fmt: formats.Format) -> int:
  now = datetime.datetime.now(datetime.timezone.utc)
  table, figures = memory_table(pop, n, fmt.name)
  print(f"# ES population memory: {pop} x {n} = {pop * n / 1e6:.1f}M entries, "
        f"{fmt.name} against float32")
  print(f"{now:%Y-%m-%d %H:%M} UTC, jax {jax.__version__}, "
        f"{jax.default_backend()}, {os.cpu_count()} cores, "
        f"{timing.cpu_name()}; default method "
        f"{config.get_default_method()!r}; one fresh process per row")
  print("program: the compiled program's memory_analysis(), argument + output "
        "+ temp; RSS increase: peak RSS minus the RSS after compiling\n")
  print(table)
  ratio = (figures[("perturbations", fmt.name)]["program"]
           / figures[("perturbations", "float32")]["program"])
  print(f"\ntarget <= 0.25x the float32 program (perturbations, antithetic): "
        f"{ratio:.3f}x -> {'met' if ratio <= 0.25 else 'MISSED'}")
  return 0


# -- evosax's ask against the wrapped one --------------------------------------


def _evosax_pair(name: str, pop: int, n: int, fmt_name: str, method: str):
  """An evosax strategy, its wrapper, and ``(key, state, params)`` shapes."""
  from evosax import algorithms  # pylint: disable=g-import-not-at-top
  from jaxfp8._src.es.evosax_strategy import EvosaxStrategy  # pylint: disable=g-import-not-at-top
  strategy = getattr(algorithms, name)(pop, jnp.zeros(n))
  wrapped = EvosaxStrategy(strategy, noise_dtype=fmt_name, method=method)
  params = strategy.default_params
  key = jax.random.key(0)
  state = strategy.init(key, jnp.linspace(-1.0, 1.0, n), params)
  return strategy, wrapped, (key, state, params)


def _program(fn, *args, with_arguments: bool = False) -> int:
  m = jax.jit(fn).lower(*args).compile().memory_analysis()
  extra = m.argument_size_in_bytes - m.alias_size_in_bytes
  return m.output_size_in_bytes + m.temp_size_in_bytes + (
      extra if with_arguments else 0)


def evosax_memory(pop: int, n: int, fmt_name: str, methods) -> list[list[str]]:
  """Rows of the memory table of ``bench es --evosax`` (compiled, not run)."""
  rows = []
  for name in _EVOSAX_STRATEGIES:
    strategy, _, (key, state, params) = _evosax_pair(name, pop, n, fmt_name,
                                                     None)
    state = jax.eval_shape(lambda s: s, state)
    fitness = jax.ShapeDtypeStruct((pop,), jnp.float32)
    population = jax.ShapeDtypeStruct((pop, n), jnp.float32)
    base_ask = _program(strategy.ask, key, state, params)
    base_tell = _program(strategy.tell, key, population, fitness, state,
                         params, with_arguments=True)
    rows.append([name, "evosax (float32)", _mib(base_ask), "",
                 _mib(base_tell), ""])
    for m in methods:
      _, wrapped, _ = _evosax_pair(name, pop, n, fmt_name, m)
      narrow = jax.eval_shape(wrapped.ask, key, state, params)[0]
      ask = _program(wrapped.ask, key, state, params)
      tell = _program(wrapped.tell, key, narrow, fitness, state, params,
                      with_arguments=True)
      rows.append([name, f"EvosaxStrategy {fmt_name} {m}", _mib(ask),
                   f"{ask / base_ask:.3f}x", _mib(tell),
                   f"{tell / base_tell:.3f}x"])
  return rows


def _print_evosax(pop: int, n: int, fmt: formats.Format, methods,
                  repeats: int, memory_size: tuple[int, int]) -> int:
  fns, groups = {}, []
  for name in _EVOSAX_STRATEGIES:
    strategy, _, (key, state, params) = _evosax_pair(name, pop, n, fmt.name,
                                                     None)
    base = f"{name} evosax ask (float32)"
    ask = jax.jit(strategy.ask)
    fns[base] = lambda ask=ask, a=(key, state, params): ask(*a)
    groups.append((base, base, "baseline"))
    for m in methods:
      _, wrapped, _ = _evosax_pair(name, pop, n, fmt.name, m)
      label = f"{name} EvosaxStrategy.ask {m}"
      ask = jax.jit(wrapped.ask)
      fns[label] = lambda ask=ask, a=(key, state, params): ask(*a)
      groups.append((label, base, f"noise in {fmt.name}"))
  med = timing.interleaved_medians(fns, repeats=repeats, warmup=1)
  now = datetime.datetime.now(datetime.timezone.utc)
  print(f"# evosax ask against jaxfp8.es.EvosaxStrategy: {pop} x {n} "
        f"= {pop * n / 1e6:.1f}M samples, noise in {fmt.name}")
  print(f"{now:%Y-%m-%d %H:%M} UTC, jax {jax.__version__}, evosax "
        f"{importlib.metadata.version('evosax')}, {jax.default_backend()}, "
        f"{os.cpu_count()} cores, {timing.cpu_name()}")
  print("speed-up: throughput over evosax's own ask timed in the same run "
        "(round-robin); higher is faster\n")
  print(timing.markdown_table(
      ["ask", "median ms", "M samples/s", "speed-up", "note"],
      _rows(med, groups, pop * n)))
  mp, mn = memory_size
  rows = evosax_memory(mp, mn, fmt.name, methods)
  print(f"\nmemory at {mp} x {mn}: compiled memory_analysis(), not run; ask "
        f"= output + temp (what it hands out and its scratch), tell = "
        f"argument + output + temp\n")
  print(timing.markdown_table(["strategy", "ask of", "ask MiB", "ask ratio",
                               "tell MiB", "tell ratio"], rows))
  worst = max(float(r[3][:-1]) for r in rows if r[3])
  verdict = "met" if worst <= _EVOSAX_MEMORY_TARGET else "MISSED"
  if memory_size != _EVOSAX_MEMORY_SIZE:
    # Below 2^22 entries a half is one draw, whose scratch is its own size.
    verdict += (f" (the target is for {_EVOSAX_MEMORY_SIZE[0]} x "
                f"{_EVOSAX_MEMORY_SIZE[1]:,})")
  print(f"\ntarget <= {_EVOSAX_MEMORY_TARGET:g}x evosax's ask (output + temp): "
        f"worst {worst:.3f}x -> {verdict}")
  return 0
