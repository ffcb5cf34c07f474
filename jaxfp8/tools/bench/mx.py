"""``python -m jaxfp8 bench mx``: MX quantize/dequantize against a plain cast.

Times, per format, ``jaxfp8.mx.quantize`` and ``MXArray.dequantize`` of an
N x N float32 tensor, as ratios against ``x.astype(jnp.float8_e4m3fn)`` timed
round-robin in the same run (and, for dequantize, also against
``y.astype(jnp.float32)`` of an fp8 array). Target: <= 3x the plain cast.
N must be a multiple of the formats' block size (32; 16 for nvfp4 alone).
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


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="jaxfp8 bench mx")
  parser.add_argument("--size", type=int_at_least(1), default=4096,
                      help="the tensor is size x size float32; a multiple of "
                      "the formats' block size (32; 16 for nvfp4 alone)")
  parser.add_argument("--repeats", type=int_at_least(1), default=5)
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
    q, d = med[f"q:{name}"] / med["cast"], med[f"d:{name}"] / med["cast"]
    rows.append([name, f"{q:.2f}x", f"{d:.2f}x",
                 f"{med[f'd:{name}'] / med['upcast']:.2f}x",
                 "yes" if max(q, d) <= 3 else "no"])
  print(f"# MX quantize/dequantize, {args.size}x{args.size} float32, "
        f"jax {jax.__version__}, {jax.default_backend()}, "
        f"{platform.processor() or platform.machine()}")
  print("ratios: median time over the same-run median of "
        "x.astype(float8_e4m3fn) (and of fp8 -> float32 for the 'vs upcast' "
        "column); target <= 3x\n")
  print(timing.markdown_table(
      ["format", "quantize / cast", "dequantize / cast",
       "dequantize / upcast", "<= 3x"], rows))
  return 0
