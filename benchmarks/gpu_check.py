"""GPU check of jaxfp8.ops: correctness, then TFLOP/s against XLA's fp8 paths.

Run once on an H100/H200 through ``benchmarks/gpu_check.sh`` (one call of at
most 6 minutes, after the compiled kernel tests). It prints:

1. Correctness of the compiled kernels against float64 products of the
   dequantized operands (odd shapes, e4m3/e5m2, mixed formats, tiny and huge
   E8M0 scales, the exact MX path, bf16 and float32 outputs), with the fp8
   MMA (default) and with ``precision=HIGHEST`` (tiles widened to bf16):
   Hopper's fp8 MMA sums each 32-long block with fewer bits than float32,
   which the 1e-5 bound may catch. Each checked call runs on poisoned
   memory: a NaN-filled buffer of the output's size is allocated and freed
   just before, so a tile the kernel never writes shows up as NaN.
2. Timings at 4096^3 and 8192^3 of
   - ``scaled_matmul`` against ``jnp.dot(a, b.T, preferred_element_type=f32)``
     on the same fp8 inputs (XLA's cuBLASLt fp8 GEMM), target >= 0.8x;
   - ``mx_matmul`` against ``jax.nn.scaled_matmul`` on the same MXFP8
     operands, target >= 1.2x;
   as TFLOP/s (2 M N K / time) and same-run ratios. The MX training step
   against bf16 is listed as not built yet (jaxfp8 has no MX training op).
3. With ``--sweep``, a small tile sweep at the largest size.
4. A short table last (for docs/performance.md, with date, device and
   versions); the full results go to ``$OUT/gpu_check.json`` (or
   ``./gpu_check_out`` where ``OUT`` is unset).

Timing: every round draws fresh random inputs (shared by all contenders of
the round), waits for them, then calls each function ``reps`` times back to
back (asynchronous dispatch keeps the GPU busy) and blocks on the last result
(``block_until_ready``); the median over rounds, interleaved between
contenders so clock drift hits all alike.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
import traceback

import jax
import jax.numpy as jnp
import numpy as np

import jaxfp8
from jaxfp8 import ops
from jaxfp8._src.kernels import mx_matmul as mx_matmul_lib

F32, BF16 = jnp.float32, jnp.bfloat16
START = time.monotonic()
RESULTS: dict = {"checks": [], "timings": [], "sweep": []}
# --cpu-smoke runs every code path here in Pallas' interpreter, tiny shapes.
INTERPRET = False
# Odd shapes over several padded tiles, and a long K with few rows.
SHAPES = ((1000, 520, 700), (8, 24, 4096))


def log(*args):
  print(f"[{time.monotonic() - START:6.1f}s]", *args, flush=True)


def elapsed() -> float:
  return time.monotonic() - START


def out_dir() -> str:
  """The device tool's $OUT, else ./gpu_check_out (created)."""
  path = os.environ.get("OUT") or "gpu_check_out"
  os.makedirs(path, exist_ok=True)
  return path


def poisoned(fn, shape, dtype=F32):
  """``fn()`` right after freeing a NaN buffer of the output's size.

  XLA's allocator hands freed blocks back first, so an output tile the
  kernel leaves unwritten holds NaN (which fails every check) rather than
  zeros or an earlier correct result.
  """
  poison = jnp.full(shape, jnp.nan, dtype)
  poison.block_until_ready()
  poison.delete()
  return jax.block_until_ready(fn())


# -- data ---------------------------------------------------------------------

def fp8_operand(key, shape, dtype, spread=2):
  k1, k2 = jax.random.split(key)
  x = jax.random.normal(k1, shape, F32)
  x = x * jnp.exp2(jax.random.randint(k2, (shape[0], 1), -spread, spread + 1)
                   .astype(F32))
  return jnp.clip(x, -400, 400).astype(dtype)


def mx_operand(key, shape, fmt, spread=20):
  k1, k2 = jax.random.split(key)
  x = jax.random.normal(k1, shape, F32)
  x = x * jnp.exp2(jax.random.randint(k2, (shape[0], 1), -spread, spread + 1)
                   .astype(F32))
  return jaxfp8.mx.quantize(x, fmt, pad=True)


def mx_f64(x) -> np.ndarray:
  d = np.asarray(x.data.astype(F32), np.float64)
  c = np.asarray(x.scales).astype(np.int64)
  s = np.where(c == 255, np.nan, np.exp2(c - 127.0))
  v = d.reshape(d.shape[0], -1, x.block_size) * s[..., None]
  return v.reshape(d.shape)[:, :x.shape[1]]


# -- correctness ----------------------------------------------------------------

def compare(name, out, av, bv, out_dtype, rows=None, record=True):
  """Checks out (M, N) against av @ bv.T in float64 (on ``rows`` only)."""
  out = np.asarray(jnp.asarray(out).astype(F32), np.float64)
  if rows is not None:
    out, av = out[rows], av[rows]
  ref = av @ bv.T
  bound = np.abs(av) @ np.abs(bv).T
  rounding = 2.0**-8 if np.dtype(out_dtype) == np.dtype(BF16) else 0.0
  err = np.abs(out - ref)
  ok_elem = bool(np.all(err <= 1e-5 * bound + rounding * np.abs(ref)
                        + 2.0**-126))
  norm = float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300))
  ok = ok_elem and (rounding > 0 or norm < 1e-5)
  if record:
    RESULTS["checks"].append({"name": name, "ok": ok, "rel_err": norm})
  log(f"{('PASS' if ok else 'FAIL') if record else 'INFO'} {name}: norm-wise rel err {norm:.2e}, "
      f"elementwise bound {'held' if ok_elem else 'VIOLATED'}")
  return ok


def guarded(name, fn):
  try:
    return fn()
  except Exception:  # pylint: disable=broad-except
    RESULTS["checks"].append({"name": name, "ok": False, "error": True})
    log(f"FAIL {name}: exception")
    traceback.print_exc()
    return None


def correctness(key):
  ks = iter(jax.random.split(key, 64))
  f64 = lambda x: np.asarray(x.astype(F32), np.float64)
  for dt in (jnp.float8_e4m3fn, jnp.float8_e5m2):
    for (m, n, k) in SHAPES:
      for out_dtype in (F32, BF16):
        a, b = fp8_operand(next(ks), (m, k), dt), fp8_operand(
            next(ks), (n, k), dt)
        name = f"scaled_matmul {np.dtype(dt).name} {m}x{n}x{k} -> " \
               f"{np.dtype(out_dtype).name}"
        guarded(name, lambda: compare(
            name, poisoned(lambda: ops.scaled_matmul(
                a, b, 0.75, 2.0**-3, out_dtype=out_dtype,
                interpret=INTERPRET), (m, n), out_dtype),
            f64(a) * 0.75, f64(b) * 2.0**-3, out_dtype))
      name = f"scaled_matmul {np.dtype(dt).name} {m}x{n}x{k} -> float32, " \
             "precision=HIGHEST (bf16 MMA)"
      guarded(name, lambda: compare(
          name, poisoned(lambda: ops.scaled_matmul(
              a, b, 0.75, 2.0**-3, out_dtype=F32, interpret=INTERPRET,
              precision="highest"), (m, n)),
          f64(a) * 0.75, f64(b) * 2.0**-3, F32))
  # Scales whose product leaves float32's range while the result does not:
  # applied in the order that keeps it finite (in-kernel selects).
  for sa, sb, mag, dt in ((2.0**127, 2.0**2, 2.0**-12, jnp.float8_e5m2),
                          (2.0**-100, 2.0**-30, 2.0**6, jnp.float8_e4m3fn)):
    a = (jax.random.normal(next(ks), (64, 256)) * mag).astype(dt)
    b = (jax.random.normal(next(ks), (48, 256)) * mag).astype(dt)
    name = f"scaled_matmul scales 2^{int(np.log2(sa))} x 2^{int(np.log2(sb))}"
    guarded(name, lambda: compare(
        name, poisoned(lambda: ops.scaled_matmul(
            a, b, sa, sb, out_dtype=F32, interpret=INTERPRET), (64, 48)),
        f64(a) * sa, f64(b) * sb, F32))
  a = fp8_operand(next(ks), (300, 256), jnp.float8_e4m3fn)
  b = fp8_operand(next(ks), (200, 256), jnp.float8_e5m2)
  guarded("scaled_matmul mixed e4m3 x e5m2", lambda: compare(
      "scaled_matmul mixed e4m3 x e5m2",
      poisoned(lambda: ops.scaled_matmul(a, b, 1.0, 1.0, out_dtype=F32,
                                         interpret=INTERPRET), (300, 200)),
      f64(a), f64(b), F32))

  for fmt in ops.MXFP8_FORMATS:
    for (m, n, k) in SHAPES:
      for out_dtype in (F32, BF16):
        a, b = mx_operand(next(ks), (m, k), fmt), mx_operand(
            next(ks), (n, k), fmt, spread=4)
        name = f"mx_matmul {fmt} {m}x{n}x{k} -> {np.dtype(out_dtype).name}"
        guarded(name, lambda: compare(
            name, poisoned(lambda: ops.mx_matmul(
                a, b, out_dtype=out_dtype, interpret=INTERPRET), (m, n),
                out_dtype),
            mx_f64(a), mx_f64(b), out_dtype))
      name = f"mx_matmul {fmt} {m}x{n}x{k} -> float32, precision=HIGHEST"
      guarded(name, lambda: compare(
          name, poisoned(lambda: ops.mx_matmul(
              a, b, out_dtype=F32, interpret=INTERPRET, precision="highest"),
              (m, n)),
          mx_f64(a), mx_f64(b), F32))
  # Tiny (2^-127..) against huge (..2^127) scales, both paths; exact path.
  rng = np.random.default_rng(0)
  for fmt in ops.MXFP8_FORMATS:
    dt = jaxfp8.mx.get_format(fmt).dtype
    mk = lambda rows, lo, hi, fmt=fmt, dt=dt: jaxfp8.mx.MXArray(
        fp8_operand(next(ks), (rows, 256), dt, 0),
        jnp.asarray(rng.integers(lo, hi, (rows, 8)), jnp.uint8), fmt,
        axis=-1, length=256, block_size=32)
    a, b = mk(64, 0, 5), mk(48, 250, 255)
    for path in ("fast", "exact"):
      name = f"mx_matmul {fmt} tiny x huge scales, {path} path"
      guarded(name, lambda: compare(name, poisoned(
          lambda: mx_matmul_lib._mx_matmul_impl(  # pylint: disable=protected-access
              a, b, out_dtype=F32, interpret=INTERPRET, block_m=None,
              block_n=None, block_k=None, num_warps=None, num_stages=None,
              path=path), (64, 48)),
                                    mx_f64(a), mx_f64(b), F32))
  a = mx_operand(next(ks), (256, 512), "mxfp8_e4m3")
  b = mx_operand(next(ks), (128, 512), "mxfp8_e5m2")
  guarded("mx_matmul mixed e4m3 x e5m2", lambda: compare(
      "mx_matmul mixed e4m3 x e5m2",
      poisoned(lambda: ops.mx_matmul(a, b, out_dtype=F32,
                                     interpret=INTERPRET), (256, 128)),
      mx_f64(a), mx_f64(b), F32))


# -- timing ------------------------------------------------------------------

def _round(fn, args, reps):
  jax.block_until_ready(args)  # inputs made before the clock starts
  t0 = time.perf_counter()
  for _ in range(reps):
    out = fn(*args)
  jax.block_until_ready(out)
  return (time.perf_counter() - t0) / reps


def time_all(fns: dict, make_args, *, rounds=5, reps=10) -> dict:
  """Median seconds per call of each fn(*make_args(r)[name]).

  ``make_args(r)`` draws round ``r``'s inputs (fresh ones every round, the
  same for every contender of the round); rounds interleave the contenders.
  """
  live, first = {}, make_args(0)
  for name, fn in fns.items():
    try:
      jax.block_until_ready(fn(*first[name]))  # compile
      _round(fn, first[name], 2)
      live[name] = fn
    except Exception:  # pylint: disable=broad-except
      log(f"{name}: failed to run")
      traceback.print_exc(limit=2)
  del first
  times = {k: [] for k in live}
  for r in range(1, rounds + 1):
    args = make_args(r)
    for name, fn in live.items():
      times[name].append(_round(fn, args[name], reps))
    del args
  return {k: statistics.median(v) for k, v in times.items()}


def tflops(m, n, k, seconds):
  return 2.0 * m * n * k / seconds / 1e12


def _fp8_contenders():
  return {
      "xla_fp8_dot": jax.jit(lambda a, b: jnp.dot(
          a, b.T, preferred_element_type=F32)),
      "xla_fp8_dot_scaled": jax.jit(lambda a, b, sa, sb: jnp.dot(
          a, b.T, preferred_element_type=F32) * (sa * sb)),
      "scaled_matmul_f32": jax.jit(lambda a, b, sa, sb: ops.scaled_matmul(
          a, b, sa, sb, out_dtype=F32, interpret=INTERPRET)),
      "scaled_matmul_bf16": jax.jit(lambda a, b, sa, sb: ops.scaled_matmul(
          a, b, sa, sb, out_dtype=BF16, interpret=INTERPRET)),
      "scaled_matmul_f32_highest": jax.jit(
          lambda a, b, sa, sb: ops.scaled_matmul(
              a, b, sa, sb, out_dtype=F32, interpret=INTERPRET,
              precision="highest")),
  }


def _mx_contenders():
  return {
      "jax_nn_scaled_matmul": jax.jit(lambda ea, eb, sa, sb: (
          jax.nn.scaled_matmul(ea, eb, sa, sb,
                               preferred_element_type=F32)[0])),
      "mx_matmul_f32": jax.jit(lambda a, b: ops.mx_matmul(
          a, b, out_dtype=F32, interpret=INTERPRET)),
      "mx_matmul_bf16": jax.jit(lambda a, b: ops.mx_matmul(
          a, b, out_dtype=BF16, interpret=INTERPRET)),
      "mx_matmul_f32_highest": jax.jit(lambda a, b: ops.mx_matmul(
          a, b, out_dtype=F32, interpret=INTERPRET, precision="highest")),
      "mx_matmul_f32_fast_only": jax.jit(
          lambda a, b: mx_matmul_lib._mx_matmul_impl(  # pylint: disable=protected-access
              a, b, out_dtype=F32, interpret=INTERPRET, block_m=None,
              block_n=None, block_k=None, num_warps=None, num_stages=None,
              path="fast")),
  }


def timings(key, sizes, formats, deadline_s):
  """Both kernels against their baselines; formats after the first (e4m3)
  are skipped once ``deadline_s`` has passed, so the e4m3 figures at every
  size always come back."""
  rows = []
  sa, sb = jnp.float32(0.5), jnp.float32(0.25)
  for size in sizes:
    m = n = k = size
    for i, dt in enumerate(formats):
      if i and elapsed() > deadline_s:
        log(f"time budget: skipping {size}^3 {np.dtype(dt).name}")
        continue
      kd = jax.random.fold_in(key, size * 10 + i)

      def fp8_args(r, kd=kd, dt=dt, m=m, n=n, k=k):
        ka, kb = jax.random.split(jax.random.fold_in(kd, r))
        a, b = fp8_operand(ka, (m, k), dt), fp8_operand(kb, (n, k), dt)
        return {name: (a, b) if name == "xla_fp8_dot" else (a, b, sa, sb)
                for name in _fp8_contenders()}

      fns = _fp8_contenders()
      t = time_all(fns, fp8_args)
      base = t.get("xla_fp8_dot")
      for name, sec in t.items():
        rows.append((size, np.dtype(dt).name, name, tflops(m, n, k, sec),
                     base / sec if base else float("nan"), "xla_fp8_dot"))
        log(f"{size}^3 {np.dtype(dt).name} {name}: "
            f"{tflops(m, n, k, sec):7.1f} TFLOP/s, x{rows[-1][4]:.3f} of "
            "xla_fp8_dot")
      if size == sizes[0]:
        args = fp8_args(99)
        guarded(f"scaled_matmul {np.dtype(dt).name} {size}^3 on sampled rows",
                lambda: _agree_fp8(fns, args, size, dt))
        del args
    for i, fmt in enumerate(ops.MXFP8_FORMATS):
      if i and elapsed() > deadline_s:
        log(f"time budget: skipping {size}^3 {fmt}")
        continue
      kd = jax.random.fold_in(key, size * 10 + 5 + i)

      def mx_args(r, kd=kd, fmt=fmt, m=m, n=n, k=k):
        ka, kb = jax.random.split(jax.random.fold_in(kd, r))
        am, bm = mx_operand(ka, (m, k), fmt, 4), mx_operand(kb, (n, k), fmt, 4)
        (ea, sa_), (eb, sb_) = jaxfp8.mx.to_scaled(am), jaxfp8.mx.to_scaled(bm)
        scaled = (ea[None], eb[None], sa_[None], sb_[None])
        return {name: scaled if name.startswith("jax") else (am, bm)
                for name in _mx_contenders()}

      fns = _mx_contenders()
      t = time_all(fns, mx_args)
      base = t.get("jax_nn_scaled_matmul")
      for name, sec in t.items():
        rows.append((size, fmt, name, tflops(m, n, k, sec),
                     base / sec if base else float("nan"),
                     "jax_nn_scaled_matmul"))
        log(f"{size}^3 {fmt} {name}: {tflops(m, n, k, sec):7.1f} TFLOP/s, "
            f"x{rows[-1][4]:.3f} of jax.nn.scaled_matmul")
      if size == sizes[0]:
        args = mx_args(99)
        guarded(f"mx_matmul {fmt} {size}^3 on sampled rows",
                lambda: _agree(fns, args, size, fmt))
        del args
  RESULTS["timings"] = rows
  return rows


def _agree_fp8(fns, args, size, dt):
  """Our kernel and XLA's fp8 dot on sampled rows against float64.

  XLA's fp8 GEMM may use the tensor cores' fast (reduced-precision)
  accumulation; its error is printed for context, not checked.
  """
  rows = np.random.default_rng(2).choice(size, 16, replace=False)
  a, b = args["xla_fp8_dot"]
  av = np.asarray(a.astype(F32), np.float64)
  bv = np.asarray(b.astype(F32), np.float64)
  name = np.dtype(dt).name
  ok = compare(f"scaled_matmul {name} {size}^3 (16 rows)",
               poisoned(lambda: fns["scaled_matmul_f32"](
                   *args["scaled_matmul_f32"]), (size, size)),
               av * 0.5, bv * 0.25, F32, rows)
  compare(f"xla fp8 dot {name} {size}^3 (16 rows)",
          fns["xla_fp8_dot"](*args["xla_fp8_dot"]), av, bv, F32, rows,
          record=False)
  return ok


def _agree(fns, args, size, fmt):
  """Both MX products on sampled rows against float64."""
  rows = np.random.default_rng(1).choice(size, 16, replace=False)
  am, bm = args["mx_matmul_f32"]
  av, bv = mx_f64(am), mx_f64(bm)
  ok = compare(f"mx_matmul {fmt} {size}^3 (16 rows)",
               poisoned(lambda: fns["mx_matmul_f32"](*args["mx_matmul_f32"]),
                        (size, size)), av, bv, F32, rows)
  try:
    compare(f"jax.nn.scaled_matmul {fmt} {size}^3 (16 rows)",
            fns["jax_nn_scaled_matmul"](*args["jax_nn_scaled_matmul"]), av, bv,
            F32, rows, record=False)
  except Exception as e:  # pylint: disable=broad-except
    log(f"INFO jax.nn.scaled_matmul did not run: {type(e).__name__}")
  return ok


def sweep(key, size, budget_s):
  """A few tile configurations of both kernels at size^3 (e4m3; one set of
  inputs for all rounds)."""
  ka, kb = jax.random.split(key)
  m = n = k = size
  a = fp8_operand(ka, (m, k), jnp.float8_e4m3fn)
  b = fp8_operand(kb, (n, k), jnp.float8_e4m3fn)
  am = mx_operand(ka, (m, k), "mxfp8_e4m3", 4)
  bm = mx_operand(kb, (n, k), "mxfp8_e4m3", 4)
  configs = {
      "scaled_matmul": [(128, 256, 128, 8, 3), (128, 128, 128, 8, 4),
                        (128, 256, 64, 8, 4), (256, 128, 128, 8, 3),
                        (128, 128, 64, 4, 4)],
      "mx_matmul": [(128, 128, 128, 8, 3), (128, 128, 64, 4, 4),
                    (128, 256, 128, 8, 3), (64, 128, 128, 4, 4),
                    (128, 128, 256, 8, 2)],
  }
  rows = []
  for op, cfgs in configs.items():
    for cfg in cfgs:
      if elapsed() > budget_s:
        log(f"sweep: time budget reached, skipping {op} {cfg}")
        continue
      bm_, bn_, bk_, w, s = cfg
      tiles = dict(block_m=bm_, block_n=bn_, block_k=bk_, num_warps=w,
                   num_stages=s)
      if op == "scaled_matmul":
        fn = jax.jit(lambda a, b, tiles=tiles: ops.scaled_matmul(
            a, b, 1.0, 1.0, out_dtype=BF16, interpret=INTERPRET, **tiles))
        args = (a, b)
      else:
        fn = jax.jit(lambda a, b, tiles=tiles: ops.mx_matmul(
            a, b, out_dtype=BF16, interpret=INTERPRET, **tiles))
        args = (am, bm)
      t = time_all({op: fn}, lambda r, op=op, args=args: {op: args},
                   rounds=3, reps=5)
      if op in t:
        rows.append((op, cfg, tflops(m, n, k, t[op])))
        log(f"sweep {size}^3 {op} tiles={cfg}: {rows[-1][2]:.1f} TFLOP/s")
  RESULTS["sweep"] = rows
  return rows


def print_summary(header, rows) -> list[str]:
  """The short table, printed last; returns the failed checks' names."""
  failed = [c["name"] for c in RESULTS["checks"] if not c["ok"]]
  if RESULTS["sweep"]:
    print("\n| kernel | (block_m, block_n, block_k, warps, stages) | "
          "TFLOP/s |")
    print("|---|---|---|")
    for op, cfg, tf in RESULTS["sweep"]:
      print(f"| `{op}` | {cfg} | {tf:.1f} |")
  print(f"\n## GPU figures\n\n{header['date']}, {header['device']} (compute "
        f"capability {header['compute_capability']}), JAX {header['jax']}, "
        f"Python {header['python']}. TFLOP/s = 2MNK / median time; ratio "
        "against the baseline in the same run.\n")
  print("| M=N=K | operands | function | TFLOP/s | ratio | baseline |")
  print("|---|---|---|---|---|---|")
  for size, fmt, name, tf, ratio, base in rows:
    print(f"| {size} | {fmt} | `{name}` | {tf:.1f} | {ratio:.2f}x | "
          f"`{base}` |")
  print(f"\ncorrectness: {len(RESULTS['checks']) - len(failed)} passed, "
        f"{len(failed)} failed" + (f": {failed}" if failed else ""))
  # The short table: each kernel (bf16 output) against its baseline.
  tf = {(size, fmt, name): t for size, fmt, name, t, _, _ in rows}
  print("\n| M=N=K | operands | kernel | TFLOP/s | baseline | TFLOP/s | "
        "ratio | target |")
  print("|---|---|---|---|---|---|---|---|")
  for size, fmt, name, t, ratio, base in rows:
    if name in ("scaled_matmul_bf16", "mx_matmul_bf16"):
      target = ">= 0.8x" if base == "xla_fp8_dot" else ">= 1.2x"
      print(f"| {size} | {fmt} | `{name}` | {t:.1f} | `{base}` | "
            f"{tf.get((size, fmt, base), float('nan')):.1f} | {ratio:.2f}x | "
            f"{target} |")
  # jaxfp8.mx has no training op (an MX dot_general with its backward) yet.
  print("| - | mxfp8 | MX training step | not built yet | bf16 step | - | - "
        "| - |")
  return failed


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--sizes", default="4096,8192")
  p.add_argument("--skip-correctness", action="store_true")
  p.add_argument("--sweep", action="store_true",
                 help="also time a few tile configurations (largest size)")
  p.add_argument("--budget", type=float, default=230.0,
                 help="seconds after which the e5m2 / second MX format "
                 "timings and the sweep are skipped")
  p.add_argument("--cpu-smoke", action="store_true",
                 help="tiny shapes in interpret mode (tests this script)")
  args = p.parse_args(argv)
  if args.cpu_smoke:
    global INTERPRET, SHAPES
    INTERPRET, SHAPES = True, ((40, 24, 70),)
    args.sizes, args.sweep = "64", False
  dev = jax.devices()[0]
  header = {
      "date": datetime.datetime.now(datetime.timezone.utc).strftime(
          "%Y-%m-%d %H:%M UTC"),
      "device": getattr(dev, "device_kind", str(dev)),
      "compute_capability": getattr(dev, "compute_capability", None),
      "jax": jax.__version__, "python": sys.version.split()[0],
      "backend": jax.default_backend(),
  }
  RESULTS["header"] = header
  log("header", json.dumps(header))
  if jax.default_backend() != "gpu" and not args.cpu_smoke:
    log("no GPU backend: nothing to check")
    return 2
  key = jax.random.key(0)
  if not args.skip_correctness:
    correctness(jax.random.fold_in(key, 1))
  sizes = [int(s) for s in args.sizes.split(",")]
  rows = timings(jax.random.fold_in(key, 2), sizes,
                 (jnp.float8_e4m3fn, jnp.float8_e5m2), args.budget)
  if args.sweep:
    sweep(jax.random.fold_in(key, 3), sizes[-1], args.budget)
  path = os.path.join(out_dir(), "gpu_check.json")
  with open(path, "w") as f:
    json.dump(RESULTS, f, indent=1, default=str)
  log(f"done; results in {path}")
  failed = print_summary(header, rows)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
