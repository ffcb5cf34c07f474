"""GPU check of jaxfp8.ops and the recipes: correctness, TFLOP/s, training steps.

Run once on an H100/H200 through ``benchmarks/gpu_check.sh`` (one call of at
most 6 minutes, after the compiled kernel tests). The work runs in order of
priority; what would start past ``--budget`` seconds (an estimate of each
item's cost is added first) is skipped, and the skipped items are listed:

1. Correctness of the Mosaic GPU kernels (``scaled_matmul_mgpu``,
   ``mx_matmul_mgpu``, ``blockwise_matmul``) against float64 products of the
   dequantized operands, on fresh random inputs: odd shapes over several
   padded tiles, a long K, e4m3/e5m2 and mixed, bfloat16 and float32
   outputs, spread and extreme scales, every block layout of the blockwise
   GEMM. Each checked call runs on poisoned memory: a NaN-filled buffer of
   the output's size is allocated and freed just before, so a tile the
   kernel never writes shows up as NaN. Two bounds:

   - *exact* checks multiply operands of -1, 0 and 1 (with power-of-two
     scales), so every partial sum the tensor cores form is an integer of
     at most 13 bits, which Hopper's fp8 MMA holds exactly: the per-tensor
     kernel must be exact, the block-scaled ones within float32 summation
     (``1e-5 * (|a| @ |b|.T)``) of the scaled block sums.
   - *random* checks allow for the fp8 MMA's accumulator, which keeps 13
     mantissa bits (truncating): each 32-long MMA step may lose ``2^-13``
     of the running sum, so the bound is ``(1e-5 + steps * 2^-12) *
     (|a| @ |b|.T)`` with steps = K / 32 for the per-tensor kernel (one
     accumulator over all of K) and block / 32 for the block-scaled ones (a
     fresh partial sum per scale block, scaled in float32 registers).
     bfloat16 outputs add their rounding.

2. TFLOP/s (2 M N K / median time) at 4096^3 and 8192^3, every contender of
   a size timed in one interleaved run on codes of the same float32
   matrices: ``scaled_matmul_mgpu`` against XLA's fp8 GEMM
   (``jnp.dot(a, b.T, preferred_element_type=f32)`` on the same fp8 arrays),
   target >= 0.8x; ``mx_matmul_mgpu`` against ``jax.nn.scaled_matmul`` on
   the same MXFP8 elements and scales and against bf16 ``jnp.dot``, target
   >= 1.3x bf16 at 8192^3; ``blockwise_matmul`` (1x128 activations, 128x128
   weights) against bf16 ``jnp.dot``, target >= 1.3x at 8192^3. At the first
   size the timed kernels' outputs are checked on sampled rows (poisoned).
3. One training step of ``examples/transformer_lm.py``'s model (``ByteLM``,
   ``rules``, ``cross_entropy``, AdamW with clipping, as its ``train`` builds
   it), sized for a GPU by ``--train-shape``, per recipe (bf16,
   fp8_blockwise, fp8_current, mxfp8, nvfp4): whatever the recipes'
   automatic backend runs. Target: the fp8_blockwise step faster than bf16's.
4. The Triton kernels (``scaled_matmul``, ``mx_matmul``; the old backend):
   their correctness checks (with ``precision="highest"``), then their
   timings against the same baselines.
5. With ``--sweep``, tile configurations of the Mosaic kernels at the
   largest size.

It prints the full tables, then the short table last (targets and ratios,
device, versions, date, what was skipped); everything goes to
``$OUT/gpu_check.json`` (``./gpu_check_out`` where ``OUT`` is unset). On
SIGTERM (the shell script's ``timeout``) it stops and still prints and
writes what it has.

Timing: every round draws fresh random inputs (shared by all contenders of
the round), waits for them, then calls each function ``reps`` times back to
back (asynchronous dispatch keeps the GPU busy) and blocks on the last result
(``block_until_ready``); the median over rounds, interleaved between
contenders so clock drift hits all alike.

``--cpu-smoke`` runs every code path on CPU at tiny sizes: the Triton
kernels in Pallas' interpreter, the Mosaic kernels in Pallas' Mosaic GPU
interpreter (JAX >= 0.11; on older JAX they are listed as skipped), the
training steps on the recipes' jnp paths.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import pathlib
import signal
import statistics
import sys
import time
import traceback

import jax
from jax import lax
import jaxlib
import jax.numpy as jnp
import numpy as np

import jaxfp8
from jaxfp8 import ops
from jaxfp8._src.kernels.mx_matmul import triton as mx_matmul_lib
from jaxfp8._src.kernels import mosaic_gpu_common as mgpu_common
from jaxfp8._src.mx import blockwise

F32, BF16 = jnp.float32, jnp.bfloat16
E4M3, E5M2 = jnp.float8_e4m3fn, jnp.float8_e5m2
ROOT = pathlib.Path(__file__).resolve().parents[1]
START = time.monotonic()
RESULTS: dict = {"checks": [], "timings": [], "train": [], "sweep": [],
                 "skipped": [], "stages": []}
# Set by main: Triton kernels interpreted (--cpu-smoke); Mosaic kernels
# interpreted (--cpu-smoke) or compiled, or why they can't run here.
TRITON_INTERPRET = False
MGPU_INTERPRET = False
MOSAIC_SKIP: str | None = None
BUDGET = math.inf
TIMING = {"rounds": 5, "reps": 10}
TRAIN_TIMING = {"rounds": 3, "reps": 5}
# Odd shapes over several padded tiles, and a long K with few rows.
SHAPES = ((1000, 520, 700), (8, 24, 4096))
# Guessed seconds per item on an H200 (compiling dominates), used to skip
# an item that would end past the budget; each stage's real time is logged.
EST = {"timing": {4096: 30.0, 8192: 45.0}, "train_recipe": 30.0,
       "triton_correctness": 60.0, "triton_timing": 30.0, "sweep_config": 6.0}
F32_TOL = 1e-5
TRAIN_RECIPES = ("bf16", "fp8_blockwise", "fp8_current", "mxfp8", "nvfp4")
NT = (((1,), (1,)), ((), ()))  # a (M, K) times b (N, K): contract both Ks


class Interrupted(BaseException):
  """SIGTERM: stop, then print and write what there is."""


def log(*args):
  print(f"[{time.monotonic() - START:6.1f}s]", *args, flush=True)


def elapsed() -> float:
  return time.monotonic() - START


def skip(what: str, why: str) -> None:
  RESULTS["skipped"].append(f"{what} ({why})")
  log(f"SKIP {what}: {why}")


def fits(what: str, est: float) -> bool:
  """Whether ``what`` (about ``est`` seconds) ends within the budget."""
  if elapsed() + est <= BUDGET:
    return True
  skip(what, f"time budget: {elapsed():.0f} s used of {BUDGET:.0f}, "
       f"needs about {est:.0f}")
  return False


def stage(name: str, fn, *args):
  """Runs one stage, logging and recording its duration."""
  t0 = elapsed()
  log(f"== {name}")
  try:
    return fn(*args)
  finally:
    RESULTS["stages"].append({"stage": name, "seconds": elapsed() - t0})
    log(f"== {name}: {elapsed() - t0:.1f} s")


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

def normal_rows(key, shape, spread):
  """Normal values, each row scaled by 2^[-spread, spread]."""
  k1, k2 = jax.random.split(key)
  e = jax.random.randint(k2, (shape[0], 1), -spread, spread + 1)
  return jax.random.normal(k1, shape, F32) * jnp.exp2(e.astype(F32))


def fp8_operand(key, shape, dtype, spread=2):
  return jnp.clip(normal_rows(key, shape, spread), -400, 400).astype(dtype)


def ternary(key, shape, dtype):
  return jax.random.randint(key, shape, -1, 2).astype(dtype)


def mx_operand(key, shape, fmt, spread=20):
  return jaxfp8.mx.quantize(normal_rows(key, shape, spread), fmt, axis=-1,
                            pad=True)


def mx_ternary(key, rows, k, fmt, lo=120, hi=135):
  """An MXArray of -1/0/1 elements (zero padding) with codes in [lo, hi)."""
  k1, k2 = jax.random.split(key)
  kp = -(-k // 32) * 32
  data = jnp.where(jnp.arange(kp) < k, ternary(k1, (rows, kp), F32), 0)
  codes = jax.random.randint(k2, (rows, kp // 32), lo, hi).astype(jnp.uint8)
  return jaxfp8.mx.MXArray(data.astype(jaxfp8.mx.get_format(fmt).dtype),
                           codes, fmt, axis=-1, length=k, block_size=32)


def mx_f64(x) -> np.ndarray:
  d = np.asarray(x.data.astype(F32), np.float64)
  c = np.asarray(x.scales).astype(np.int64)
  s = np.where(c == 255, np.nan, np.exp2(c - 127.0))
  v = d.reshape(d.shape[0], -1, x.block_size) * s[..., None]
  return v.reshape(d.shape)[:, :x.shape[1]]


def bw_operand(key, shape, block, fmt="e4m3", spread=6):
  """(codes, decode scales) of the recipe's blockwise quantize."""
  return blockwise.quantize(normal_rows(key, shape, spread), block=block,
                            fmt=fmt, scale="pow2")


def bw_scales(key, shape, block, lo, hi):
  """Power-of-two decode scales 2^[lo, hi) for ``shape``'s block grid."""
  grid = (-(-shape[0] // block[0]), -(-shape[1] // 128))
  return jnp.exp2(jax.random.randint(key, grid, lo, hi).astype(F32))


def bw_f64(codes, scales, block) -> np.ndarray:
  c = np.asarray(codes.astype(F32), np.float64)
  s = np.asarray(scales, np.float64)
  s = np.repeat(np.repeat(s, block[0], 0)[:c.shape[0]], 128, 1)
  return c * s[:, :c.shape[1]]


def f64(x) -> np.ndarray:
  return np.asarray(jnp.asarray(x).astype(F32), np.float64)


# -- correctness --------------------------------------------------------------

def mma_tol(chain: int) -> float:
  """Relative bound of a sum whose fp8 MMA chain is ``chain`` long (K for
  one accumulator over all of K, the scale block for block-scaled kernels):
  13 accumulator bits per 32-long step, with a factor 2 to spare."""
  return F32_TOL + -(-chain // 32) * 2.0**-12


def compare(name, out, av, bv, out_dtype, rows=None, record=True,
            tol=F32_TOL):
  """Checks out (M, N) against av @ bv.T in float64 (on ``rows`` only).

  Elementwise: ``|out - ref| <= tol * (|av| @ |bv|.T)`` (+ the output's
  rounding, + 2^-126); for float32 outputs under the float32 bound also a
  norm-wise relative error below 1e-5. ``tol=0``: exact.
  """
  out = f64(out)
  if rows is not None:
    out, av = out[rows], av[rows]
  ref = av @ bv.T
  bound = np.abs(av) @ np.abs(bv).T
  rounding = {"bfloat16": 2.0**-8, "float16": 2.0**-11}.get(
      np.dtype(out_dtype).name, 0.0)
  err = np.abs(out - ref)
  ok_elem = bool(np.all(err <= tol * bound + rounding * np.abs(ref)
                        + 2.0**-126))
  with np.errstate(invalid="ignore", divide="ignore"):
    worst = float(np.nanmax(np.where(bound > 0, err / bound, err))) if (
        err.size and np.isfinite(err).all()) else math.nan
  norm = float(np.linalg.norm(out - ref) / max(np.linalg.norm(ref), 1e-300))
  ok = ok_elem and (rounding > 0 or tol != F32_TOL or norm < F32_TOL)
  if record:
    RESULTS["checks"].append({"name": name, "ok": ok, "rel_err": norm,
                              "err_over_bound": worst, "tol": tol})
  log(f"{('PASS' if ok else 'FAIL') if record else 'INFO'} {name}: "
      f"norm-wise rel err {norm:.2e}, max err/(|a||b|) {worst:.2e} "
      f"(tol {tol:.1e}{' + output rounding' if rounding else ''}), "
      f"elementwise bound {'held' if ok_elem else 'VIOLATED'}")
  return ok


def fail(name: str, why: str = "exception") -> None:
  RESULTS["checks"].append({"name": name, "ok": False, "error": True})
  log(f"FAIL {name}: {why}")


def guarded(name, fn):
  try:
    return fn()
  except Exception:  # pylint: disable=broad-except
    fail(name)
    traceback.print_exc()
    return None


def check(name, run, av, bv, out_shape, out_dtype, tol):
  """``run()`` on poisoned memory against av @ bv.T (all under guard)."""
  guarded(name, lambda: compare(name, poisoned(run, out_shape, out_dtype),
                                av, bv, out_dtype, tol=tol))


def _shape_name(m, n, k):
  return f"{m}x{n}x{k}"


def mosaic_cases(ks):
  """(name, run, av, bv, out_shape, out_dtype, tol) of the Mosaic checks,
  most telling first: exact, then random float32, then the rest."""
  mg = {"interpret": MGPU_INTERPRET}
  dn = lambda d: np.dtype(d).name.replace("float8_", "")
  for (m, n, k), (da, db) in zip(SHAPES, ((E4M3, E4M3), (E4M3, E5M2))):
    a, b = ternary(next(ks), (m, k), da), ternary(next(ks), (n, k), db)
    yield (f"scaled_matmul_mgpu exact {dn(da)} x {dn(db)} "
           f"{_shape_name(m, n, k)}", lambda a=a, b=b: ops.scaled_matmul_mgpu(
               a, b, 0.75, 2.0**-3, out_dtype=F32, **mg),
           f64(a) * 0.75, f64(b) * 2.0**-3, (m, n), F32, 0.0)
  m, n, k = SHAPES[0]
  a = mx_ternary(next(ks), m, k, "mxfp8_e4m3")
  b = mx_ternary(next(ks), n, k, "mxfp8_e5m2")
  yield (f"mx_matmul_mgpu exact e4m3 x e5m2 {_shape_name(m, n, k)}",
         lambda a=a, b=b: ops.mx_matmul_mgpu(a, b, out_dtype=F32, **mg),
         mx_f64(a), mx_f64(b), (m, n), F32, F32_TOL)
  for ab, bb in (((1, 128), (128, 128)), ((1, 128), (1, 128))):
    a, b = ternary(next(ks), (m, k), E4M3), ternary(next(ks), (n, k), E4M3)
    sa, sb = bw_scales(next(ks), (m, k), ab, -8, 8), bw_scales(
        next(ks), (n, k), bb, -8, 8)
    yield (f"blockwise_matmul exact {ab} x {bb} {_shape_name(m, n, k)}",
           lambda a=a, b=b, sa=sa, sb=sb, ab=ab, bb=bb: ops.blockwise_matmul(
               a, sa, b, sb, a_block=ab, b_block=bb, out_dtype=F32, **mg),
           bw_f64(a, sa, ab), bw_f64(b, sb, bb), (m, n), F32, F32_TOL)
  # Random operands: float32 outputs on both shapes, then the rest.
  for (m, n, k) in SHAPES:
    for dt in (E4M3, E5M2):
      a, b = fp8_operand(next(ks), (m, k), dt), fp8_operand(
          next(ks), (n, k), dt)
      yield (f"scaled_matmul_mgpu {dn(dt)} {_shape_name(m, n, k)} -> float32",
             lambda a=a, b=b: ops.scaled_matmul_mgpu(
                 a, b, 0.75, 2.0**-3, out_dtype=F32, **mg),
             f64(a) * 0.75, f64(b) * 2.0**-3, (m, n), F32, mma_tol(k))
    for fmt in ops.MXFP8_FORMATS:
      a, b = mx_operand(next(ks), (m, k), fmt), mx_operand(
          next(ks), (n, k), fmt, spread=4)
      yield (f"mx_matmul_mgpu {fmt} {_shape_name(m, n, k)} -> float32",
             lambda a=a, b=b: ops.mx_matmul_mgpu(a, b, out_dtype=F32, **mg),
             mx_f64(a), mx_f64(b), (m, n), F32, mma_tol(32))
    for ab, bb in (((1, 128), (128, 128)), ((1, 128), (1, 128))):
      (a, sa), (b, sb) = bw_operand(next(ks), (m, k), ab), bw_operand(
          next(ks), (n, k), bb)
      yield (f"blockwise_matmul {ab} x {bb} {_shape_name(m, n, k)} -> float32",
             lambda a=a, b=b, sa=sa, sb=sb, ab=ab, bb=bb: ops.blockwise_matmul(
                 a, sa, b, sb, a_block=ab, b_block=bb, out_dtype=F32, **mg),
             bw_f64(a, sa, ab), bw_f64(b, sb, bb), (m, n), F32, mma_tol(128))
  m, n, k = SHAPES[0]
  for out_dtype in (BF16, jnp.float16):
    on = np.dtype(out_dtype).name
    a, b = fp8_operand(next(ks), (m, k), E4M3), fp8_operand(
        next(ks), (n, k), E4M3)
    yield (f"scaled_matmul_mgpu e4m3 {_shape_name(m, n, k)} -> {on}",
           lambda a=a, b=b, o=out_dtype: ops.scaled_matmul_mgpu(
               a, b, 0.75, 2.0**-3, out_dtype=o, **mg),
           f64(a) * 0.75, f64(b) * 2.0**-3, (m, n), out_dtype, mma_tol(k))
  a, b = mx_operand(next(ks), (m, k), "mxfp8_e4m3"), mx_operand(
      next(ks), (n, k), "mxfp8_e4m3", spread=4)
  yield (f"mx_matmul_mgpu mxfp8_e4m3 {_shape_name(m, n, k)} -> bfloat16",
         lambda a=a, b=b: ops.mx_matmul_mgpu(a, b, out_dtype=BF16, **mg),
         mx_f64(a), mx_f64(b), (m, n), BF16, mma_tol(32))
  (a, sa), (b, sb) = bw_operand(next(ks), (m, k), (1, 128)), bw_operand(
      next(ks), (n, k), (128, 128), fmt="e5m2")
  yield (f"blockwise_matmul e4m3 x e5m2 {_shape_name(m, n, k)} -> bfloat16",
         lambda a=a, b=b, sa=sa, sb=sb: ops.blockwise_matmul(
             a, sa, b, sb, out_dtype=BF16, **mg),
         bw_f64(a, sa, (1, 128)), bw_f64(b, sb, (128, 128)), (m, n), BF16,
         mma_tol(128))
  (a, sa), (b, sb) = bw_operand(next(ks), (m, k), (128, 128)), bw_operand(
      next(ks), (n, k), (1, 128))
  yield (f"blockwise_matmul (128, 128) x (1, 128) {_shape_name(m, n, k)}",
         lambda a=a, b=b, sa=sa, sb=sb: ops.blockwise_matmul(
             a, sa, b, sb, a_block=(128, 128), b_block=(1, 128),
             out_dtype=F32, **mg),
         bw_f64(a, sa, (128, 128)), bw_f64(b, sb, (1, 128)), (m, n), F32,
         mma_tol(128))
  # Mixed formats; scales whose product leaves float32's range while the
  # result does not; tiny against huge E8M0 codes (no shift fits: the exact
  # path); tiny (down to subnormal) against huge blockwise scales.
  a = fp8_operand(next(ks), (300, 256), E4M3)
  b = fp8_operand(next(ks), (200, 256), E5M2)
  yield ("scaled_matmul_mgpu mixed e4m3 x e5m2",
         lambda a=a, b=b: ops.scaled_matmul_mgpu(a, b, 1.0, 1.0,
                                                 out_dtype=F32, **mg),
         f64(a), f64(b), (300, 200), F32, mma_tol(256))
  for sa, sb, mag, dt in ((2.0**127, 2.0**2, 2.0**-12, E5M2),
                          (2.0**-100, 2.0**-30, 2.0**6, E4M3)):
    a = (jax.random.normal(next(ks), (64, 256)) * mag).astype(dt)
    b = (jax.random.normal(next(ks), (48, 256)) * mag).astype(dt)
    yield (f"scaled_matmul_mgpu scales 2^{int(np.log2(sa))} x "
           f"2^{int(np.log2(sb))}",
           lambda a=a, b=b, sa=sa, sb=sb: ops.scaled_matmul_mgpu(
               a, b, sa, sb, out_dtype=F32, **mg),
           f64(a) * sa, f64(b) * sb, (64, 48), F32, mma_tol(256))
  a = mx_ternary(next(ks), 64, 256, "mxfp8_e4m3", 0, 5)
  b = mx_ternary(next(ks), 48, 256, "mxfp8_e4m3", 250, 255)
  yield ("mx_matmul_mgpu tiny x huge scales",
         lambda a=a, b=b: ops.mx_matmul_mgpu(a, b, out_dtype=F32, **mg),
         mx_f64(a), mx_f64(b), (64, 48), F32, F32_TOL)
  a, b = ternary(next(ks), (64, 256), E4M3), ternary(next(ks), (48, 256), E4M3)
  sa = bw_scales(next(ks), (64, 256), (1, 128), -126, -100)
  sb = bw_scales(next(ks), (48, 256), (128, 128), 90, 100)
  yield ("blockwise_matmul tiny x huge scales",
         lambda a=a, b=b, sa=sa, sb=sb: ops.blockwise_matmul(
             a, sa, b, sb, out_dtype=F32, **mg),
         bw_f64(a, sa, (1, 128)), bw_f64(b, sb, (128, 128)), (64, 48), F32,
         F32_TOL)


def mosaic_correctness(key, deadline):
  """The Mosaic checks, most telling first, until ``deadline`` (correctness
  shares the budget with the timings)."""
  ks = iter(jax.random.split(key, 128))
  mixed = mgpu_common.takes_pair(E4M3, E5M2)
  for name, *case in mosaic_cases(ks):
    if elapsed() > deadline:
      skip(f"the Mosaic checks from {name!r} on",
           f"past {deadline:.0f} s given to correctness")
      return
    if not mixed and ("e4m3 x e5m2" in name or "mixed" in name):
      skip(name, f"JAX {jax.__version__}'s wgmma takes no mixed fp8 pair")
      continue
    check(name, *case)


def triton_correctness(key):
  """The Triton kernels' checks (float32 MMA bound; precision=HIGHEST)."""
  ks = iter(jax.random.split(key, 64))
  tr = {"interpret": TRITON_INTERPRET}
  for dt in (E4M3, E5M2):
    for (m, n, k) in SHAPES:
      for out_dtype in (F32, BF16):
        a, b = fp8_operand(next(ks), (m, k), dt), fp8_operand(
            next(ks), (n, k), dt)
        check(f"scaled_matmul {np.dtype(dt).name} {_shape_name(m, n, k)} -> "
              f"{np.dtype(out_dtype).name}",
              lambda a=a, b=b, o=out_dtype: ops.scaled_matmul(
                  a, b, 0.75, 2.0**-3, out_dtype=o, **tr),
              f64(a) * 0.75, f64(b) * 2.0**-3, (m, n), out_dtype, F32_TOL)
      check(f"scaled_matmul {np.dtype(dt).name} {_shape_name(m, n, k)} -> "
            "float32, precision=HIGHEST (bf16 MMA)",
            lambda a=a, b=b: ops.scaled_matmul(
                a, b, 0.75, 2.0**-3, out_dtype=F32, precision="highest", **tr),
            f64(a) * 0.75, f64(b) * 2.0**-3, (m, n), F32, F32_TOL)
  for fmt in ops.MXFP8_FORMATS:
    for (m, n, k) in SHAPES:
      a, b = mx_operand(next(ks), (m, k), fmt), mx_operand(
          next(ks), (n, k), fmt, spread=4)
      for out_dtype in (F32, BF16):
        check(f"mx_matmul {fmt} {_shape_name(m, n, k)} -> "
              f"{np.dtype(out_dtype).name}",
              lambda a=a, b=b, o=out_dtype: ops.mx_matmul(
                  a, b, out_dtype=o, **tr),
              mx_f64(a), mx_f64(b), (m, n), out_dtype, F32_TOL)
      check(f"mx_matmul {fmt} {_shape_name(m, n, k)} -> float32, "
            "precision=HIGHEST",
            lambda a=a, b=b: ops.mx_matmul(a, b, out_dtype=F32,
                                           precision="highest", **tr),
            mx_f64(a), mx_f64(b), (m, n), F32, F32_TOL)
  # Tiny (2^-127..) against huge (..2^127) scales on both scale paths.
  a = mx_ternary(next(ks), 64, 256, "mxfp8_e4m3", 0, 5)
  b = mx_ternary(next(ks), 48, 256, "mxfp8_e4m3", 250, 255)
  for path in ("fast", "exact"):
    check(f"mx_matmul tiny x huge scales, {path} path",
          lambda path=path: mx_matmul_lib._mx_matmul_impl(  # pylint: disable=protected-access
              a, b, out_dtype=F32, block_m=None, block_n=None, block_k=None,
              num_warps=None, num_stages=None, path=path, **tr),
          mx_f64(a), mx_f64(b), (64, 48), F32, F32_TOL)


# -- timing -------------------------------------------------------------------

def _round(fn, args, reps):
  jax.block_until_ready(args)  # inputs made before the clock starts
  t0 = time.perf_counter()
  for _ in range(reps):
    out = fn(*args)
  jax.block_until_ready(out)
  return (time.perf_counter() - t0) / reps


def time_all(fns: dict, make_args, *, rounds=None, reps=None,
             deadline=math.inf) -> tuple[dict, dict]:
  """Median seconds per call of each fn(*make_args(r)[name]), and failures.

  ``make_args(r)`` draws round ``r``'s inputs (fresh ones every round, the
  same for every contender of the round); rounds interleave the contenders.
  Contenders are compiled in order; those not compiled by ``deadline`` are
  skipped. Returns ``(times, {name: error})``.
  """
  rounds, reps = rounds or TIMING["rounds"], reps or TIMING["reps"]
  live, failed, first = {}, {}, make_args(0)
  for name, fn in fns.items():
    if elapsed() > deadline:
      skip(f"timing {name}", f"past {deadline:.0f} s")
      continue
    try:
      jax.block_until_ready(fn(*first[name]))  # compile
      _round(fn, first[name], 2)
      live[name] = fn
    except Exception as e:  # pylint: disable=broad-except
      failed[name] = f"{type(e).__name__}: {e}"[:300]
      log(f"{name}: failed to run")
      traceback.print_exc(limit=3)
  del first
  if not live:
    return {}, failed
  times = {k: [] for k in live}
  for r in range(1, rounds + 1):
    args = make_args(r)
    for name, fn in live.items():
      times[name].append(_round(fn, args[name], reps))
    del args
  return {k: statistics.median(v) for k, v in times.items()}, failed


def tflops(m, n, k, seconds):
  return 2.0 * m * n * k / seconds / 1e12


# name -> (inputs it takes, function); one jitted function per name, so a
# later stage timing it again doesn't compile it again.
_FNS: dict = {}
# Baselines (XLA, jax.nn) fail without failing the check; kernels fail it.
BASELINES = ("xla_bf16_dot", "xla_fp8_dot", "jax_nn_scaled_matmul")
MOSAIC_FNS = ("scaled_matmul_mgpu_bf16", "scaled_matmul_mgpu_f32",
              "mx_matmul_mgpu_bf16", "blockwise_matmul_bf16")
TRITON_FNS = ("scaled_matmul_bf16", "scaled_matmul_f32", "mx_matmul_bf16")


def contender(name):
  if not _FNS:
    mg, tr = {"interpret": MGPU_INTERPRET}, {"interpret": TRITON_INTERPRET}
    table = {
        "xla_bf16_dot": ("bf16", lambda a, b: lax.dot_general(
            a, b, NT, preferred_element_type=BF16)),
        "xla_fp8_dot": ("fp8", lambda a, b, sa, sb: jnp.dot(
            a, b.T, preferred_element_type=F32)),
        "jax_nn_scaled_matmul": ("scaled", lambda ea, eb, sa, sb: (
            jax.nn.scaled_matmul(ea, eb, sa, sb,
                                 preferred_element_type=BF16)[0])),
        "scaled_matmul_mgpu_bf16": ("fp8", lambda a, b, sa, sb: (
            ops.scaled_matmul_mgpu(a, b, sa, sb, out_dtype=BF16, **mg))),
        "scaled_matmul_mgpu_f32": ("fp8", lambda a, b, sa, sb: (
            ops.scaled_matmul_mgpu(a, b, sa, sb, out_dtype=F32, **mg))),
        "mx_matmul_mgpu_bf16": ("mx", lambda a, b: ops.mx_matmul_mgpu(
            a, b, out_dtype=BF16, **mg)),
        "blockwise_matmul_bf16": ("blockwise", lambda a, sa, b, sb: (
            ops.blockwise_matmul(a, sa, b, sb, out_dtype=BF16, **mg))),
        "scaled_matmul_bf16": ("fp8", lambda a, b, sa, sb: ops.scaled_matmul(
            a, b, sa, sb, out_dtype=BF16, **tr)),
        "scaled_matmul_f32": ("fp8", lambda a, b, sa, sb: ops.scaled_matmul(
            a, b, sa, sb, out_dtype=F32, **tr)),
        "mx_matmul_bf16": ("mx", lambda a, b: ops.mx_matmul(
            a, b, out_dtype=BF16, **tr)),
    }
    _FNS.update({k: (kind, jax.jit(f)) for k, (kind, f) in table.items()})
  return _FNS[name]


def make_inputs(key, size, kinds):
  """``make_args`` for time_all: each round, codes of the same two float32
  (size, size) matrices in every kind of operand the contenders take."""
  def make(r):
    kx, kw = jax.random.split(jax.random.fold_in(key, r))
    x = jnp.clip(normal_rows(kx, (size, size), 2), -400, 400)
    w = jnp.clip(normal_rows(kw, (size, size), 2), -400, 400)
    args = {}
    if "bf16" in kinds:
      args["bf16"] = (x.astype(BF16), w.astype(BF16))
    if "fp8" in kinds:
      args["fp8"] = (x.astype(E4M3), w.astype(E4M3), F32(0.5), F32(0.25))
    if "mx" in kinds or "scaled" in kinds:
      am, bm = (jaxfp8.mx.quantize(v, "mxfp8_e4m3", axis=-1, pad=True)
                for v in (x, w))
      args["mx"] = (am, bm)
      (ea, sa), (eb, sb) = jaxfp8.mx.to_scaled(am), jaxfp8.mx.to_scaled(bm)
      args["scaled"] = (ea[None], eb[None], sa[None], sb[None])
    if "blockwise" in kinds:
      ca, sa = blockwise.quantize(x, block=(1, 128), fmt="e4m3")
      cb, sb = blockwise.quantize(w, block=(128, 128), fmt="e4m3")
      args["blockwise"] = (ca, sa, cb, sb)
    return args
  return make


def timings(key, sizes, names, stage_name, est):
  """Times ``names`` (one interleaved run per size); checks the kernels on
  sampled rows at the first size when ``stage_name`` is "mosaic"."""
  for size in sizes:
    if not fits(f"{stage_name} timings at {size}^3", est(size)):
      continue
    kinds = {n: contender(n)[0] for n in names}
    make = make_inputs(jax.random.fold_in(key, size), size, set(kinds.values()))
    per_name = lambda r: (lambda a: {n: a[kinds[n]] for n in names})(make(r))
    t, failed = time_all({n: contender(n)[1] for n in names}, per_name,
                         deadline=BUDGET - 5)
    run = len({row["run"] for row in RESULTS["timings"]})
    for name, sec in t.items():
      RESULTS["timings"].append({
          "run": run, "stage": stage_name, "size": size, "name": name,
          "inputs": kinds[name], "seconds": sec,
          "tflops": tflops(size, size, size, sec)})
      log(f"{size}^3 {name}: {tflops(size, size, size, sec):7.1f} TFLOP/s")
    for name, why in failed.items():
      if name in BASELINES:
        log(f"INFO baseline {name} did not run at {size}^3: {why}")
      else:
        fail(f"{name} runs at {size}^3", why)
    if size == sizes[0] and set(t) & set(MOSAIC_FNS):
      args = make(99)
      sampled_checks(t, args, size)
      del args


def sampled_checks(live, args, size):
  """The timed Mosaic kernels (where they ran) on 16 sampled rows, poisoned;
  XLA's and jax.nn's products for context (not checked: XLA's fp8 GEMM may
  accumulate with the tensor cores' reduced precision). ``args``: operands
  by kind, as :func:`make_inputs` draws them."""
  rows = np.random.default_rng(2).choice(size, 16, replace=False)
  a8, b8, sa, sb = args["fp8"]
  av, bv = f64(a8), f64(b8)
  am, bm = args["mx"]
  ca, s_a, cb, s_b = args["blockwise"]
  cases = (
      ("scaled_matmul_mgpu_f32", F32, av * float(sa), bv * float(sb),
       mma_tol(size)),
      ("mx_matmul_mgpu_bf16", BF16, mx_f64(am), mx_f64(bm), mma_tol(32)),
      ("blockwise_matmul_bf16", BF16, bw_f64(ca, s_a, (1, 128)),
       bw_f64(cb, s_b, (128, 128)), mma_tol(128)),
  )
  for name, out_dtype, x, y, tol in cases:
    if name not in live:
      continue
    kind, fn = contender(name)
    guarded(f"{name} {size}^3 (16 rows)", lambda: compare(
        f"{name} {size}^3 (16 rows)",
        poisoned(lambda: fn(*args[kind]), (size, size), out_dtype),
        x, y, out_dtype, rows, tol=tol))
  for name, x, y in (("xla_fp8_dot", av, bv),
                     ("jax_nn_scaled_matmul", mx_f64(am), mx_f64(bm))):
    if name in live:
      kind, fn = contender(name)
      compare(f"{name} {size}^3 (16 rows)", fn(*args[kind]), x, y,
              BF16 if name.startswith("jax") else F32, rows, record=False,
              tol=mma_tol(size))


# -- training steps -------------------------------------------------------------

def load_example():
  """examples/transformer_lm.py as a module (it is not a package)."""
  path = ROOT / "examples" / "transformer_lm.py"
  spec = importlib.util.spec_from_file_location("transformer_lm", path)
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod


def build_step(ex, recipe, shape, seed=0):
  """The example's jitted training step under ``recipe`` and its state (a
  constant learning rate stands for the example's schedule)."""
  width, layers, heads, seq, _ = shape
  step, _, state = ex.make_step(recipe, width=width, layers=layers,
                                heads=heads, seq=seq, seed=seed, lr=1e-4)
  return step, state


def train_steps(key, shape, names):
  """One step per recipe, interleaved; each recipe compiled (and its loss
  checked finite) only where its estimate fits the budget."""
  try:
    ex = load_example()
    import optax  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:
    skip("training steps", f"examples/transformer_lm.py needs {e.name}")
    return
  batch, seq = shape[4], shape[3]
  tokens = lambda r: jax.random.randint(jax.random.fold_in(key, r),
                                        (batch, seq + 1), 0, 256, jnp.int32
                                        ).astype(jnp.uint8)
  fns, states = {}, {}
  for name in names:
    if not fits(f"training step {name}", EST["train_recipe"]):
      continue
    t0 = elapsed()
    try:
      step, state = build_step(ex, name, shape)
      loss = float(step(*state, tokens(0))[-1])
    except Exception as e:  # pylint: disable=broad-except
      fail(f"training step {name} runs", f"{type(e).__name__}: {e}"[:300])
      traceback.print_exc(limit=3)
      continue
    ok = math.isfinite(loss)
    RESULTS["checks"].append({"name": f"training step {name}: finite loss",
                              "ok": ok, "loss": loss})
    log(f"{'PASS' if ok else 'FAIL'} training step {name}: loss {loss:.4f}, "
        f"built and compiled in {elapsed() - t0:.1f} s")
    fns[name], states[name] = step, state
  if not fns:
    return
  t, failed = time_all(fns, lambda r: {n: (*states[n], tokens(r))
                                       for n in fns}, **TRAIN_TIMING)
  for name, sec in t.items():
    RESULTS["train"].append({"recipe": name, "seconds": sec})
    log(f"training step {name}: {sec * 1e3:.2f} ms")
  for name, why in failed.items():
    fail(f"training step {name} times", why)


# -- tile sweep -----------------------------------------------------------------

SWEEP = {
    "scaled_matmul_mgpu": [(128, 256, 128, 3), (128, 128, 128, 4),
                           (128, 256, 64, 6), (64, 256, 128, 4),
                           (128, 128, 128, 6)],
    "mx_matmul_mgpu": [(64, 128, None, 4), (64, 256, None, 4),
                       (128, 128, None, 3), (64, 128, None, 2)],
    "blockwise_matmul": [(64, 128, None, 4), (64, 256, None, 4),
                         (128, 128, None, 3), (64, 128, None, 2)],
}


def sweep(key, size, limit=None):
  """Tile configurations (block_m, block_n, block_k, max_concurrent_steps)
  of the Mosaic kernels at size^3 (bf16 outputs; one set of inputs)."""
  args = None
  for op, cfgs in SWEEP.items():
    for cfg in cfgs[:limit]:
      if not fits(f"sweep {op} {cfg}", EST["sweep_config"]):
        continue
      args = args or make_inputs(key, size, {"fp8", "mx", "blockwise"})(0)
      bm, bn, bk, steps = cfg
      tiles = dict(block_m=bm, block_n=bn, max_concurrent_steps=steps,
                   out_dtype=BF16, interpret=MGPU_INTERPRET)
      if op == "scaled_matmul_mgpu":
        fn = jax.jit(lambda a, b, sa, sb, t=tiles: ops.scaled_matmul_mgpu(
            a, b, sa, sb, block_k=bk, **t))
        fargs = args["fp8"]
      elif op == "mx_matmul_mgpu":
        fn = jax.jit(lambda a, b, t=tiles: ops.mx_matmul_mgpu(a, b, **t))
        fargs = args["mx"]
      else:
        fn = jax.jit(lambda a, sa, b, sb, t=tiles: ops.blockwise_matmul(
            a, sa, b, sb, **t))
        fargs = args["blockwise"]
      t, failed = time_all({op: fn}, lambda r, f=fargs, op=op: {op: f},
                           rounds=3, reps=5)
      if op in t:
        RESULTS["sweep"].append({"op": op, "tiles": cfg,
                                 "tflops": tflops(size, size, size, t[op])})
        log(f"sweep {size}^3 {op} tiles={cfg}: "
            f"{RESULTS['sweep'][-1]['tflops']:.1f} TFLOP/s")
      else:
        log(f"INFO sweep {op} tiles={cfg} did not run: {failed.get(op)}")


# -- summary --------------------------------------------------------------------

# (kernel, baseline, target ratio or None, size the target is set at or None
# for every size). Ratio = baseline time / kernel time, in the same run.
TARGETS = (
    ("scaled_matmul_mgpu_bf16", "xla_fp8_dot", 0.8, None),
    ("scaled_matmul_mgpu_f32", "xla_fp8_dot", None, None),
    ("mx_matmul_mgpu_bf16", "xla_bf16_dot", 1.3, 8192),
    ("mx_matmul_mgpu_bf16", "jax_nn_scaled_matmul", None, None),
    ("blockwise_matmul_bf16", "xla_bf16_dot", 1.3, 8192),
    ("scaled_matmul_bf16", "xla_fp8_dot", 0.8, None),
    ("mx_matmul_bf16", "jax_nn_scaled_matmul", 1.2, None),
)


def _target_rows():
  by_key = {(r["run"], r["name"]): r for r in RESULTS["timings"]}
  rows = []
  for kernel, base, target, at in TARGETS:
    for r in RESULTS["timings"]:
      b = by_key.get((r["run"], base))
      if r["name"] != kernel or b is None:
        continue
      ratio = b["seconds"] / r["seconds"]
      applies = target is not None and (at is None or at == r["size"])
      met = ("yes" if ratio >= target else "NO") if applies else "-"
      rows.append((r["size"], kernel, r["tflops"], base, b["tflops"], ratio,
                   f">= {target}x" if applies else "-", met))
  return rows


def print_summary(header) -> list[str]:
  """Full tables, then the short table last; returns the failed checks."""
  failed = [c["name"] for c in RESULTS["checks"] if not c["ok"]]
  print("\n| M=N=K | stage | function | operands | TFLOP/s |")
  print("|---|---|---|---|---|")
  for r in RESULTS["timings"]:
    print(f"| {r['size']} | {r['stage']} | `{r['name']}` | {r['inputs']} | "
          f"{r['tflops']:.1f} |")
  if RESULTS["sweep"]:
    print("\n| kernel | (block_m, block_n, block_k, steps) | TFLOP/s |")
    print("|---|---|---|")
    for s in RESULTS["sweep"]:
      print(f"| `{s['op']}` | {s['tiles']} | {s['tflops']:.1f} |")
  print(f"\n## GPU check\n\n{header['date']}, {header['device']} (compute "
        f"capability {header['compute_capability']}), JAX {header['jax']}, "
        f"jaxlib {header['jaxlib']}, Python {header['python']}. TFLOP/s = "
        "2MNK / median time; ratio = baseline time / kernel time, same run.\n")
  print(f"correctness: {len(RESULTS['checks']) - len(failed)} passed, "
        f"{len(failed)} failed" + (f": {failed}" if failed else ""))
  print("\n| M=N=K | kernel | TFLOP/s | baseline | TFLOP/s | ratio | target "
        "| met |")
  print("|---|---|---|---|---|---|---|---|")
  for size, kernel, tf, base, btf, ratio, target, met in _target_rows():
    print(f"| {size} | `{kernel}` | {tf:.1f} | `{base}` | {btf:.1f} | "
          f"{ratio:.2f}x | {target} | {met} |")
  if RESULTS["train"]:
    shape = header["train_shape"]
    print(f"\nTraining step of examples/transformer_lm.py's model (width "
          f"{shape[0]}, {shape[1]} blocks, {shape[2]} heads, context "
          f"{shape[3]}, batch {shape[4]}):\n")
    print("| recipe | ms/step | speed x bf16 | target |")
    print("|---|---|---|---|")
    bf16 = {t["recipe"]: t["seconds"] for t in RESULTS["train"]}.get("bf16")
    for t in RESULTS["train"]:
      ratio = bf16 / t["seconds"] if bf16 else math.nan
      target = "> 1x" if t["recipe"] == "fp8_blockwise" else "-"
      if target != "-" and bf16:
        target += " (met)" if ratio > 1 else " (NOT met)"
      print(f"| {t['recipe']} | {t['seconds'] * 1e3:.2f} | {ratio:.2f}x | "
            f"{target} |")
  if RESULTS["skipped"]:
    print(f"\nskipped ({len(RESULTS['skipped'])}): "
          + "; ".join(RESULTS["skipped"]))
  return failed


def _shape(text: str) -> tuple[int, ...]:
  shape = tuple(int(v) for v in text.split(","))
  if len(shape) != 5 or min(shape) < 1:
    raise argparse.ArgumentTypeError(
        f"expected width,layers,heads,seq,batch, got {text!r}")
  return shape


def _on_sigterm(signum, frame):
  raise Interrupted()


def main(argv=None) -> int:
  global TRITON_INTERPRET, MGPU_INTERPRET, MOSAIC_SKIP, BUDGET, SHAPES
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--sizes", default="4096,8192")
  p.add_argument("--skip-correctness", action="store_true")
  p.add_argument("--sweep", action="store_true",
                 help="also time tile configurations (largest size)")
  p.add_argument("--budget", type=float, default=math.inf,
                 help="seconds for everything; work that would end later "
                 "is skipped, lowest priority first")
  p.add_argument("--train-shape", type=_shape, default=(4096, 2, 32, 512, 8),
                 help="width,layers,heads,seq,batch of the training steps")
  p.add_argument("--recipes", default=",".join(TRAIN_RECIPES))
  p.add_argument("--cpu-smoke", action="store_true",
                 help="every code path on CPU, tiny shapes, interpreters")
  args = p.parse_args(argv)
  BUDGET = args.budget
  if args.cpu_smoke:
    TRITON_INTERPRET = MGPU_INTERPRET = True
    SHAPES = ((40, 24, 200),)
    args.sizes, args.train_shape = "128", (128, 1, 2, 16, 2)
    TIMING.update(rounds=2, reps=1)
    TRAIN_TIMING.update(rounds=2, reps=1)
  dev = jax.devices()[0]
  header = {
      "date": datetime.datetime.now(datetime.timezone.utc).strftime(
          "%Y-%m-%d %H:%M UTC"),
      "device": getattr(dev, "device_kind", str(dev)),
      "compute_capability": getattr(dev, "compute_capability", None),
      "jax": jax.__version__, "jaxlib": jaxlib.__version__,
      "python": sys.version.split()[0], "backend": jax.default_backend(),
      "budget_s": BUDGET, "train_shape": args.train_shape,
  }
  RESULTS["header"] = header
  log("header", json.dumps(header))
  if jax.default_backend() != "gpu" and not args.cpu_smoke:
    log("no GPU backend: nothing to check")
    return 2
  try:
    mgpu_common.resolve_mode(MGPU_INTERPRET, "gpu_check")
  except NotImplementedError as e:
    MOSAIC_SKIP = str(e)
  on_term = signal.signal(signal.SIGTERM, _on_sigterm)
  key = jax.random.key(0)
  sizes = [int(s) for s in args.sizes.split(",")]
  est_t = lambda s: EST["timing"].get(s, 30.0)
  try:
    if MOSAIC_SKIP:
      skip("Mosaic GPU kernels (correctness, timings, sweep)", MOSAIC_SKIP)
    elif not args.skip_correctness:
      stage("Mosaic correctness", mosaic_correctness,
            jax.random.fold_in(key, 1), 0.3 * BUDGET)
    mosaic = () if MOSAIC_SKIP else MOSAIC_FNS
    stage("Mosaic timings", timings, jax.random.fold_in(key, 2), sizes,
          ("xla_bf16_dot", "xla_fp8_dot", "jax_nn_scaled_matmul") + mosaic,
          "mosaic", est_t)
    names = [n for n in args.recipes.split(",") if n]
    stage("training steps", train_steps, jax.random.fold_in(key, 3),
          args.train_shape, names)
    if not args.skip_correctness and fits("Triton correctness",
                                          EST["triton_correctness"]):
      stage("Triton correctness", triton_correctness,
            jax.random.fold_in(key, 4))
    stage("Triton timings", timings, jax.random.fold_in(key, 5), sizes,
          ("xla_fp8_dot", "jax_nn_scaled_matmul") + TRITON_FNS, "triton",
          lambda s: EST["triton_timing"])
    if args.sweep or args.cpu_smoke:
      if MOSAIC_SKIP:
        skip("sweep", "no Mosaic GPU kernels here")
      else:
        stage("sweep", sweep, jax.random.fold_in(key, 6), sizes[-1],
              1 if args.cpu_smoke else None)
  except Interrupted:
    skip("everything after the SIGTERM", f"terminated at {elapsed():.0f} s")
  signal.signal(signal.SIGTERM, on_term)
  path = os.path.join(out_dir(), "gpu_check.json")
  with open(path, "w") as f:
    json.dump(RESULTS, f, indent=1, default=str)
  log(f"done; results in {path}")
  failed = print_summary(header)
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
