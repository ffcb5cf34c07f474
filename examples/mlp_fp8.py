"""Trains an MLP in bf16 and with fp8 matmuls (delayed scaling); compares losses.

The data is made here: inputs are standard normal, targets come from a fixed
random "teacher" MLP plus a little noise. The student is a Flax linen MLP
trained with optax Adam, twice from the same initial weights and batches:

* ``bf16``: parameters in float32, every layer computing in bfloat16;
* ``fp8``: the same, but each ``nn.Dense`` multiplies through
  ``jaxfp8.recipes.RecipeDotGeneral`` with the ``"fp8_delayed"`` recipe:
  inputs and kernels cast to e4m3, output gradients to e5m2, with delayed
  scaling (amax history of 16 steps) kept in the ``_overwrite_with_gradient``
  collection.

With ``--devices N`` it trains instead the fp8 model with its kernels
*stored* in float8_e4m3fn, over a mesh of N devices (axis ``"data"``): the
batch is sharded, every parameter and Adam moment is sharded along one axis
(FSDP), the delayed-scaling state is replicated, and the kernels are updated
with stochastic rounding (``jaxfp8.policy.with_stochastic_rounding`` and
``jaxfp8.policy.apply_updates``). The same training runs on one device, with
the same keys and data. On a CPU the N devices are simulated: the script sets
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before JAX starts.

Usage::

    python examples/mlp_fp8.py --steps 300
    python examples/mlp_fp8.py --devices 4 --steps 300

The last line printed is ``final_loss fp8=<float> bf16=<float>``: the mean
squared error of each trained model on held-out data; with ``--devices N``,
``final_loss devices=N sharded=<float> one_device=<float>``, after a line
``first_difference step=<k> values=<n>`` (or ``none``: the step after which
the fp8 kernels of the two runs first differ, and in how many values) and a
line ``sharded_params ok`` (or what failed) from the check of the compiled
sharded train step.
"""
from __future__ import annotations

import os
import re
import sys


def _force_host_devices(argv: list[str]) -> None:
  """Sets ``XLA_FLAGS`` for ``--devices N`` simulated CPU devices.

  Must run before JAX is imported: XLA reads the flag once, when its CPU
  client starts. Any device count already in ``XLA_FLAGS`` is replaced.
  """
  count = None
  for i, arg in enumerate(argv):
    if arg == "--devices" and i + 1 < len(argv):
      count = argv[i + 1]
    elif arg.startswith("--devices="):
      count = arg.split("=", 1)[1]
  if count is None or not count.isdigit():
    return  # argparse reports a malformed value
  flags = re.sub(r"--xla_force_host_platform_device_count=\S*", "",
                 os.environ.get("XLA_FLAGS", ""))
  os.environ["XLA_FLAGS"] = (
      f"{flags.strip()} --xla_force_host_platform_device_count={count}"
  ).strip()


if __name__ == "__main__":
  _force_host_devices(sys.argv[1:])

# pylint: disable=g-import-not-at-top,wrong-import-position
import argparse
import functools
import time
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
import numpy as np
import optax

import jaxfp8
import jaxfp8.policy
import jaxfp8.recipes

IN_DIM, HIDDEN, OUT_DIM = 32, 128, 8
BATCH, EVAL = 256, 4096


class MLP(nn.Module):
  hidden: int = HIDDEN
  out: int = OUT_DIM
  fp8: bool = False
  dtype: Any = jnp.bfloat16  # of the layers' computation

  @nn.compact
  def __call__(self, x):
    dot = (functools.partial(jaxfp8.recipes.RecipeDotGeneral,
                             recipe="fp8_delayed") if self.fp8 else None)
    for _ in range(2):
      x = nn.gelu(nn.Dense(self.hidden, dtype=self.dtype,
                           dot_general_cls=dot)(x))
    return nn.Dense(self.out, dtype=self.dtype, dot_general_cls=dot)(x)


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
  params, fp8_state = jaxfp8.recipes.split_overwrite_with_gradient(variables)
  tx = optax.adam(optax.cosine_decay_schedule(learning_rate, max(steps, 1)))
  opt_state = tx.init(params)

  def loss_fn(params, fp8_state, x, y):
    variables = dict(params)
    if fp8_state is not None:
      variables[jaxfp8.recipes.OVERWRITE_WITH_GRADIENT] = fp8_state
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


def shard_spec(shape: tuple[int, ...], count: int) -> P:
  """FSDP layout of one array over ``count`` devices: its largest axis that
  ``count`` divides is split over mesh axis ``"data"``; scalars and arrays
  with no such axis are replicated."""
  axes = [a for a in range(len(shape)) if shape[a] % count == 0]
  if not axes:
    return P()
  axis = max(axes, key=lambda a: shape[a])  # the first of the largest
  return P(*[("data" if a == axis else None) for a in range(len(shape))])


def shard_shape(shape: tuple[int, ...], count: int) -> tuple[int, ...]:
  """One device's part of an array laid out by :func:`shard_spec`."""
  spec = tuple(shard_spec(shape, count))
  return tuple(d // count if a < len(spec) and spec[a] == "data" else d
               for a, d in enumerate(shape))


def _as_f32(tree):
  return jax.tree_util.tree_map(lambda p: p.astype(jnp.float32), tree)


def fp8_param_training(devices, *, steps: int, seed: int = 0,
                       learning_rate: float = 3e-3):
  """The fp8-parameter training over a mesh of ``devices`` (axis ``"data"``).

  Kernels are stored in float8_e4m3fn, biases in float32; parameters and
  Adam moments are laid out by :func:`shard_spec`, the batch is split over
  the devices and the delayed-scaling state is replicated. Nothing depends
  on the number of devices but the layout: the batches, the initial weights
  and the stochastic-rounding bits come from the same keys.

  The matmuls are fp8 as in ``train(fp8=True)``, but the layers compute in
  float32, not bfloat16: a bias gradient is a sum over the batch, which the
  sharded program adds in a different order (per device, then across), and
  in bfloat16 that reorder rounds at 2^-9, enough to make the runs drift
  apart by a few 1e-3 of the loss. In float32 the gradients differ only in
  their last bits, but stochastic rounding turns a last-bit difference into
  a different fp8 value when its random threshold falls in between (about
  once in 2^20 roundings in float8_e4m3fn); from that step on the two runs
  are two trajectories of the same training, with losses that stay close.
  Whether and when that first happens depends on the XLA version and the
  CPU (the float32 code differs), so ``main`` reports the step at which the
  kernels first differ and in how many values.

  Returns:
    ``(step, carry, keys, evaluate)``: the jitted train step ``step(carry,
    key) -> carry``, the initial carry ``(params, fp8_state, opt_state)``
    placed on the mesh, the per-step batch keys, and ``evaluate(carry)``,
    the held-out mean squared error.
  """
  count = len(devices)
  mesh = jax.make_mesh((count,), ("data",),
                       axis_types=(jax.sharding.AxisType.Auto,),
                       devices=devices)
  rows = NamedSharding(mesh, P("data", None))
  replicated = NamedSharding(mesh, P())
  batch, x_eval, y_eval = make_data(seed)
  model = MLP(fp8=True, dtype=jnp.float32)
  variables = model.init(jax.random.key(seed + 1), x_eval[:1])
  params, fp8_state = jaxfp8.recipes.split_overwrite_with_gradient(variables)
  params = jax.tree_util.tree_map(
      lambda p: jaxfp8.cast(p, "float8_e4m3fn") if p.ndim == 2 else p, params)
  tx = jaxfp8.policy.with_stochastic_rounding(
      optax.adam(optax.cosine_decay_schedule(learning_rate, max(steps, 1))),
      key=jax.random.key(seed + 3))
  carry = (params, fp8_state, tx.init(params))

  def layout(x):
    return NamedSharding(mesh, shard_spec(np.shape(x), count))

  shardings = (jax.tree_util.tree_map(layout, carry[0]),
               jax.tree_util.tree_map(lambda _: replicated, carry[1]),
               jax.tree_util.tree_map(layout, carry[2]))

  def loss_fn(params32, fp8_state, x, y):
    variables = dict(params32)
    variables[jaxfp8.recipes.OVERWRITE_WITH_GRADIENT] = fp8_state
    pred = model.apply(variables, x).astype(jnp.float32)
    return jnp.mean((pred - y) ** 2)

  def step(carry, key):
    params, fp8_state, opt_state = carry
    x, y = batch(key)
    x = jax.lax.with_sharding_constraint(x, rows)
    y = jax.lax.with_sharding_constraint(y, rows)
    # Gradients with respect to a float32 view: an fp8 gradient would be
    # rounded to e4m3 before Adam sees it. The fp8 state's is its next value.
    grads, fp8_state = jax.grad(loss_fn, argnums=(0, 1))(
        _as_f32(params), fp8_state, x, y)
    updates, opt_state = tx.update(grads, opt_state, params)
    return jaxfp8.policy.apply_updates(params, updates), fp8_state, opt_state

  step = jax.jit(step, in_shardings=(shardings, replicated),
                 out_shardings=shardings)
  keys = jax.random.split(jax.random.key(seed + 2), steps)
  x_eval = jax.device_put(x_eval, rows)
  y_eval = jax.device_put(y_eval, rows)
  eval_fn = jax.jit(lambda c: loss_fn(_as_f32(c[0]), c[1], x_eval, y_eval))
  return step, jax.device_put(carry, shardings), keys, lambda c: float(
      eval_fn(c))


class Fp8ParamRun(NamedTuple):
  """What :func:`train_fp8_params` returns."""
  loss: float  # held-out mean squared error
  params: Any  # the trained parameters (fp8 kernels)
  problems: list[str]  # check_sharded_params of the compiled step


def train_fp8_params(devices, steps: int, *, seed: int = 0,
                     each_step=None) -> Fp8ParamRun:
  """Runs :func:`fp8_param_training` on ``devices``; the compiled step that
  :func:`check_sharded_params` looks at is the program that runs.
  ``each_step(i, params)``, if given, sees the parameters after step i."""
  step, carry, keys, evaluate = fp8_param_training(devices, steps=steps,
                                                   seed=seed)
  traced = step.trace(carry, keys[0])
  compiled = traced.lower().compile()
  problems = check_sharded_params(compiled, carry, len(devices),
                                  traced.jaxpr.consts)
  for i in range(steps):
    carry = compiled(carry, keys[i])
    if each_step is not None:
      each_step(i, carry[0])
  return Fp8ParamRun(evaluate(carry), carry[0], problems)


def kernel_values(params) -> np.ndarray:
  """Every fp8 kernel value, flattened into one float32 array."""
  return np.concatenate([np.asarray(p, np.float32).ravel()
                         for p in jax.tree_util.tree_leaves(params)
                         if p.ndim == 2])


_ENTRY = re.compile(r"^ENTRY .*?\((.*)\) -> (.*) \{$", re.MULTILINE)
_FP8_SHAPE = re.compile(r"f8e4m3fn\[([0-9,]*)\]")


def check_sharded_params(compiled, carry, count: int,
                         constants=()) -> list[str]:
  """What is wrong with the compiled sharded train step (empty: nothing).

  Each float8_e4m3fn kernel must enter and leave the partitioned program as
  one device's 1/N slice: the output shardings say so, and so do the
  per-device shapes of the fp8 parameters and results of the HLO's entry
  computation (after SPMD partitioning), which are exactly the kernels'
  shards, so no device receives or keeps a gathered kernel between steps.
  The bytes each device receives (``memory_analysis``) are those of its
  shards of the parameters and Adam moments, the replicated fp8 state and
  the keys, and at most the step's closed-over ``constants`` (the data's
  teacher), which JAX 0.12.1 passes as arguments where earlier versions
  compile them in.
  """
  params = jax.tree_util.tree_leaves(carry[0])
  expected = [shard_shape(p.shape, count) for p in params if p.ndim == 2]
  problems = [f"kernel {p.shape} stored as {p.dtype}, not split {count} ways"
              for p in params if p.ndim == 2 and (
                  p.dtype != jnp.float8_e4m3fn
                  or np.prod(shard_shape(p.shape, count)) * count
                  != np.prod(p.shape))]
  got = [s.shard_shape(p.shape) for s, p in zip(
      jax.tree_util.tree_leaves(compiled.output_shardings[0]), params)
         if p.ndim == 2]
  if got != expected:
    problems.append(f"output kernel shards {got}, expected {expected}")
  entry = _ENTRY.search(compiled.as_text())
  if entry is None:
    return problems + ["no ENTRY computation in the compiled HLO"]
  for side, text in zip(("parameters", "results"), entry.groups()):
    shapes = sorted(tuple(int(d) for d in m.split(",") if d)
                    for m in _FP8_SHAPE.findall(text))
    if shapes != sorted(expected):
      problems.append(f"fp8 {side} per device {shapes}, expected "
                      f"{sorted(expected)}")

  def nbytes(x, fsdp: bool) -> int:
    shape = shard_shape(x.shape, count) if fsdp else x.shape
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      itemsize = jax.random.key_data(x).nbytes // max(x.size, 1)
    else:
      itemsize = np.dtype(x.dtype).itemsize
    return int(np.prod(shape)) * itemsize

  # The carry (params and Adam state sharded, fp8 state replicated) and
  # the batch key.
  per_device = nbytes(jax.random.key(0), False) + sum(
      nbytes(x, fsdp) for part, fsdp in zip(carry, (True, False, True))
      for x in jax.tree_util.tree_leaves(part))
  per_device += sum(int(np.asarray(c).nbytes) for c in constants
                    if hasattr(c, "shape"))
  memory = compiled.memory_analysis()
  if memory is not None and memory.argument_size_in_bytes > per_device:
    problems.append(f"{memory.argument_size_in_bytes} argument bytes per "
                    f"device, expected {per_device} (the shards)")
  return problems


def _devices(count: int):
  """``count`` devices of the default backend, else of the CPU."""
  for devices in (jax.devices(), jax.devices("cpu")):
    if len(devices) >= count:
      return devices[:count]
  have = len(jax.devices("cpu"))
  raise SystemExit(
      f"--devices {count}: JAX has only {have} CPU device"
      f"{'s' if have != 1 else ''}; run this file as a script (it sets XLA_FLAGS before JAX "
      f"starts) or set XLA_FLAGS=--xla_force_host_platform_device_count="
      f"{count}")


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--devices", type=int, default=None,
                      help="train fp8 parameters sharded over N devices")
  args = parser.parse_args(argv)
  if args.devices is not None:
    if args.devices < 2 or HIDDEN % args.devices:
      parser.error(f"--devices must be at least 2 and divide {HIDDEN}, got "
                   f"{args.devices}")
    devices = _devices(args.devices)
    history = []  # the kernels after each step of the sharded run
    start = time.perf_counter()
    sharded = train_fp8_params(
        devices, args.steps, seed=args.seed,
        each_step=lambda i, p: history.append(kernel_values(p)))
    mid = time.perf_counter()
    first = []  # (step, values differing) where the runs first part

    def compare(i, params):
      differ = int(np.sum(kernel_values(params) != history[i]))
      if differ and not first:
        first.append((i + 1, differ))

    one = train_fp8_params(devices[:1], args.steps, seed=args.seed,
                           each_step=compare)
    end = time.perf_counter()
    last = kernel_values(one.params)
    differ = int(np.sum(kernel_values(sharded.params) != last))
    print(f"steps={args.steps} seconds sharded={mid - start:.1f} "
          f"one_device={end - mid:.1f} relative difference="
          f"{abs(sharded.loss - one.loss) / one.loss:.2e} kernel values "
          f"differing={differ}/{last.size}")
    print("first_difference " + (f"step={first[0][0]} values={first[0][1]}"
                                 if first else "none"))
    print("sharded_params " + ("ok" if not sharded.problems
                               else "; ".join(sharded.problems)))
    print(f"final_loss devices={args.devices} sharded={sharded.loss:.6g} "
          f"one_device={one.loss:.6g}")
    return 0
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
