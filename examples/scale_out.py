"""Trains across processes with FSDP under each recipe, and evolves sharded.

The model is the byte-level transformer of examples/transformer_lm.py,
trained per recipe from the same initial parameters on the same batches,
with every parameter (and its Adam moments) split over all devices of all
processes along its first dim that divides evenly (FSDP) and each batch
split by rows. The recipe layers' kernels are gathered narrow
(``nnx_recipe(..., rhs_sharding=...)``: each device quantizes its shard and
the codes and scales are gathered); the other parameters (embeddings,
norms, biases) as XLA gathers them, in float32. For each
recipe it prints the loss of the last step and what the step communicates,
read from its compiled program (``jaxfp8.tools.collectives``): the bytes of
the all-gathers and the ratio to the same step with float32 GEMMs
(``gather_ratio``). Then one OpenAI-ES generation in float8 with the
population split over all devices, each device drawing its own members.

One process per host, joined by JAX's distributed runtime
(``jax.distributed.initialize``); on CPU its collectives are gloo's::

    # a demo on one machine: 2 local processes of 2 CPU devices each
    python examples/scale_out.py --processes 2 --quick
    # a cluster: run on every host, with this host's index
    python examples/scale_out.py --coordinator HOST:PORT --num-processes N \\
        --process-id I
    # SLURM, Kubernetes/GKE, Cloud TPU: JAX finds the cluster itself
    python examples/scale_out.py --auto
    # one process, its own devices
    python examples/scale_out.py

It prints ``recipe=NAME loss=... gather_mb=... gather_ratio=...`` per
recipe (process 0 only), then ``es popsize=... ...``. docs/scaling_out.md
has the launch recipes and the bytes each recipe moves.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

# The transformer (ByteLM, make_step, the corpus) comes from its example.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

QUICK = dict(width=32, layers=2, heads=2, seq=32, batch=8, steps=8, lr=3e-3,
             recipes="bf16,fp8_current,fp8_blockwise,mxfp8,nvfp4")
FULL = dict(width=128, layers=4, heads=4, seq=64, batch=16, steps=200,
            lr=2e-3, recipes="bf16,fp8_current,fp8_delayed,fp8_blockwise,"
                             "mxfp8,nvfp4")


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="examples/scale_out.py")
  p.add_argument("--processes", type=int, default=None,
                 help="start this many local processes (a demo on one "
                      "machine, CPU devices)")
  p.add_argument("--local-devices", type=int, default=2,
                 help="simulated CPU devices per local process "
                      "(with --processes)")
  p.add_argument("--coordinator", default=None,
                 help="HOST:PORT of process 0 (with --num-processes and "
                      "--process-id)")
  p.add_argument("--num-processes", type=int, default=None)
  p.add_argument("--process-id", type=int, default=None)
  p.add_argument("--auto", action="store_true",
                 help="jax.distributed.initialize() with no arguments: "
                      "JAX detects SLURM, Kubernetes/GKE or TPU pods")
  p.add_argument("--quick", action="store_true",
                 help="CI-sized: a tiny model, 8 steps, five recipes")
  p.add_argument("--recipes", default=None,
                 help="comma-separated recipe names")
  p.add_argument("--steps", type=int, default=None)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--timeout", type=float, default=1800.0,
                 help="seconds before --processes gives up on its children")
  return p


def launch_local(args, argv: list[str]) -> int:
  """Starts ``--processes`` local processes of this script, joined at a
  free local port; prints process 0's output; fails fast if one fails."""
  from jaxfp8.tools import launch  # pylint: disable=g-import-not-at-top
  port = launch.free_port()
  rest = []
  skip = False
  for a in argv:  # this script's arguments less the launcher's own
    if skip:
      skip = False
      continue
    if a in ("--processes", "--local-devices", "--timeout"):
      skip = True
      continue
    if a.startswith(("--processes=", "--local-devices=", "--timeout=")):
      continue
    rest.append(a)
  env = launch.cpu_env(args.local_devices)
  commands = [[sys.executable, os.path.abspath(__file__), *rest,
               "--coordinator", f"127.0.0.1:{port}",
               "--num-processes", str(args.processes), "--process-id", str(i)]
              for i in range(args.processes)]
  # Process 0 prints as it goes; the others' output is shown if they fail.
  done = launch.launch(commands, [env] * args.processes,
                       timeout=args.timeout, first_to_terminal=True)
  if not done.ok:
    what = (f"process {done.failed} exited with code "
            f"{done.returncodes[done.failed]}" if done.failed is not None
            else f"no result within {args.timeout:.0f} s")
    print(f"scale_out: {what}; stopped the others", file=sys.stderr)
    for i, out in enumerate(done.outputs):
      if out and done.returncodes[i]:
        print(f"--- process {i} ---\n{out[-3000:]}", file=sys.stderr)
    return 1
  return 0


def join(args) -> None:
  """Joins JAX's distributed runtime as the arguments say (or not)."""
  import jax  # pylint: disable=g-import-not-at-top
  # CPU collectives across processes need gloo; other backends ignore it.
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if args.coordinator:
    jax.distributed.initialize(args.coordinator, args.num_processes,
                               args.process_id)
  elif args.auto:
    jax.distributed.initialize()


def fsdp_spec(shape, n: int, axis: str):
  """Split along the first dim that ``n`` divides (FSDP), else replicated."""
  from jax.sharding import PartitionSpec as P  # pylint: disable=g-import-not-at-top
  for d, size in enumerate(shape):
    if size % n == 0 and size >= n:
      return P(*([None] * d), axis)
  return P()


def to_global(tree, mesh, spec_of):
  """Host values (the same in every process) as global arrays over ``mesh``.

  Typed PRNG keys go as their key data and come back as keys.
  """
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from jax.sharding import NamedSharding  # pylint: disable=g-import-not-at-top

  def one(x):
    is_key = jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
    impl = jax.random.key_impl(x) if is_key else None
    a = np.asarray(jax.random.key_data(x) if is_key else x)
    s = NamedSharding(mesh, spec_of(x.shape))
    g = jax.make_array_from_callback(a.shape, s, lambda i: a[i])
    return jax.random.wrap_key_data(g, impl=impl) if is_key else g

  return jax.tree_util.tree_map(one, tree)


def train(name, args, tokens, mesh):
  """Trains under recipe ``name`` (None: float32 GEMMs); returns the last
  loss and the compiled step's collective bytes."""
  import jax  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=g-import-not-at-top,g-multiple-import
  import transformer_lm  # pylint: disable=g-import-not-at-top
  from jaxfp8.tools.collectives import collective_bytes  # pylint: disable=g-import-not-at-top

  n = mesh.devices.size
  schedule = optax.warmup_cosine_decay_schedule(
      0.0, args.lr, warmup_steps=max(1, args.steps // 10),
      decay_steps=args.steps, end_value=args.lr / 10)
  # The recipe layers' kernels are gathered whole as codes and scales.
  step, _, state = transformer_lm.make_step(
      name, width=args.width, layers=args.layers, heads=args.heads,
      seq=args.seq, seed=args.seed, lr=schedule,
      rhs_sharding=NamedSharding(mesh, P()))
  params, scaling, rest, opt_state = state
  fsdp = lambda shape: fsdp_spec(shape, n, "data")
  whole = lambda shape: P()
  state = (to_global(params, mesh, fsdp), to_global(scaling, mesh, whole),
           to_global(rest, mesh, whole), to_global(opt_state, mesh, fsdp))
  rows = NamedSharding(mesh, P("data"))
  batch = lambda i: jax.make_array_from_callback(
      tokens[i].shape, rows, lambda idx: tokens[i][idx])
  compiled = step.lower(*state, batch(0)).compile()
  for i in range(args.steps):
    *state, loss = compiled(*state, batch(i))
  loss = float(multihost_utils.process_allgather(loss, tiled=True))
  return loss, collective_bytes(compiled)


def es_generation(mesh):
  """One OpenAI-ES generation, the float8 population split over ``mesh``."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  from jax.sharding import NamedSharding, PartitionSpec as P  # pylint: disable=g-import-not-at-top,g-multiple-import
  from jaxfp8 import es  # pylint: disable=g-import-not-at-top
  from jaxfp8.tools.collectives import collective_bytes  # pylint: disable=g-import-not-at-top

  popsize, dims = 16 * mesh.devices.size, 4096
  # Each device draws its own members (its own key and antithetic pairs):
  # only the fitness and the update's all-reduce cross devices.
  rows = NamedSharding(mesh, P("data"))
  opt = es.OpenAIES(popsize, optax.adam(0.05), sigma=0.1, dtype="e4m3",
                    sharding=rows)

  def generation():
    state = opt.init(jnp.full(dims, 0.5))
    eps = opt.ask(jax.random.key(1), state)
    fitness = jnp.sum(opt.candidates(state, eps) ** 2, axis=1)
    new = opt.tell(state, eps, fitness)
    return jnp.mean(fitness), jnp.max(jnp.abs(new.mean - state.mean))

  compiled = jax.jit(generation).lower().compile()
  fitness, moved = multihost_utils.process_allgather(compiled(), tiled=True)
  b = collective_bytes(compiled)
  return (f"es popsize={popsize} dims={dims} dtype=float8_e4m3fn "
          f"fitness_mean={float(fitness):.4f} mean_moved={float(moved):.4f} "
          f"all_reduce_kb={b['all-reduce'] / 1e3:.1f} "
          f"all_gather_kb={b['all-gather'] / 1e3:.1f} "
          f"all_to_all_kb={b['all-to-all'] / 1e3:.1f} "
          f"permute_kb={b['collective-permute'] / 1e3:.1f}")


def main(argv: list[str] | None = None) -> int:
  argv = sys.argv[1:] if argv is None else list(argv)
  parser = _parser()
  args = parser.parse_args(argv)
  if args.processes is not None:
    if args.processes < 1 or args.local_devices < 1:
      parser.error("argument --processes/--local-devices: must be >= 1")
    if args.coordinator or args.auto:
      parser.error("argument --processes: starts local processes itself; "
                   "not with --coordinator or --auto")
    return launch_local(args, argv)
  if args.coordinator and (args.num_processes is None
                           or args.process_id is None):
    parser.error("argument --coordinator: needs --num-processes and "
                 "--process-id")
  size = dict(QUICK if args.quick else FULL)
  names = (args.recipes or size.pop("recipes")).split(",")
  size.pop("recipes", None)
  for k, v in size.items():
    if getattr(args, k, None) is None:
      setattr(args, k, v)
  if args.steps < 1:
    parser.error(f"argument --steps: must be >= 1, got {args.steps}")
  join(args)

  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from jax.sharding import Mesh  # pylint: disable=g-import-not-at-top
  import transformer_lm  # pylint: disable=g-import-not-at-top
  from jaxfp8 import recipes  # pylint: disable=g-import-not-at-top

  bad = [n for n in names if n not in recipes.RECIPES]
  if bad:
    parser.error(f"argument --recipes: unknown {bad}, expected names of "
                 f"{','.join(recipes.RECIPES)}")
  mesh = Mesh(np.array(jax.devices()), ("data",))
  if args.batch % mesh.devices.size:
    args.batch = mesh.devices.size * -(-args.batch // mesh.devices.size)
  say = print if jax.process_index() == 0 else (lambda *a, **k: None)
  say(f"{jax.process_count()} processes, {jax.device_count()} devices "
      f"({jax.local_device_count()} each, {jax.default_backend()}); FSDP "
      f"over all of them; width {args.width}, {args.layers} blocks, batch "
      f"{args.batch}, {args.steps} steps", flush=True)
  train_bytes, _, _ = transformer_lm.load_corpus()
  tokens = transformer_lm.batches(train_bytes, args.steps, args.batch,
                                  args.seq, args.seed)
  _, base = train(None, args, tokens, mesh)
  say(f"float32 GEMMs: all-gather {base['all-gather'] / 1e6:.3f} MB, "
      f"all-reduce {base['all-reduce'] / 1e6:.3f} MB per step", flush=True)
  for name in names:
    t0 = time.perf_counter()
    loss, b = train(name, args, tokens, mesh)
    ratio = b["all-gather"] / base["all-gather"] if base["all-gather"] else 0
    say(f"recipe={name} loss={loss:.4f} "
        f"gather_mb={b['all-gather'] / 1e6:.3f} gather_ratio={ratio:.2f} "
        f"reduce_mb={b['all-reduce'] / 1e6:.3f} "
        f"({time.perf_counter() - t0:.0f} s)", flush=True)
  say(es_generation(mesh), flush=True)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
