"""Neuroevolution with an fp8 population: OpenAI-ES trains a small MLP.

The task is generated here: regress a smooth 2-D function from 512 noisy
points (noise std 0.2: the loss can't go much below 0.04).
The same evolution strategy runs twice from the same start and keys, once
with its population of perturbations in float32 and once in float8_e4m3fn
(drawn by ``jaxfp8.random.normal``'s exact sampler). It prints each run's
population memory, sampling throughput and training speed, and ends with::

  final_loss fp32=<float> fp8=<float> initial=<float>

Run ``python examples/neuroevolution.py --quick`` (under a minute on 2 CPU
cores) or without ``--quick`` for a wider network and a larger population.
"""
from __future__ import annotations

import argparse
import time

import jax
from jax.flatten_util import ravel_pytree
import jax.numpy as jnp
import optax

import jaxfp8
from jaxfp8.tools.timing import median_seconds


def make_task(key, n_points: int, noise: float = 0.2):
  """Inputs on [-2, 2]^2; a smooth target with bumps, measured with noise.

  The noise (variance ``noise**2``) puts a floor under the loss that both
  runs approach, so their comparison is not decided by which local basin a
  particular noise stream finds.
  """
  x = jax.random.uniform(key, (n_points, 2), minval=-2.0, maxval=2.0)
  y = jnp.sin(1.5 * x[:, 0]) * jnp.cos(x[:, 1]) + 0.3 * x[:, 0] * x[:, 1]
  y = y + noise * jax.random.normal(jax.random.fold_in(key, 1), y.shape)
  return x, y


def init_mlp(key, sizes):
  params = []
  for k, (n_in, n_out) in zip(jax.random.split(key, len(sizes) - 1),
                              zip(sizes[:-1], sizes[1:])):
    w = jax.random.normal(k, (n_in, n_out)) / jnp.sqrt(n_in)
    params.append((w, jnp.zeros(n_out)))
  return params


def mlp(params, x):
  for w, b in params[:-1]:
    x = jnp.tanh(x @ w + b)
  w, b = params[-1]
  return (x @ w + b)[..., 0]


def train(name, dtype, flat0, loss, args):
  """Runs OpenAI-ES; returns the final loss of the mean and speed figures."""
  schedule = optax.cosine_decay_schedule(args.lr, args.generations, alpha=0.05)
  strategy = jaxfp8.es.OpenAIES(
      popsize=args.popsize, optimizer=optax.adam(schedule), sigma=args.sigma,
      dtype=dtype, sigma_decay=args.sigma_decay, sigma_min=0.01)
  batched_loss = jax.vmap(loss)

  def generation(state, key):
    eps = strategy.ask(key, state)
    fitness = batched_loss(strategy.candidates(state, eps))
    return strategy.tell(state, eps, fitness), jnp.min(fitness)

  @jax.jit
  def run(state, keys):
    return jax.lax.scan(generation, state, keys)

  keys = jax.random.split(jax.random.key(args.seed), args.generations)
  state = strategy.init(flat0)
  jax.block_until_ready(run(state, keys[:1]))  # compile
  t0 = time.perf_counter()
  state, best = jax.block_until_ready(run(state, keys))
  train_s = time.perf_counter() - t0

  ask = jax.jit(strategy.ask)
  eps = ask(keys[0], state)
  ask_s = median_seconds(lambda: ask(keys[0], state), repeats=9, warmup=2)
  samples = args.popsize * flat0.size
  final = float(loss(state.mean))
  print(f"{name:>5}: population {samples * eps.dtype.itemsize / 2**20:7.2f} MiB"
        f" ({eps.dtype})  sampling {samples / ask_s / 1e6:8.1f} M samples/s"
        f"  training {args.generations / train_s:6.1f} generations/s"
        f"  final loss {final:.5f} (best member in last gen {float(best[-1]):.5f})")
  return final


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true",
                      help="a small run: under a minute on 2 CPU cores")
  parser.add_argument("--popsize", type=int, default=None)
  parser.add_argument("--generations", type=int, default=None)
  parser.add_argument("--hidden", type=int, default=None)
  parser.add_argument("--lr", type=float, default=0.03)
  parser.add_argument("--sigma", type=float, default=0.05)
  parser.add_argument("--sigma-decay", type=float, default=0.999)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args(argv)
  quick = dict(popsize=256, generations=400, hidden=16)
  full = dict(popsize=2048, generations=2000, hidden=48)
  for k, v in (quick if args.quick else full).items():
    if getattr(args, k) is None:
      setattr(args, k, v)

  k_task, k_init = jax.random.split(jax.random.key(1234))
  x, y = make_task(k_task, 512)
  params0 = init_mlp(k_init, [2, args.hidden, args.hidden, 1])
  flat0, unravel = ravel_pytree(params0)

  def loss(flat):
    return jnp.mean((mlp(unravel(flat), x) - y) ** 2)

  initial = float(loss(flat0))
  print(f"MLP 2-{args.hidden}-{args.hidden}-1: {flat0.size} parameters, "
        f"popsize {args.popsize}, {args.generations} generations, "
        f"initial loss {initial:.5f}")
  fp32 = train("fp32", jnp.float32, flat0, loss, args)
  fp8 = train("fp8", jnp.float8_e4m3fn, flat0, loss, args)
  print(f"final_loss fp32={fp32:.6f} fp8={fp8:.6f} initial={initial:.6f}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
