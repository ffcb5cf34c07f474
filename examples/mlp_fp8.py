"""Trains an MLP in bf16 and with fp8 matmuls (delayed scaling); compares losses.

The data is made here: inputs are standard normal, targets come from a fixed
random "teacher" MLP plus a little noise. The student is a Flax linen MLP
trained with optax Adam, twice from the same initial weights and batches:

* ``bf16``: parameters in float32, every layer computing in bfloat16;
* ``fp8``: the same, but each ``nn.Dense`` multiplies through
  ``jaxfp8.policy.Fp8DotGeneral``: inputs and kernels cast to e4m3, output
  gradients to e5m2, with delayed scaling (amax history of 16 steps) kept in
  the ``_overwrite_with_gradient`` collection.

Usage::

    python examples/mlp_fp8.py --steps 300

The last line printed is ``final_loss fp8=<float> bf16=<float>``: the mean
squared error of each trained model on held-out data.
"""
from __future__ import annotations

import argparse
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

import jaxfp8.policy

IN_DIM, HIDDEN, OUT_DIM = 32, 128, 8
BATCH, EVAL = 256, 4096


class MLP(nn.Module):
  hidden: int = HIDDEN
  out: int = OUT_DIM
  fp8: bool = False

  @nn.compact
  def __call__(self, x):
    dot = jaxfp8.policy.Fp8DotGeneral if self.fp8 else None
    for _ in range(2):
      x = nn.gelu(nn.Dense(self.hidden, dtype=jnp.bfloat16,
                           dot_general_cls=dot)(x))
    return nn.Dense(self.out, dtype=jnp.bfloat16, dot_general_cls=dot)(x)


def _teacher(key):
  k1, k2 = jax.random.split(key)
  w1 = jax.random.normal(k1, (IN_DIM, 64)) / jnp.sqrt(IN_DIM)
  w2 = jax.random.normal(k2, (64, OUT_DIM)) / jnp.sqrt(64.0)
  return lambda x: jnp.tanh(x @ w1) @ w2 * 2.0


def make_data(seed: int = 0):
  """(teacher, batch sampler, held-out inputs, held-out targets)."""
  key = jax.random.key(seed)
  k_teacher, k_eval, k_noise = jax.random.split(key, 3)
  teacher = _teacher(k_teacher)
  x_eval = jax.random.normal(k_eval, (EVAL, IN_DIM))

  def batch(k):
    kx, kn = jax.random.split(k)
    x = jax.random.normal(kx, (BATCH, IN_DIM))
    return x, teacher(x) + 0.01 * jax.random.normal(kn, (BATCH, OUT_DIM))

  return batch, x_eval, teacher(x_eval)


def train(steps: int, *, fp8: bool, seed: int = 0,
          learning_rate: float = 3e-3) -> float:
  """Trains for ``steps`` Adam steps; returns the held-out mean squared error."""
  batch, x_eval, y_eval = make_data(seed)
  model = MLP(fp8=fp8)
  variables = model.init(jax.random.key(seed + 1), x_eval[:1])
  params, fp8_state = jaxfp8.policy.split_overwrite_with_gradient(variables)
  tx = optax.adam(optax.cosine_decay_schedule(learning_rate, max(steps, 1)))
  opt_state = tx.init(params)

  def loss_fn(params, fp8_state, x, y):
    variables = dict(params)
    if fp8_state is not None:
      variables[jaxfp8.policy.OVERWRITE_WITH_GRADIENT] = fp8_state
    pred = model.apply(variables, x).astype(jnp.float32)
    return jnp.mean((pred - y) ** 2)

  def step(carry, key):
    params, fp8_state, opt_state = carry
    x, y = batch(key)
    # The gradient with respect to the fp8 state is the next state.
    grads, fp8_state = jax.grad(loss_fn, argnums=(0, 1))(params, fp8_state,
                                                          x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), fp8_state, opt_state), None

  keys = jax.random.split(jax.random.key(seed + 2), steps)
  run = jax.jit(lambda carry: jax.lax.scan(step, carry, keys)[0])
  params, fp8_state, _ = run((params, fp8_state, opt_state))
  return float(jax.jit(loss_fn)(params, fp8_state, x_eval, y_eval))


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)
  start = time.perf_counter()
  bf16 = train(args.steps, fp8=False, seed=args.seed)
  mid = time.perf_counter()
  fp8 = train(args.steps, fp8=True, seed=args.seed)
  end = time.perf_counter()
  print(f"steps={args.steps} seconds bf16={mid - start:.1f} fp8={end - mid:.1f}"
        f" fp8/bf16 loss ratio={fp8 / bf16:.4f}")
  print(f"final_loss fp8={fp8:.6g} bf16={bf16:.6g}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
