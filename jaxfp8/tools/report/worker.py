"""The operations ``jaxfp8 report`` audits, and the subprocess that runs them.

This module is loaded in two ways. The report imports it for :func:`catalogue`
and :func:`reference_cast`. The worker subprocess loads it by file path,
without importing the ``jaxfp8`` package, so that on the native side JAX runs
exactly as installed: ``import jaxfp8`` would install its constant guard and
change what a float6 constant under ``jit`` does. Only the jaxfp8 side imports
``jaxfp8``. Keep this file free of ``jaxfp8`` imports at module level.

Protocol: a JSON header line (side, sample count, seed), then one JSON task
per line, until ``END``. For each task the worker prints ``BEGIN <id>``
before running it and ``RESULT <json>`` after, flushing each line, so the
parent knows which task was running if the process dies. A worker serves many
formats in turn: JAX is imported once per worker, not once per format.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
import traceback
from typing import Any

import ml_dtypes
import numpy as np

# The usual OCP/JAX truncated-normal correction: the std of N(0,1) truncated
# to [-2, 2]. jax.nn.initializers.variance_scaling divides by it.
_TRUNC_STD = .87962566103423978

# Fault injection for the tests: "<task id>=abort" or "<task id>=hang" makes
# the worker abort, or stop answering, when it reaches that task.
FAULT_ENV = "_JAXFP8_REPORT_FAULT"


@dataclasses.dataclass(frozen=True)
class Op:
  """One audited operation.

  Attributes:
    name: row label in the report (unique).
    kind: "sample" (jax.random), "init" (jax.nn.initializers), "const",
      "cast", "dot" or "matmul".
    fn: for samples and initializers, the attribute path under the API root
      (``random.normal``, ``nn.initializers.glorot_normal``).
    kwargs: keyword arguments of the sampler, or of the initializer factory.
    shape: shape of the sample or of the initialized array.
    direct: the initializer is a function itself (zeros, ones), no factory.
    law: the real-valued law whose rounding is the right answer (see
      :mod:`jaxfp8.tools.report.laws`), or None where there is no closed form.
    family: plots group rows by family (one PNG each).
  """
  name: str
  kind: str
  fn: str = ""
  kwargs: tuple[tuple[str, Any], ...] = ()
  shape: tuple[int, ...] = ()
  direct: bool = False
  law: tuple[tuple[str, Any], ...] | None = None
  family: str = ""

  def law_dict(self) -> dict[str, Any] | None:
    return None if self.law is None else dict(self.law)


def _law(dist: str, *args, loc=0.0, scale=1.0, atom0=0.0):
  return (("dist", dist), ("args", tuple(args)), ("loc", loc),
          ("scale", scale), ("atom0", atom0))


def _sample(name, law, size, *, shape=None, **kwargs):
  return Op(name, "sample", f"random.{name}", tuple(kwargs.items()),
            shape or (size,), law=law, family=name)


def _init(name, law, shape, *, fn=None, direct=False, **kwargs):
  return Op(name, "init", f"nn.initializers.{fn or name}",
            tuple(kwargs.items()), shape, direct=direct, law=law,
            family=name)


def catalogue(n: int) -> list[Op]:
  """Every audited operation, for samples of about ``n`` values each."""
  side = max(4, math.isqrt(n))  # dense initializers: side x side
  conv = max(4, math.isqrt(n // 9))  # delta_orthogonal: 3 x 3 x conv x conv
  ortho = 16  # jax.random.orthogonal: n // 256 matrices 16 x 16
  var = 1.0 / side  # fan_in == fan_out == side
  tn = math.sqrt(var) / _TRUNC_STD
  ops = [
      _sample("uniform", _law("uniform"), n),
      _sample("normal", _law("norm"), n),
      _sample("truncated_normal", _law("truncnorm", -2.0, 2.0), n,
              lower=-2.0, upper=2.0),
      _sample("laplace", _law("laplace"), n),
      _sample("logistic", _law("logistic"), n),
      _sample("exponential", _law("expon"), n),
      _sample("gumbel", _law("gumbel_r"), n),
      _sample("cauchy", _law("cauchy"), n),
      _sample("lognormal", _law("lognorm", 1.0), n, sigma=1.0),
      _sample("rayleigh", _law("rayleigh"), n, scale=1.0),
      _sample("maxwell", _law("maxwell"), n),
      _sample("double_sided_maxwell", _law("double_sided_maxwell"), n,
              loc=0.0, scale=1.0),
      _sample("weibull_min", _law("weibull_min", 1.5), n, scale=1.0,
              concentration=1.5),
      _sample("pareto", _law("pareto", 3.0), n, b=3.0),
      _sample("triangular", _law("triang", 0.5), n, left=0.0, mode=0.5,
              right=1.0),
      _sample("generalized_normal", _law("gennorm", 1.5), n, p=1.5),
      _sample("gamma", _law("gamma", 2.0), n, a=2.0),
      _sample("beta", _law("beta", 2.0, 3.0), n, a=2.0, b=3.0),
      _sample("chisquare", _law("chi2", 3.0), n, df=3.0),
      _sample("t", _law("t", 5.0), n, df=5.0),
      _sample("rademacher", _law("rademacher"), n),
      # Multivariate samplers: the law is that of one coordinate.
      _sample("dirichlet", _law("beta", 2.0, 4.0), n, shape=(n // 3,),
              alpha=(2.0, 2.0, 2.0)),
      _sample("multivariate_normal", _law("norm"), n, shape=(n // 2,),
              mean=(0.0, 0.0), cov=((1.0, 0.0), (0.0, 1.0))),
      _sample("ball", _law("ball3"), n, shape=(n // 3,), d=3, p=2),
      _sample("orthogonal", _law("orthogonal_entry", ortho), n,
              shape=(max(1, n // ortho**2),), n=ortho),
      # jax.nn.initializers, on a square (fan_in == fan_out) kernel.
      _init("zeros", _law("point", 0.0), (side, side), direct=True),
      _init("ones", _law("point", 1.0), (side, side), direct=True),
      _init("constant(0.1)", _law("point", 0.1), (side, side),
            fn="constant", value=0.1),
      _init("normal(0.01)", _law("norm", scale=0.01), (side, side),
            fn="normal", stddev=0.01),
      _init("uniform(0.01)", _law("uniform", scale=0.01), (side, side),
            fn="uniform", scale=0.01),
      _init("truncated_normal(0.01)",
            _law("truncnorm", -2.0, 2.0, scale=0.01), (side, side),
            fn="truncated_normal", stddev=0.01),
      _init("glorot_normal", _law("truncnorm", -2.0, 2.0, scale=tn),
            (side, side)),
      _init("glorot_uniform",
            _law("uniform", loc=-math.sqrt(3 * var),
                 scale=2 * math.sqrt(3 * var)), (side, side)),
      _init("he_normal", _law("truncnorm", -2.0, 2.0, scale=math.sqrt(2) * tn),
            (side, side)),
      _init("he_uniform",
            _law("uniform", loc=-math.sqrt(6 * var),
                 scale=2 * math.sqrt(6 * var)), (side, side)),
      _init("lecun_normal", _law("truncnorm", -2.0, 2.0, scale=tn),
            (side, side)),
      _init("lecun_uniform",
            _law("uniform", loc=-math.sqrt(3 * var),
                 scale=2 * math.sqrt(3 * var)), (side, side)),
      _init("variance_scaling(normal)", _law("norm", scale=math.sqrt(var)),
            (side, side), fn="variance_scaling", scale=1.0, mode="fan_in",
            distribution="normal"),
      _init("orthogonal_init", _law("orthogonal_entry", side), (side, side),
            fn="orthogonal"),
      _init("delta_orthogonal",
            _law("orthogonal_entry", conv, atom0=8.0 / 9.0),
            (3, 3, conv, conv)),
      Op("constant under jit", "const"),
      Op("cast with overflow", "cast"),
      Op("dot (f32 accumulate)", "dot"),
      Op("matmul (narrow out)", "matmul"),
  ]
  return ops


# -- numpy references (no JAX) --------------------------------------------------
def np_dtype(fmt_name: str) -> np.dtype:
  return np.dtype(getattr(ml_dtypes, fmt_name))


def _finfo(dt: np.dtype):
  return ml_dtypes.finfo(dt)


def reference_cast(x: np.ndarray, fmt_name: str) -> np.ndarray:
  """Round-to-nearest-even, saturating: jaxfp8.cast's rule, in NumPy float64.

  Finite values beyond the range and +-Inf become +-max; NaN stays NaN (-0 in
  formats without NaN, as ml_dtypes). E8M0: zero, negatives and NaN give NaN,
  values below 2^-127 give 2^-127.

  >>> reference_cast(np.array([0.3, 465.0, -1e9, np.inf, np.nan]),
  ...                "float8_e4m3fn").tolist()
  [0.3125, 448.0, -448.0, 448.0, nan]
  >>> reference_cast(np.array([3.0, 0.0, -1.0]), "float8_e8m0fnu").tolist()
  [4.0, nan, nan]
  """
  dt = np_dtype(fmt_name)
  fi = _finfo(dt)
  x = np.asarray(x, np.float64)
  top = float(fi.max)
  y = np.clip(np.nan_to_num(x, nan=0.0, posinf=top, neginf=-top), -top, top)
  if fmt_name == "float8_e8m0fnu":
    tiny = float(fi.smallest_normal)
    y = np.maximum(y, tiny)
    out = y.astype(dt).astype(np.float64)
    return np.where(np.isnan(x) | (x <= 0), np.nan, out)
  out = y.astype(dt).astype(np.float64)
  has_nan = bool(np.isnan(np.arange(256 if fi.bits == 8 else 2**fi.bits,
                                    dtype=np.uint8).view(dt)
                          .astype(np.float32)).any())
  return np.where(np.isnan(x), np.nan if has_nan else -0.0, out)


def cast_inputs(fmt_name: str) -> np.ndarray:
  """float32 inputs that exercise rounding, ties, subnormals and overflow."""
  fi = _finfo(np_dtype(fmt_name))
  top, sub, eps = float(fi.max), float(fi.smallest_subnormal), float(fi.eps)
  xs = [0.0, -0.0, sub, sub / 2, sub * 0.75, float(fi.smallest_normal), 1.0,
        -1.0, 1 + eps / 2, 1 + eps * 0.75, 0.3, -0.3, 3.14159, top, -top,
        top * (1 + eps / 8), top * (1 + eps), -top * 2, 1e30, -1e30,
        np.inf, -np.inf, np.nan]
  with np.errstate(over="ignore"):
    return np.array(xs, np.float64).astype(np.float32)


def operands(fmt_name: str, seed: int):
  """Matmul operands: N(0, 1) values rounded into the format (in float64)."""
  rng = np.random.default_rng(seed)
  a = reference_cast(rng.standard_normal((64, 128)), fmt_name)
  b = reference_cast(rng.standard_normal((128, 64)), fmt_name)
  if fmt_name == "float8_e8m0fnu":  # no sign, no zero
    a = reference_cast(np.abs(rng.standard_normal((64, 128))), fmt_name)
    b = reference_cast(np.abs(rng.standard_normal((128, 64))), fmt_name)
  return a, b


# -- the worker -------------------------------------------------------------------
class NotAvailable(Exception):
  """The jaxfp8 API an operation needs does not exist (yet)."""


def _resolve(root, path: str, root_name: str):
  obj = root
  for part in path.split("."):
    try:
      obj = getattr(obj, part)
    except (AttributeError, ImportError) as e:
      raise NotAvailable(f"{root_name}.{path}: not available") from e
  return obj


def _to_f64(x) -> tuple[np.ndarray, str]:
  """Values of a sample as float64, and the name of the dtype that holds them."""
  codes = getattr(x, "codes", None)
  fmt = getattr(x, "format", None)
  if codes is not None and fmt is not None:  # jaxfp8.CodeArray
    table = np.asarray(fmt.code_table, np.float64)
    return table[np.asarray(codes).astype(np.int64)], f"codes of {fmt.name}"
  arr = np.asarray(x)
  return arr.astype(np.float64), arr.dtype.name


def _sample_stats(x, fmt_name: str) -> dict[str, Any]:
  v, dtype = _to_f64(x)
  v = v.ravel()
  nan = np.isnan(v)
  vals, counts = np.unique(v[~nan], return_counts=True)
  return {"status": "ok", "dtype": dtype, "n": int(v.size),
          "nan": int(nan.sum()), "counts": [[float(a), int(c)]
                                            for a, c in zip(vals, counts)],
          "wrong_dtype": dtype not in (fmt_name, f"codes of {fmt_name}")}


class Runner:
  """Runs tasks of one side ("native" or "jaxfp8")."""

  def __init__(self, side: str, n: int, seed: int):
    import jax  # pylint: disable=g-import-not-at-top
    import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
    self.jax, self.jnp, self.side, self.seed = jax, jnp, side, seed
    self.ops = {op.name: op for op in catalogue(n)}
    if side == "jaxfp8":
      import jaxfp8  # pylint: disable=g-import-not-at-top
      self.jaxfp8 = jaxfp8
      self.root, self.root_name = jaxfp8, "jaxfp8"
    else:
      self.root, self.root_name = jax, "jax"

  def run(self, fmt_name: str, op_name: str) -> dict[str, Any]:
    op = self.ops[op_name]
    try:
      return getattr(self, f"_{op.kind}")(op, fmt_name)
    except NotAvailable as e:
      return {"status": "n/a", "message": str(e)}
    except Exception as e:  # pylint: disable=broad-except
      lines = [l for l in str(e).strip().splitlines() if l.strip()]
      return {"status": "error",
              "message": f"{type(e).__name__}: {lines[0] if lines else ''}",
              "trace": traceback.format_exc(limit=3)[-600:]}

  def _key(self):
    return self.jax.random.key(self.seed)

  def _kwargs(self, op: Op) -> dict[str, Any]:
    return {k: (np.asarray(v, np.float32) if isinstance(v, tuple) else v)
            for k, v in op.kwargs}

  def _sample(self, op: Op, fmt_name: str):
    fn = _resolve(self.root, op.fn, self.root_name)
    x = fn(self._key(), shape=op.shape, dtype=np_dtype(fmt_name),
           **self._kwargs(op))
    return _sample_stats(x, fmt_name)

  def _init(self, op: Op, fmt_name: str):
    init = _resolve(self.root, op.fn, self.root_name)
    if not op.direct:
      init = init(**self._kwargs(op))
    return _sample_stats(init(self._key(), op.shape, np_dtype(fmt_name)),
                         fmt_name)

  def _compare(self, got, want: np.ndarray, finite_in: np.ndarray,
               extra: dict[str, Any] | None = None):
    v, dtype = _to_f64(got)
    v, want = v.ravel(), want.ravel()
    nan, want_nan = np.isnan(v), np.isnan(want)
    # NaN matches NaN whatever its sign bit (fnuz formats' NaN is 0x80).
    same = np.where(want_nan, nan,
                    (v == want) & (np.signbit(v) == np.signbit(want)))
    out = {"status": "ok", "dtype": dtype, "total": int(v.size),
           "nan_from_finite": int((nan & ~want_nan & finite_in.ravel()).sum()),
           "nan": int(nan.sum()), "mismatch": int((~same).sum())}
    out.update(extra or {})
    return out

  def _const(self, op: Op, fmt_name: str):
    del op
    jax, jnp = self.jax, self.jnp
    fi = _finfo(np_dtype(fmt_name))
    want = reference_cast(np.array(
        [0.0, float(fi.smallest_subnormal), 1.0, -1.0, 0.75, float(fi.max),
         -float(fi.max)]), fmt_name)
    finite = np.isfinite(want)
    if self.side == "native":  # a NumPy constant of the format inside jit
      const = want.astype(np_dtype(fmt_name))
      got = jax.jit(lambda: jnp.asarray(const))()
    else:  # jaxfp8: round a float32 constant inside jit
      const = want.astype(np.float32)
      got = jax.jit(lambda: self.jaxfp8.cast(const, fmt_name))()
    return self._compare(got, want, finite)

  def _cast(self, op: Op, fmt_name: str):
    del op
    jax, jnp = self.jax, self.jnp
    x = cast_inputs(fmt_name)
    want = reference_cast(x, fmt_name)
    if self.side == "native":
      got = jax.jit(lambda v: v.astype(np_dtype(fmt_name)))(jnp.asarray(x))
    else:
      got = jax.jit(lambda v: self.jaxfp8.cast(v, fmt_name))(jnp.asarray(x))
    return self._compare(got, want, np.isfinite(x))

  def _inputs(self, fmt_name: str):
    a, b = operands(fmt_name, self.seed)
    if self.side == "native":
      dt = np_dtype(fmt_name)
      return a, b, self.jnp.asarray(a.astype(dt)), self.jnp.asarray(b.astype(dt))
    return (a, b, self.jaxfp8.cast(a.astype(np.float32), fmt_name),
            self.jaxfp8.cast(b.astype(np.float32), fmt_name))

  def _dot(self, op: Op, fmt_name: str):
    del op
    jax, jnp = self.jax, self.jnp
    a, b, ja, jb = self._inputs(fmt_name)
    ref = a @ b
    if self.side == "native":
      got = jax.jit(lambda u, v: jnp.dot(u, v, preferred_element_type=jnp.float32))(ja, jb)
    else:
      fn = _resolve(self.root, "ops.dot_general", "jaxfp8")
      got = fn(ja, jb, (((1,), (0,)), ((), ())),
               preferred_element_type=jnp.float32)
    v, _ = _to_f64(got)
    err = float(np.max(np.abs(v - ref)) / max(np.max(np.abs(ref)), 1e-300))
    return self._compare(got, ref, np.ones(ref.shape, bool),
                         {"relerr": err if np.isfinite(err) else None,
                          "mismatch": None})

  def _matmul(self, op: Op, fmt_name: str):
    del op
    jax = self.jax
    a, b, ja, jb = self._inputs(fmt_name)
    want = reference_cast(a @ b, fmt_name)
    if self.side == "native":
      got = jax.jit(lambda u, v: u @ v)(ja, jb)
    else:
      j8 = self.jaxfp8
      got = jax.jit(lambda u, v: j8.cast(j8.decode(u) @ j8.decode(v),
                                         fmt_name))(ja, jb)
    return self._compare(got, want, np.ones(want.shape, bool))


def _emit(line: str) -> None:
  sys.stdout.write(line + "\n")
  sys.stdout.flush()


def main() -> int:
  header = json.loads(sys.stdin.readline())
  runner = Runner(header["side"], header["n"], header["seed"])
  fault_at, _, fault = os.environ.get(FAULT_ENV, "").rpartition("=")
  for line in sys.stdin:  # one task per line, until END or end of input
    if line.strip() == "END":
      break
    task = json.loads(line)
    _emit(f"BEGIN {task['id']}")
    if task["id"] == fault_at:
      if fault == "abort":
        os.abort()
      time.sleep(3600)
    wall, cpu = time.perf_counter(), time.process_time()
    result = runner.run(task["fmt"], task["op"])
    result["id"] = task["id"]
    result["secs"] = round(time.perf_counter() - wall, 3)
    result["cpu_secs"] = round(time.process_time() - cpu, 3)
    _emit("RESULT " + json.dumps(result))
  return 0


if __name__ == "__main__":
  sys.exit(main())
