"""``python -m jaxfp8 bench mx``: MX quantize/dequantize against a plain cast.

Times, per format, ``jaxfp8.mx.quantize`` and ``MXArray.dequantize`` of an
N x N float32 tensor against the casts they replace, timed round-robin in the
same run (a fresh order each round): quantize against
``x.astype(jnp.float8_e4m3fn)`` (both read 4 bytes and write about 1 per
element), dequantize against the upcast ``y.astype(jnp.float32)`` of that
fp8 array (both read about 1 and write 4); dequantize over the downcast is
shown too. Target: each at most 1.5x the cast it replaces. N must be a
multiple of the formats' block size (32; 16 for nvfp4 alone).
"""
from __future__ import annotations

import argparse
import math
import platform

import jax
import jax.numpy as jnp

from jaxfp8 import mx
from jaxfp8.tools import timing
from jaxfp8.tools.options import int_at_least

# Each conversion at most this many times the plain cast it replaces.
_TARGET = 1.5


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="jaxfp8 bench mx")
  parser.add_argument("--size", type=int_at_least(1), default=4096,
                      help="the tensor is size x size float32; a multiple of "
                      "the formats' block size (32; 16 for nvfp4 alone)")
  parser.add_argument("--repeats", type=int_at_least(1), default=11,
                      help="timed rounds (the median is reported)")
  parser.add_argument("--formats", default=",".join(mx.MX_FORMATS),
                      help="comma-separated MX formats (default: all)")
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
        f"{platform.processor() or platform.machine()}")
  print(f"cast {med['cast'] * 1e3:.1f} ms, upcast {med['upcast'] * 1e3:.1f} "
        "ms (medians); ratios: median time over the same-run median of "
        "x.astype(float8_e4m3fn) for quantize, of its upcast fp8 -> float32 "
        f"for dequantize; target <= {_TARGET}x\n")
  print(timing.markdown_table(
      ["format", "quantize / cast", "dequantize / upcast",
       "dequantize / cast", f"<= {_TARGET}x"], rows))
  return 0
