"""``python -m jaxfp8 bench fsdp``: what an FSDP step gathers, per recipe.

Compiles (no run) the training step of ``--layers`` Dense layers
``width x width`` (GELU between them, mean squared error; the loss and the
gradient of every weight, and the next state for delayed scaling) on a
``batch x width`` input, with every weight split by rows over ``--devices``
devices (FSDP) and the batch split alike, once per recipe, and reads the
bytes of its collectives from the compiled program
(:func:`jaxfp8.tools.collectives.collective_bytes`): the all-gathers that
assemble the weights, and the all-reduces. Each recipe compiles twice: as
XLA gathers by itself (the float32 weight, quantized after the gather), and
with ``rhs_sharding=P()`` (the weight quantized in its shards, its codes
and scales gathered: "narrow"). The ratio is a step's all-gather bytes over
those of the same step with plain float32 GEMMs. The figures come from the
program, not a clock: deterministic.

It needs ``--devices`` devices: with fewer (a CPU host, one GPU), it runs
itself again in a subprocess on that many simulated CPU devices, whose
SPMD partitioner decides the collectives as on any backend.

The targets are those of issue #41 (the gather should move codes and
scales, not float32): fp8_current, fp8_delayed and fp8_blockwise <= 0.27,
mxfp8 <= 0.53 (two orientations), nvfp4 <= 0.16.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # pylint: disable=g-multiple-import
import numpy as np

from jaxfp8 import recipes
from jaxfp8.tools import timing
from jaxfp8.tools.bench import train
from jaxfp8.tools.collectives import collective_bytes
from jaxfp8.tools.options import int_at_least

RECIPES = ("bf16", "fp8_current", "fp8_delayed", "fp8_blockwise", "mxfp8",
           "nvfp4", "nvfp4_1d_weights")
TARGETS = {"fp8_current": 0.27, "fp8_delayed": 0.27, "fp8_blockwise": 0.27,
           "mxfp8": 0.53, "nvfp4": 0.16}
_CHILD = "JAXFP8_BENCH_FSDP_CHILD"


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="jaxfp8 bench fsdp")
  p.add_argument("--width", type=int_at_least(16), default=1024,
                 help="input and output width of every layer; a multiple "
                      "of 16 times --devices")
  p.add_argument("--batch", type=int_at_least(16), default=256,
                 help="rows of the input; a multiple of 16 times --devices")
  p.add_argument("--layers", type=int_at_least(1), default=2)
  p.add_argument("--devices", type=int_at_least(2), default=4)
  p.add_argument("--recipes", type=train.recipe_list, default=list(RECIPES),
                 help="comma-separated recipe names (float32 is always "
                      "compiled: the baseline)")
  p.add_argument("--quick", action="store_true",
                 help="a smoke test: width 256, batch 128, fp8_current and "
                      "nvfp4")
  return p


def _measure(args) -> dict[tuple[str, bool], dict[str, int]]:
  """``{(recipe, narrow): collective_bytes}`` of each recipe's compiled FSDP
  step, as XLA gathers (narrow False) and with ``rhs_sharding=P()``."""
  mesh = Mesh(np.array(jax.devices()[:args.devices]), ("data",))
  rows, whole = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
  spec = lambda shape, s: jax.ShapeDtypeStruct(shape, jnp.float32, sharding=s)
  x = spec((args.batch, args.width), rows)
  ws = [spec((args.width, args.width), rows) for _ in range(args.layers)]
  out = {}
  for name in ["float32"] + [n for n in args.recipes if n != "float32"]:
    recipe = None if name == "float32" else recipes.get_recipe(name)
    states = [None if recipe is None else jax.tree_util.tree_map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=whole),
        recipes.init_state(recipe)) for _ in ws]
    for narrow in (False,) if recipe is None else (False, True):
      step = train.training_step(recipe, args.layers,
                                 rhs_sharding=whole if narrow else None)
      compiled = step.lower(ws, states, x, x).compile()
      out[name, narrow] = collective_bytes(compiled)
  return out


def main(argv: list[str] | None = None) -> int:
  parser = _parser()
  args = parser.parse_args(argv)
  if args.quick:
    args.width, args.batch, args.recipes = 256, 128, ["fp8_current", "nvfp4"]
  for name in ("width", "batch"):
    if getattr(args, name) % (16 * args.devices):
      parser.error(f"argument --{name}: must be a multiple of 16 x "
                   f"--devices = {16 * args.devices}, got "
                   f"{getattr(args, name)}")
  # The device count is fixed when the backend starts (here, at the
  # latest): with too few, a subprocess on simulated CPU devices.
  if jax.device_count() < args.devices:
    if os.environ.get(_CHILD):
      parser.error(f"argument --devices: {args.devices} devices asked, "
                   f"{jax.device_count()} present")
    env = dict(os.environ, JAX_PLATFORMS="cpu", **{_CHILD: "1"})
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_"
                        f"platform_device_count={args.devices}")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:2] != ["bench", "fsdp"]:
      argv = ["bench", "fsdp"] + argv
    return subprocess.run([sys.executable, "-m", "jaxfp8"] + argv,
                          env=env, check=False).returncode
  got = _measure(args)
  base = got["float32", False]["all-gather"]
  print(f"# FSDP step: {args.layers} Dense layers {args.width} x "
        f"{args.width}, batch {args.batch}, weights and batch split by rows "
        f"over {args.devices} devices; jax {jax.__version__}, "
        f"{jax.default_backend()} (compiled, not run)")
  print("bytes of each kind of collective's results on one device, from "
        "the compiled program; ratio: all-gather bytes over the float32 "
        "step's\n")
  rows = []
  for (name, narrow), b in got.items():
    ratio = b["all-gather"] / base if base else float("nan")
    target = TARGETS.get(name) if narrow else None
    rows.append([name, "narrow" if narrow else "XLA",
                 f"{b['all-gather'] / 1e6:.3f}",
                 f"{b['all-reduce'] / 1e6:.3f}", f"{ratio:.2f}",
                 "-" if target is None else f"<= {target:.2f}"
                 + (" met" if ratio <= target else " not met")])
  print(timing.markdown_table(
      ["recipe", "weights gathered", "all-gather MB", "all-reduce MB",
       "gather ratio", "target"], rows))
  return 0
