"""Evolve a spiking policy for CartPole with an fp8 evosax population.

A spyx network (Flax NNX: ``nnx.Linear`` -> ``spyx.nn.LIF`` ->
``nnx.Linear`` -> ``spyx.nn.LI``) balances gymnax's ``CartPole-v1`` (at
most 500 steps, return = steps balanced). Each environment step, the
observation is current-encoded: scaled, it is the input current of the
first layer for a few SNN time steps (``spyx.nn.run``, a ``lax.scan``), and
the action is the argmax of the LI read-out's membrane at the last one.

evosax's OpenAI-ES (``Open_ES``) trains it twice from the same start (same
initial mean, same keys, same hyperparameters):

- ``fp32``: evosax as it is, population size P: ``ask`` returns the float32
  population, held until ``tell``;
- ``fp8``: the same strategy with population size 2P, wrapped by
  ``jaxfp8.es.EvosaxStrategy``: the Gaussian noise is drawn in
  float8_e4m3fn by jaxfp8's exact sampler and held in fp8 between ``ask``
  and ``tell``, and ``jaxfp8.es.evaluate`` builds float32 members from it
  P at a time. Twice the population in half the bytes.

It prints each run's progress, the population memory held between ``ask``
and ``tell`` (bytes) and the sampling (``ask``) time per generation, and
ends with::

  final_return fp32=<float> fp8=<float> fp8_popsize=<int> fp32_popsize=<int>

where a final return is the mean return of the final *mean* policy (the
strategy's mean, not the best member seen) over a fixed set of evaluation
episodes, the same for both runs. It writes a PNG of the mean policy's
return per generation (``--out``).

Run ``python examples/evolve_snn.py --quick`` (a few generations, tiny) or
without it for the full run. Needs evosax, spyx, gymnax (and six):
``pip install -e ".[es]"``.
"""
from __future__ import annotations

import argparse
import functools
import time

import jax
from jax.flatten_util import ravel_pytree
import jax.numpy as jnp
import numpy as np
import optax

try:
  from evosax.algorithms import Open_ES
  from flax import nnx
  import gymnax
  import spyx
except ImportError as e:  # pragma: no cover - the message is the point
  raise SystemExit(f"examples/evolve_snn.py needs evosax, spyx and gymnax "
                   f"(pip install -e \".[es]\"): {e}") from e

import jaxfp8
from jaxfp8.tools.timing import median_seconds

# Observation (x, x_dot, theta, theta_dot) to input currents of order one:
# the pole fails at |theta| = 0.21 rad, the cart at |x| = 2.4.
OBS_SCALE = jnp.array([1.0, 1.0, 10.0, 2.0])


def make_policy(hidden: int, seed: int):
  """The spiking network's structure and its initial float32 parameters as
  one flat vector (the ES's search space: weights, biases and decays)."""
  rngs = nnx.Rngs(seed)
  model = spyx.nn.Sequential(
      nnx.Linear(4, hidden, rngs=rngs),
      spyx.nn.LIF((hidden,), beta=0.8, rngs=rngs),
      nnx.Linear(hidden, 2, rngs=rngs),
      spyx.nn.LI((2,), beta=0.8, rngs=rngs))
  graphdef, params = nnx.split(model, nnx.Param)
  flat, unravel = ravel_pytree(params)
  return graphdef, flat, unravel


def make_rollout(graphdef, unravel, snn_steps: int, max_steps: int):
  """``rollout(flat_params, key) -> return`` of one CartPole episode."""
  env, env_params = gymnax.make("CartPole-v1")

  def rollout(flat, key):
    model = nnx.merge(graphdef, unravel(flat))

    def act(obs):
      current = jnp.broadcast_to(obs * OBS_SCALE, (snn_steps, 1, 4))
      out, _ = spyx.nn.run(model, current)
      return jnp.argmax(out[-1, 0])

    def step(carry, k):
      obs, state, total, alive = carry
      # gymnax 1.x returns (obs, state, reward, terminated, truncated,
      # info), 0.0.x (obs, state, reward, done, info).
      obs, state, reward, *flags, _ = env.step(k, state, act(obs), env_params)
      done = functools.reduce(jnp.logical_or, flags)
      return (obs, state, total + reward * alive, alive & ~done), None

    k_reset, k_steps = jax.random.split(key)
    obs, state = env.reset(k_reset, env_params)
    init = (obs, state, jnp.float32(0.0), jnp.bool_(True))
    (_, _, total, _), _ = jax.lax.scan(
        step, init, jax.random.split(k_steps, max_steps))
    return total

  return rollout


def train(name, strategy, evaluate, flat0, mean_return, args):
  """Runs the ES; returns the final mean policy's return and the curve."""
  es_params = strategy.default_params

  def generation(state, key):
    k_ask, k_eval, k_tell = jax.random.split(key, 3)
    population, state = strategy.ask(k_ask, state, es_params)
    fitness = -evaluate(population, k_eval)  # evosax minimizes
    state, _ = strategy.tell(k_tell, population, fitness, state, es_params)
    return state, (mean_return(strategy.get_mean(state)), -fitness.min())

  @jax.jit
  def run(state, keys):
    return jax.lax.scan(generation, state, keys)

  keys = jax.random.split(jax.random.key(args.seed), args.generations)
  state = strategy.init(jax.random.key(args.seed), flat0, es_params)
  t0 = time.perf_counter()
  run = run.lower(state, keys).compile()
  compile_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  state, (curve, best) = jax.block_until_ready(run(state, keys))
  train_s = time.perf_counter() - t0

  ask = jax.jit(lambda k, s: strategy.ask(k, s, es_params)[0])
  population = jax.block_until_ready(ask(keys[0], state))
  held = _held_bytes(population)
  ask_s = median_seconds(lambda: ask(keys[0], state), repeats=9, warmup=1)
  curve = np.asarray(curve)
  for g in range(0, args.generations, max(1, args.generations // 10)):
    print(f"{name:>5} gen {g + 1:4d}: mean policy {curve[g]:6.1f}, "
          f"best member {float(best[g]):6.1f}")
  final = float(curve[-1])
  solved = np.flatnonzero(curve >= args.max_steps)
  solved = f"generation {solved[0] + 1}" if solved.size else "never"
  print(f"{name:>5}: mean policy first at {args.max_steps}: {solved}")
  print(f"{name:>5}: popsize {strategy.population_size}, population held "
        f"between ask and tell {held:,d} bytes, sampling "
        f"{ask_s * 1e3:.3f} ms per generation, training "
        f"{train_s / args.generations * 1e3:.1f} ms per generation "
        f"(compile {compile_s:.1f} s), final mean policy return {final:.1f}")
  return final, curve


def _held_bytes(population) -> int:
  """What ``ask`` hands to ``tell``: evosax's float32 population, or the
  wrapper's narrow one (its fp8 noise with the mean and std)."""
  if isinstance(population, jaxfp8.es.NarrowPopulation):
    return int(population.nbytes)
  return sum(x.nbytes for x in jax.tree.leaves(population))


def plot(path, curves, labels):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(6, 3.5))
  for curve, label in zip(curves, labels):
    ax.plot(np.arange(1, len(curve) + 1), curve, label=label)
  ax.set_xlabel("generation")
  ax.set_ylabel("return of the mean policy")
  ax.set_title("CartPole-v1, spyx SNN, evosax Open_ES")
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true",
                      help="a few generations of a tiny run")
  parser.add_argument("--generations", type=int, default=None)
  parser.add_argument("--popsize", type=int, default=None,
                      help="the float32 run's; the fp8 run has twice")
  parser.add_argument("--hidden", type=int, default=None)
  parser.add_argument("--snn-steps", type=int, default=4)
  parser.add_argument("--max-steps", type=int, default=None)
  parser.add_argument("--lr", type=float, default=0.05)
  parser.add_argument("--sigma", type=float, default=0.1)
  parser.add_argument("--episodes", type=int, default=None,
                      help="episodes per member and generation")
  parser.add_argument("--eval-episodes", type=int, default=16,
                      help="episodes (fixed keys) scoring the mean policy")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--out", default="evolve_snn.png")
  args = parser.parse_args(argv)
  quick = dict(generations=30, popsize=32, hidden=16, max_steps=100,
               episodes=2)
  full = dict(generations=50, popsize=128, hidden=16, max_steps=500,
              episodes=4)
  for k, v in (quick if args.quick else full).items():
    if getattr(args, k) is None:
      setattr(args, k, v)
  if args.popsize < 2 or args.popsize % 2:
    parser.error(f"--popsize must be even and at least 2 (Open_ES mirrors "
                 f"its noise), got {args.popsize}")

  graphdef, flat0, unravel = make_policy(args.hidden, args.seed)
  rollout = make_rollout(graphdef, unravel, args.snn_steps, args.max_steps)
  eval_keys = jax.random.split(jax.random.key(10_000 + args.seed),
                               args.eval_episodes)

  def mean_return(flat):
    return jax.vmap(rollout, (None, 0))(flat, eval_keys).mean()

  def fitness(flat, key):
    """Mean return over ``--episodes`` episodes; every member of a
    generation gets the same start states (common random numbers: ranks
    compare policies, not luck)."""
    keys = jax.random.split(key, args.episodes)
    return jax.vmap(rollout, (None, 0))(flat, keys).mean()

  def evaluate_fp32(population, key):
    return jax.vmap(fitness, (0, None))(population, key)

  def evaluate_fp8(population, key):
    # The key is closed over, not mapped: the start states are computed
    # once for the whole population, as in evaluate_fp32. At most P float32
    # members exist at once: the fp32 run's evaluation memory.
    return jaxfp8.es.evaluate(lambda member: fitness(member, key),
                              population, batch_size=args.popsize)

  def open_es(popsize):
    # A decaying step lets the mean settle once it balances the pole,
    # rather than step back and forth across the region that does.
    schedule = optax.cosine_decay_schedule(args.lr, args.generations,
                                           alpha=0.1)
    return Open_ES(popsize, flat0, optimizer=optax.adam(schedule),
                   std_schedule=optax.constant_schedule(args.sigma))

  print(f"CartPole-v1, spyx SNN 4-{args.hidden}(LIF)-2(LI), "
        f"{flat0.size} parameters, {args.snn_steps} SNN steps per env step, "
        f"{args.max_steps} env steps max, Open_ES lr {args.lr} sigma "
        f"{args.sigma}, {args.generations} generations; initial mean policy "
        f"return {float(mean_return(flat0)):.1f}")
  fp32, c32 = train("fp32", open_es(args.popsize), evaluate_fp32, flat0,
                    mean_return, args)
  # jaxfp8.random's default method: the exact rounded N(0, 1) law.
  fp8_strategy = jaxfp8.es.EvosaxStrategy(open_es(2 * args.popsize),
                                          noise_dtype="float8_e4m3fn")
  fp8, c8 = train("fp8", fp8_strategy, evaluate_fp8, flat0, mean_return,
                  args)
  plot(args.out, [c32, c8], [f"float32 noise, popsize {args.popsize}",
                             f"e4m3fn noise, popsize {2 * args.popsize}"])
  print(f"wrote {args.out}")
  print(f"final_return fp32={fp32:.1f} fp8={fp8:.1f} "
        f"fp8_popsize={2 * args.popsize} fp32_popsize={args.popsize}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
