"""Trains an MLP in bf16 and in MXFP8, then serves it from packed MX weights.

The data is made here: inputs are standard normal, targets come from a fixed
random "teacher" MLP plus a little noise. The student, a Flax linen MLP
32-128-128-8, is trained with optax Adam three times from the same initial
weights and batches:

* ``bf16``: parameters in float32, every layer multiplying in bfloat16;
* ``mxfp8``: the unchanged model under ``jaxfp8.recipes.linen_recipe("mxfp8")``: every
  Dense runs its forward, input-gradient and weight-gradient GEMMs with
  mxfp8_e4m3 operands (each blocked along that GEMM's contracting axis,
  round-up "rceil" scales);
* ``mxfp8_hp_wgrad``: the same with the weight gradient in high precision.

The MXFP8-trained parameters are then packed once
(``jaxfp8.mx.quantize_params``) into mxfp4_e2m1 and mxfp8_e4m3 kernels and
the same model is applied straight from the packed tree under
``jaxfp8.recipes.linen_recipe`` (weight-only; activations in float32): the kernels
stay MXArrays and each Dense multiplies through ``jaxfp8.recipes.dot_general``.

Usage::

    python examples/mx_train.py --steps 400

The last line printed is ``final_loss bf16=... mxfp8=... mxfp8_hp_wgrad=...
serve_mxfp4=... serve_mxfp8=...``: the mean squared error of each model on
held-out data. A line before it gives the bytes of the served kernels.
"""
from __future__ import annotations

import argparse
import time

from flax import linen as nn
import jax
import jax.numpy as jnp
from jax import lax
import optax

from jaxfp8 import mx
from jaxfp8 import recipes

WIDTHS = (128, 128, 8)
IN = 32


def bf16_dot(lhs, rhs, dims, precision=None, preferred_element_type=None,
             **kwargs):
  del precision, preferred_element_type, kwargs
  return lax.dot_general(lhs.astype(jnp.bfloat16), rhs.astype(jnp.bfloat16),
                         dims, preferred_element_type=jnp.float32)


class MLP(nn.Module):
  dot_general: object = None

  @nn.compact
  def __call__(self, x):
    for i, w in enumerate(WIDTHS):
      x = nn.Dense(w, dot_general=self.dot_general, name=f"dense{i}")(x)
      if i < len(WIDTHS) - 1:
        x = nn.gelu(x)
    return x


def make_data(n_train: int, n_test: int):
  teacher = MLP()
  k = jax.random.split(jax.random.key(1234), 4)
  tparams = teacher.init(k[0], jnp.zeros((1, IN)))
  xtr = jax.random.normal(k[1], (n_train, IN))
  xte = jax.random.normal(k[2], (n_test, IN))
  f = lambda x: teacher.apply(tparams, x)
  ytr = f(xtr) + 0.01 * jax.random.normal(k[3], (n_train, WIDTHS[-1]))
  return (xtr, ytr), (xte, f(xte))


def train(mode: str, params, data, steps: int, batch: int):
  """Trains under ``mode`` ("bf16" or an MX recipe name); returns params."""
  model = MLP(dot_general=bf16_dot) if mode == "bf16" else MLP()
  opt = optax.adam(3e-3)
  (x, y), n = data, data[0].shape[0]

  def apply(p, xb):
    if mode == "bf16":
      return model.apply(p, xb)
    with recipes.linen_recipe(mode):
      return model.apply(p, xb)

  @jax.jit
  def step(p, s, i):
    idx = jax.random.randint(jax.random.fold_in(jax.random.key(7), i),
                             (batch,), 0, n)
    loss = lambda q: jnp.mean((apply(q, x[idx]) - y[idx]) ** 2)
    _, g = jax.value_and_grad(loss)(p)
    u, s = opt.update(g, s, p)
    return optax.apply_updates(p, u), s

  state = opt.init(params)
  for i in range(steps):
    params, state = step(params, state, i)
  return params, jax.jit(apply)


def mse(apply, params, xy) -> float:
  x, y = xy
  return float(jnp.mean((apply(params, x) - y) ** 2))


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="examples/mx_train.py")
  parser.add_argument("--steps", type=int, default=400)
  parser.add_argument("--batch", type=int, default=128)
  args = parser.parse_args(argv)
  t0 = time.time()
  train_xy, test_xy = make_data(4096, 1024)
  params0 = MLP().init(jax.random.key(0), jnp.zeros((1, IN)))
  losses, trained = {}, {}
  for mode in ("bf16", "mxfp8", "mxfp8_hp_wgrad"):
    p, apply = train(mode, params0, train_xy, args.steps, args.batch)
    trained[mode] = p
    losses[mode] = mse(apply, p, test_xy)
  model = MLP()

  @jax.jit
  def serve(packed, x):
    # Straight from the packed tree: each Dense multiplies its MXArray
    # kernel through recipes.dot_general (weight-only: a rule of None).
    with recipes.linen_recipe([(".*", None)]):
      return model.apply(packed, x)

  for fmt, name in (("mxfp4_e2m1", "serve_mxfp4"),
                    ("mxfp8_e4m3", "serve_mxfp8")):
    packed = mx.quantize_params(trained["mxfp8"], fmt)
    kernels = [v["kernel"] for v in packed["params"].values()]
    nbytes = sum(k.nbytes for k in kernels)
    n = sum(k.size for k in kernels)
    print(f"{name}: kernels {nbytes} bytes for {n} weights "
          f"({nbytes / n:.3f} B/weight; bf16 {2 * n} bytes, "
          f"{nbytes / (2 * n):.3f}x)")
    losses[name] = mse(serve, packed, test_xy)
  print(f"ratio mxfp8/bf16={losses['mxfp8'] / losses['bf16']:.3f} "
        f"serve_mxfp4/mxfp8={losses['serve_mxfp4'] / losses['mxfp8']:.3f} "
        f"time={time.time() - t0:.1f}s")
  print("final_loss " + " ".join(f"{k}={losses[k]:.5f}" for k in (
      "bf16", "mxfp8", "mxfp8_hp_wgrad", "serve_mxfp4", "serve_mxfp8")))
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
