"""``python -m jaxfp8 bench mx-train``: an MX training step against bf16.

Times one jitted training step (forward, both gradients, Adam update) of a
linen MLP ``width``-``width``-``width``-8 on a batch, as ratios of medians
timed round-robin in the same run against the same step with every Dense
multiplying in bfloat16: the model under ``jaxfp8.recipes.linen_recipe`` with each
recipe (all three GEMMs in MX, on the backend ``jaxfp8.recipes.dot_general`` chooses
here: the Mosaic GPU ``mx_matmul_mgpu`` for mxfp8 on a GPU of compute
capability 9.x, exact dequantize-and-dot elsewhere), and mxfp8 on the other backend (``lax.scaled_dot`` on CPU,
dequantize on GPU). Then the bytes of the served kernels packed by
``jaxfp8.mx.quantize_params`` in each serving format, against bf16 kernels.
"""
from __future__ import annotations

import argparse
import functools

from flax import linen as nn
import jax
import jax.numpy as jnp
from jax import lax
import optax

from jaxfp8 import mx
from jaxfp8 import recipes
from jaxfp8._src.kernels.mx_matmul import api as mx_api
from jaxfp8.tools import timing
from jaxfp8.tools.options import int_at_least

RECIPES = ("mxfp8", "mxfp8_hp_wgrad", "mxfp4_e2m1")
SERVE = ("mxfp8_e4m3", "mxfp6_e2m3", "mxfp4_e2m1", "nvfp4")


def _bf16_dot(lhs, rhs, dims, precision=None, preferred_element_type=None,
              **kwargs):
  del precision, preferred_element_type, kwargs
  return lax.dot_general(lhs.astype(jnp.bfloat16), rhs.astype(jnp.bfloat16),
                         dims, preferred_element_type=jnp.float32)


class _MLP(nn.Module):
  width: int
  dot_general: object = None

  @nn.compact
  def __call__(self, x):
    for i, w in enumerate((self.width, self.width, 8)):
      x = nn.Dense(w, dot_general=self.dot_general, name=f"dense{i}")(x)
      x = nn.gelu(x) if i < 2 else x
    return x


def _step(model, recipe, x, y):
  opt = optax.adam(1e-3)

  def loss(p):
    if recipe is None:
      return jnp.mean((model.apply(p, x) - y) ** 2)
    with recipes.linen_recipe(recipe):
      return jnp.mean((model.apply(p, x) - y) ** 2)

  @jax.jit
  def step(p, s):
    g = jax.grad(loss)(p)
    u, s = opt.update(g, s, p)
    return optax.apply_updates(p, u), s

  return step, opt


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="jaxfp8 bench mx-train")
  parser.add_argument("--width", type=int_at_least(32), default=512,
                      help="hidden and input width of the MLP")
  parser.add_argument("--batch", type=int_at_least(1), default=256)
  parser.add_argument("--repeats", type=int_at_least(1), default=7)
  args = parser.parse_args(argv)
  k = jax.random.split(jax.random.key(0), 3)
  x = jax.random.normal(k[0], (args.batch, args.width))
  y = jax.random.normal(k[1], (args.batch, 8))
  params = _MLP(args.width).init(k[2], x)
  other = "dequantize" if jax.default_backend() == "gpu" else "scaled_dot"
  other_name = f"mxfp8 backend={other}"
  fns = {}
  rows = [("bf16", _MLP(args.width, _bf16_dot), None)] + [
      (r, _MLP(args.width), r) for r in RECIPES] + [
          (other_name, _MLP(args.width, functools.partial(
              recipes.dot_general, recipe="mxfp8", backend=other)), None)]
  for name, model, recipe in rows:
    step, opt = _step(model, recipe, x, y)
    state = opt.init(params)
    fns[name] = (lambda step=step, state=state: step(params, state))
  med = timing.interleaved_medians(fns, repeats=args.repeats, warmup=2)
  print(f"# MX training step, MLP {args.width}-{args.width}-{args.width}-8, "
        f"batch {args.batch}, jax {jax.__version__}, {jax.default_backend()}, "
        f"{timing.cpu_name()}")
  auto = mx_api.mx_backend(jax.default_backend(), "mxfp8_e4m3",
                             block_size=32)
  print("ratios: median step time over the same-run median of the bf16 step "
        f"(the MX recipes on backend={auto}, the automatic choice here)\n")
  print(timing.markdown_table(
      ["recipe", "step ms", "/ bf16"],
      [["bf16", f"{med['bf16'] * 1e3:.2f}", "1.00x"]] + [
          [r, f"{med[r] * 1e3:.2f}", f"{med[r] / med['bf16']:.2f}x"]
          for r in RECIPES + (other_name,)]))
  kernels = {n: v["kernel"] for n, v in params["params"].items()}
  bf16 = sum(v.size * 2 for v in kernels.values())
  rows = [["bf16", bf16, "2.000", "1.00x"]]
  for fmt in SERVE:
    packed = mx.quantize_params(params, fmt)
    nbytes = sum(v["kernel"].nbytes for v in packed["params"].values())
    n = sum(v.size for v in kernels.values())
    rows.append([fmt, nbytes, f"{nbytes / n:.3f}", f"{nbytes / bf16:.3f}x"])
  print("\nserved kernels (packed once by jaxfp8.mx.quantize_params)\n")
  print(timing.markdown_table(["format", "bytes", "bytes/weight", "/ bf16"],
                              rows))
  return 0
