"""``python -m jaxfp8 bench train``: a training step per recipe against bf16.

Times one jitted forward and backward pass (the loss, the gradient of every
weight and, for delayed scaling, the next scaling state) of a stack of
``--layers`` Dense layers ``width x width`` (GELU between them, mean squared
error against a fixed target) on a ``batch x width`` input, with every GEMM
of the step run through ``jaxfp8.recipes.dot_general`` under each named
recipe (``jaxfp8.recipes.get_recipe``). The functions are timed round-robin
in one run, each round in a fresh order (:mod:`jaxfp8.tools.timing`), and
reported as medians and as ratios to the ``bf16`` recipe's median (every
operand of the three GEMMs rounded to bfloat16), with ``float32`` (no
recipe: every GEMM as given) for scale.

Compile time: each step's first call (tracing, lowering, XLA's compile and
one run, with JAX's caches cleared first so that no recipe reuses another's
traced pieces), minus the step's median, also as a ratio to bf16's. The
first calls run in a shuffled order too, before the timed rounds.

``--moe``: the same stack as grouped GEMMs (mixture of experts): each
layer is ``--experts`` weights ``width x width`` and the rows, sorted by
expert, are split among them by fixed uneven group sizes (a multinomial
draw, seed 0); every GEMM of the step runs through
``jaxfp8.recipes.ragged_dot`` (``float32``: ``lax.ragged_dot``).

On a CPU every narrow GEMM is emulated (quantize, exact dequantize, float32
product), so the ratios say what each recipe's quantization costs, not what
it would gain on hardware with narrow tensor cores.
"""
from __future__ import annotations

import argparse
import random
import time

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

from jaxfp8 import recipes
from jaxfp8.tools import timing
from jaxfp8.tools.options import int_at_least

RECIPES = ("fp8_current", "fp8_delayed", "fp8_blockwise", "mxfp8", "nvfp4",
           "nvfp4_no_rht", "nvfp4_no_sr", "nvfp4_1d_weights")
_DIMS = (((1,), (0,)), ((), ()))  # x (batch, in) . w (in, out)


def training_step(recipe, layers: int, *, rhs_sharding=None,
                  group_sizes=None):
  """A jitted ``(weights, states, x, y) -> (loss, grads, next states)``;
  ``rhs_sharding``: the recipes' ``dot_general`` option (the sharding the
  weights are gathered to, narrow); ``group_sizes``: grouped GEMMs
  (weights ``(experts, in, out)``) with these group sizes."""
  key = jax.random.key(1) if recipe is not None and recipe.needs_key else None

  def loss(ws, states, x, y):
    for i, w in enumerate(ws):
      if group_sizes is not None:
        x = (lax.ragged_dot(x, w, group_sizes) if recipe is None else
             recipes.ragged_dot(
                 x, w, group_sizes, recipe=recipe, state=states[i],
                 key=None if key is None else jax.random.fold_in(key, i)))
      elif recipe is None:
        x = jnp.dot(x, w)
      else:
        x = recipes.dot_general(
            x, w, _DIMS, recipe=recipe, state=states[i],
            key=None if key is None else jax.random.fold_in(key, i),
            rhs_sharding=rhs_sharding)
      x = jax.nn.gelu(x) if i < layers - 1 else x
    return jnp.mean((x - y) ** 2)

  # Delayed scaling: the gradient with respect to the state is the next
  # state, so one grad call gives both.
  return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))


def recipe_list(text: str) -> list[str]:
  """``--recipes``: comma-separated names of ``jaxfp8.recipes.RECIPES``."""
  names = [n.strip() for n in text.split(",") if n.strip()]
  bad = [n for n in names if n not in recipes.RECIPES]
  if not names or bad:
    raise argparse.ArgumentTypeError(
        f"expected comma-separated recipe names of jaxfp8.recipes.RECIPES "
        f"({', '.join(recipes.RECIPES)}), got {text!r}")
  return names


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="jaxfp8 bench train")
  parser.add_argument("--width", type=int_at_least(16), default=512,
                      help="input and output width of every layer; a "
                           "multiple of 16")
  parser.add_argument("--batch", type=int_at_least(16), default=256,
                      help="rows of the input; a multiple of 16 (the "
                           "Hadamard transform of nvfp4 works on 16-row "
                           "chunks of the weight-gradient GEMM)")
  parser.add_argument("--layers", type=int_at_least(1), default=3)
  parser.add_argument("--recipes", type=recipe_list, default=list(RECIPES),
                      help="comma-separated recipe names (bf16 and float32 "
                           "are always timed)")
  parser.add_argument("--repeats", type=int_at_least(1), default=7)
  parser.add_argument("--moe", action="store_true",
                      help="grouped GEMMs (jaxfp8.recipes.ragged_dot): each "
                           "layer EXPERTS weights, the rows split among "
                           "them unevenly")
  parser.add_argument("--experts", type=int_at_least(1), default=8,
                      help="experts per layer under --moe")
  parser.add_argument("--quick", action="store_true",
                      help="a smoke test: width 64, batch 32, 2 layers, "
                           "one timed round")
  args = parser.parse_args(argv)
  if args.quick:
    args.width, args.batch, args.layers, args.repeats = 64, 32, 2, 1
  for name in ("width", "batch"):
    if getattr(args, name) % 16:
      parser.error(f"argument --{name}: must be a multiple of 16, got "
                   f"{getattr(args, name)}")
  k = jax.random.split(jax.random.key(0), args.layers + 2)
  x = jax.random.normal(k[0], (args.batch, args.width))
  y = jax.random.normal(k[1], (args.batch, args.width))
  shape = ((args.experts,) if args.moe else ()) + (args.width, args.width)
  ws = [jax.random.normal(ki, shape) / args.width ** 0.5 for ki in k[2:]]
  sizes = None
  if args.moe:  # rows per expert: fixed, uneven
    sizes = jnp.asarray(np.random.default_rng(0).multinomial(
        args.batch, [1 / args.experts] * args.experts), jnp.int32)
  names = ["float32", "bf16"] + [n for n in args.recipes
                                 if n not in ("float32", "bf16")]
  fns, first = {}, {}
  order = list(names)
  random.Random(0).shuffle(order)
  for name in order:
    recipe = None if name == "float32" else recipes.get_recipe(name)
    states = [None if recipe is None else recipes.init_state(
        recipe, experts=args.experts if args.moe else None) for _ in ws]
    jax.clear_caches()
    t0 = time.perf_counter()
    step = training_step(recipe, args.layers, group_sizes=sizes).lower(
        ws, states, x, y).compile()
    jax.block_until_ready(step(ws, states, x, y))
    first[name] = time.perf_counter() - t0
    fns[name] = (lambda step=step, states=states: step(ws, states, x, y))
  med = timing.interleaved_medians(fns, repeats=args.repeats,
                                   warmup=1 if args.quick else 2)
  comp = {n: max(first[n] - med[n], 0.0) for n in names}
  what = (f"{args.layers} grouped layers of {args.experts} experts "
          f"{args.width} x {args.width} (rows per expert "
          f"{np.asarray(sizes).tolist()})" if args.moe else
          f"{args.layers} Dense layers {args.width} x {args.width}")
  print(f"# training step (forward + backward), {what}, batch {args.batch}, jax "
        f"{jax.__version__}, {jax.default_backend()}, "
        f"{timing.cpu_name()}")
  print("ratios: median step time over the same-run median of the bf16 "
        f"step ({args.repeats} rounds, each in a fresh order); compile: "
        "first call (caches cleared) minus the median\n")
  print(timing.markdown_table(
      ["recipe", "step ms", "/ bf16", "compile s", "/ bf16"],
      [[n, f"{med[n] * 1e3:.2f}", f"{med[n] / med['bf16']:.2f}x",
        f"{comp[n]:.2f}", f"{comp[n] / comp['bf16']:.2f}x"]
       for n in names]))
  return 0
