"""``python -m jaxfp8 bench mx``: MX quantize/dequantize against a plain cast.

Times, per format, ``jaxfp8.mx.quantize`` and ``MXArray.dequantize`` of an
N x N float32 tensor against the casts they replace, timed round-robin in the
same run (a fresh order each round): quantize against
``x.astype(jnp.float8_e4m3fn)`` (both read 4 bytes and write about 1 per
element), dequantize against the upcast ``y.astype(jnp.float32)`` of that
fp8 array (both read about 1 and write 4); dequantize over the downcast is
shown too. Target: each at most 1.5x the cast it replaces. N must be a
multiple of the formats' block size (32; 16 for nvfp4 alone).

With ``--tuning``, it times instead each flag of
:mod:`jaxfp8._src.mx.tuning` both ways (the conversion it changes, in the
formats it affects, every program compiled ahead and timed round-robin in
the same run), to see which form the installed JAX wants.
"""
from __future__ import annotations

import argparse
import math

import jax
import jax.numpy as jnp

from jaxfp8 import mx
from jaxfp8._src.mx import tuning
from jaxfp8.tools import timing
from jaxfp8.tools.options import int_at_least

# Each conversion at most this many times the plain cast it replaces.
_TARGET = 1.5

# Each flag of jaxfp8._src.mx.tuning: the conversion it changes, and the
# formats it changes it for.
_TUNED = {
    "PACK_6BIT_IN_BRANCH": ("quantize", ("mxfp6_e2m3", "mxfp6_e3m2")),
    "PACK_6BIT_AS_RUNS": ("quantize", ("mxfp6_e2m3", "mxfp6_e3m2")),
    "UNPACK_6BIT_FROM_WORDS": ("dequantize", ("mxfp6_e2m3", "mxfp6_e3m2")),
    "MAX_OF_ROW_PAIRS": ("quantize", ("nvfp4",)),
}


def _compiled(flag: str, value: bool, op: str, x: jax.Array, fmt: str):
  """``op`` of ``x`` in ``fmt`` compiled with ``tuning.<flag>`` = value
  (the flags are read when tracing: caches cleared before and after)."""
  old = getattr(tuning, flag)
  setattr(tuning, flag, value)
  jax.clear_caches()
  try:
    if op == "quantize":
      return jax.jit(lambda v: mx.quantize(v, fmt).data).lower(x).compile()
    q = mx.quantize(x, fmt)
    compiled = jax.jit(lambda a: a.dequantize()).lower(q).compile()
    return lambda _: compiled(q)
  finally:
    setattr(tuning, flag, old)
    jax.clear_caches()


def _tuning(x: jax.Array, repeats: int) -> None:
  """Times each tuning flag both ways; prints a table."""
  fns, rows = {}, []
  for flag, (op, fmts) in _TUNED.items():
    for fmt in fmts:
      for value in (True, False):
        run = _compiled(flag, value, op, x, fmt)
        fns[(flag, fmt, value)] = (lambda r=run: r(x))
  med = timing.interleaved_medians(fns, repeats=repeats, warmup=2)
  for flag, (op, fmts) in _TUNED.items():
    for fmt in fmts:
      on, off = med[(flag, fmt, True)], med[(flag, fmt, False)]
      rows.append([flag, f"{op} {fmt}", f"{on * 1e3:.2f}", f"{off * 1e3:.2f}",
                   f"{on / off:.2f}x", str(getattr(tuning, flag))])
  print(f"# MX tuning flags, {x.shape[0]}x{x.shape[1]} float32, jax "
        f"{jax.__version__}, {jax.default_backend()}, "
        f"{timing.cpu_name()}; medians in ms, "
        f"same run\n")
  print(timing.markdown_table(
      ["flag", "conversion", "True", "False", "True / False",
       "this JAX's setting"], rows))


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="jaxfp8 bench mx")
  parser.add_argument("--size", type=int_at_least(1), default=4096,
                      help="the tensor is size x size float32; a multiple of "
                      "the formats' block size (32; 16 for nvfp4 alone)")
  parser.add_argument("--repeats", type=int_at_least(1), default=11,
                      help="timed rounds (the median is reported)")
  parser.add_argument("--formats", default=",".join(mx.MX_FORMATS),
                      help="comma-separated MX formats (default: all)")
  parser.add_argument("--tuning", action="store_true",
                      help="time each flag of jaxfp8._src.mx.tuning both "
                      "ways instead (--formats is ignored)")
  args = parser.parse_args(argv)
  names = [f.strip() for f in args.formats.split(",") if f.strip()]
  if not names:
    parser.error(f"argument --formats: expected comma-separated MX formats "
                 f"({', '.join(mx.MX_FORMATS)}), got {args.formats!r}")
  blocks = {}
  for name in names:
    try:
      blocks[name] = mx.get_format(name, arg="--formats",
                                   fn="bench mx").block_size
    except ValueError as e:
      parser.error(str(e))
  block = math.lcm(*blocks.values())
  if args.size % block:
    parser.error(f"argument --size: must be a multiple of {block}, the block "
                 f"size of the chosen formats, got {args.size}")

  x = jax.random.normal(jax.random.key(0), (args.size, args.size),
                        jnp.float32)
  if args.tuning:
    _tuning(x, args.repeats)
    return 0
  cast = jax.jit(lambda v: v.astype(jnp.float8_e4m3fn))
  upcast = jax.jit(lambda v: v.astype(jnp.float32))
  y8 = cast(x)
  fns = {"cast": lambda: cast(x), "upcast": lambda: upcast(y8)}
  quantized = {}
  for name in names:
    quantized[name] = mx.quantize(x, name)
    fns[f"q:{name}"] = (lambda n=name: mx.quantize(x, n).data)
    fns[f"d:{name}"] = (lambda n=name: quantized[n].dequantize())
  med = timing.interleaved_medians(fns, repeats=args.repeats, warmup=2)

  rows = []
  for name in names:
    q = med[f"q:{name}"] / med["cast"]
    d = med[f"d:{name}"] / med["upcast"]
    rows.append([name, f"{q:.2f}x", f"{d:.2f}x",
                 f"{med[f'd:{name}'] / med['cast']:.2f}x",
                 "yes" if max(q, d) <= _TARGET else "no"])
  print(f"# MX quantize/dequantize, {args.size}x{args.size} float32, "
        f"jax {jax.__version__}, {jax.default_backend()}, "
        f"{timing.cpu_name()}")
  print(f"cast {med['cast'] * 1e3:.1f} ms, upcast {med['upcast'] * 1e3:.1f} "
        "ms (medians); ratios: median time over the same-run median of "
        "x.astype(float8_e4m3fn) for quantize, of its upcast fp8 -> float32 "
        f"for dequantize; target <= {_TARGET}x\n")
  print(timing.markdown_table(
      ["format", "quantize / cast", "dequantize / upcast",
       "dequantize / cast", f"<= {_TARGET}x"], rows))
  return 0
