"""Trains a small byte-level transformer language model once per recipe.

The corpus is Python's own standard library: a fixed list of pure-Python
stdlib source files (``CORPUS_FILES``), read from
``sysconfig.get_paths()["stdlib"]`` and concatenated in that order, so every
machine with Python has it without a download. The files were chosen for
being byte-identical in CPython 3.11.2, 3.11.7, 3.12.1 and 3.13.0; another
release may have changed one of them, so the script prints the corpus's
size and SHA-256 and says whether it is the reference corpus. Every
``HOLDOUT_EVERY``-th file of the list is held out (whole files: the held-out
loss measures generalization to unseen modules, not to unseen windows of
seen ones).

The model is a decoder-only transformer in Flax nnx: byte and learned
position embeddings, pre-LayerNorm blocks of causal multi-head
self-attention (one ``nnx.Linear`` for q, k, v and one for the output
projection) and a GELU MLP (two ``nnx.Linear``), a final LayerNorm and an
untied ``nnx.Linear`` head over the 256 bytes: by default 4 blocks of
width 128 with 4 heads (0.87M parameters), a context of 64 bytes, batches
of 8 and 400 steps, sized so that the nine runs take minutes on two CPU
cores (``--quick`` is smaller still). Parameters, Adam moments and the
activations between layers are float32 (the master copy); the attention
products and softmax are float32 in every run.

Each recipe trains the same model from the same initial parameters on the
same batches in the same order (``jaxfp8.recipes.nnx_recipe`` with per-layer
rules turns the chosen ``nnx.Linear`` layers' GEMMs into the recipe's):

* ``bf16``: every operand of the three GEMMs rounded to bfloat16;
* ``fp8_current`` / ``fp8_delayed``: per-tensor e4m3 forward, e5m2
  gradients, current or delayed (amax history) scaling;
* ``fp8_blockwise``: DeepSeek-V3 / Transformer Engine Float8BlockScaling
  (activations and gradients 1x128, weights 128x128, e4m3, power-of-two
  scales);
* ``mxfp8``: MXFP8 (e4m3, blocks of 32, E8M0 scales) in all three GEMMs;
* ``nvfp4``: the NVFP4 pretraining recipe (arXiv 2509.25149, TE
  NVFP4BlockScaling): e2m1 with E4M3 block scales and a float32 tensor
  scale, activations and gradients 1x16, weights 16x16, random Hadamard
  transform on the weight-gradient GEMM, stochastic rounding of gradients;
* ``nvfp4_no_rht``, ``nvfp4_no_sr``, ``nvfp4_1d_weights``: that recipe
  without one of its three devices.

High-precision layers (``rules``): the output head stays in float32 in
every run, as the embeddings and attention's own products (not Linear
layers) do. The NVFP4 paper keeps these in high precision; doing so in
every run leaves the blocks' linear layers as the only difference between
runs. The NVFP4 runs also keep the last block's linear layers in high
precision, as the paper does for NVFP4 only: it reports training
diverging with every linear layer in FP4 and keeps about 15% of them,
mostly the last ones, in BF16. With four blocks the last is a quarter of
the blocks' linear layers, the nearest this small model comes; the FP8,
MXFP8 and bf16 runs quantize every block.

Optimizer: optax AdamW, linear warmup then cosine decay, gradient
clipping at global norm 1. Training loss is next-byte cross-entropy in
nats per byte.

Usage::

    python examples/transformer_lm.py                 # all nine recipes
    python examples/transformer_lm.py --quick         # CI-sized
    python examples/transformer_lm.py --recipes bf16,nvfp4 --steps 100

It prints progress lines per run (the first step's loss, five more, the
held-out loss and the time per step), then ``final_loss bf16=... ...`` (the
mean training loss of the last ``--tail`` steps of each run), then
``heldout_loss bf16=... ...`` (the trained model's loss on fixed windows of
the held-out files, under its own recipe's forward pass), and writes the
loss curves to ``--out`` (a PNG).
"""
from __future__ import annotations

import argparse
import hashlib
import math
import os
import sysconfig
import time

from flax import nnx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxfp8 import recipes

RECIPES = ("bf16", "fp8_current", "fp8_delayed", "fp8_blockwise", "mxfp8",
           "nvfp4", "nvfp4_no_rht", "nvfp4_no_sr", "nvfp4_1d_weights")
# Files under the stdlib directory, identical in CPython 3.11.2, 3.11.7,
# 3.12.1 and 3.13.0 (checked byte for byte), pure Python (no data tables
# but stringprep's), and shipped by every CPython install (no idlelib,
# turtledemo or ensurepip, which some distributions split off).
CORPUS_FILES = (
    "__future__.py", "_compression.py", "_markupbase.py", "_py_abc.py",
    "_sitebuiltins.py", "_threading_local.py", "_weakrefset.py",
    "asyncio/exceptions.py", "asyncio/log.py", "asyncio/mixins.py",
    "asyncio/protocols.py", "asyncio/threads.py", "asyncio/trsock.py",
    "asyncio/windows_utils.py", "concurrent/futures/_base.py", "difflib.py",
    "email/_encoded_words.py", "email/contentmanager.py",
    "email/headerregistry.py", "email/mime/application.py",
    "email/mime/image.py", "email/quoprimime.py", "graphlib.py", "heapq.py",
    "importlib/metadata/_collections.py", "importlib/metadata/_functools.py",
    "importlib/metadata/_itertools.py", "importlib/metadata/_text.py",
    "importlib/readers.py", "importlib/simple.py", "json/scanner.py",
    "multiprocessing/dummy/connection.py", "multiprocessing/heap.py",
    "multiprocessing/popen_forkserver.py",
    "multiprocessing/popen_spawn_posix.py", "multiprocessing/reduction.py",
    "multiprocessing/sharedctypes.py", "nturl2path.py", "optparse.py",
    "pyclbr.py", "string.py", "stringprep.py", "tomllib/_parser.py",
    "tomllib/_re.py", "tomllib/_types.py", "tracemalloc.py",
    "unittest/__main__.py", "unittest/_log.py", "unittest/signals.py",
    "unittest/suite.py", "unittest/util.py", "urllib/response.py",
    "urllib/robotparser.py", "weakref.py", "wsgiref/headers.py",
    "wsgiref/types.py", "xml/dom/NodeFilter.py", "xml/dom/domreg.py",
    "xml/dom/minicompat.py", "xml/dom/pulldom.py", "xml/dom/xmlbuilder.py",
    "xml/etree/ElementPath.py", "xml/etree/cElementTree.py",
    "xml/parsers/expat.py", "xml/sax/handler.py", "xml/sax/saxutils.py",
    "zoneinfo/_common.py",
)
CORPUS_SHA256 = (
    "54a768b463dbb72b2b318fe0fce76d61dc331859b369303464026882ac0b4daf")
HOLDOUT_EVERY = 8


def load_corpus() -> tuple[np.ndarray, np.ndarray, str]:
  """The training and held-out bytes (uint8) and a line describing them."""
  root = sysconfig.get_paths()["stdlib"]
  train, heldout, digest = [], [], hashlib.sha256()
  for i, name in enumerate(CORPUS_FILES):
    with open(os.path.join(root, name), "rb") as fh:
      data = fh.read()
    digest.update(data)
    (heldout if i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1 else train).append(data)
  sha = digest.hexdigest()
  train = np.frombuffer(b"".join(train), np.uint8)
  heldout = np.frombuffer(b"".join(heldout), np.uint8)
  same = ("the reference corpus" if sha == CORPUS_SHA256 else
          "NOT the reference corpus: this Python's files differ")
  return train, heldout, (f"corpus {len(CORPUS_FILES)} stdlib files, "
                          f"train {train.size} bytes, held out "
                          f"{heldout.size} bytes, sha256 {sha[:16]}... "
                          f"({same})")


class Block(nnx.Module):
  """Pre-LN transformer block: causal self-attention, then a GELU MLP."""

  def __init__(self, width: int, heads: int, *, rngs: nnx.Rngs):
    self.heads = heads
    self.ln1 = nnx.LayerNorm(width, rngs=rngs)
    self.qkv = nnx.Linear(width, 3 * width, rngs=rngs)
    self.proj = nnx.Linear(width, width, rngs=rngs)
    self.ln2 = nnx.LayerNorm(width, rngs=rngs)
    self.fc1 = nnx.Linear(width, 4 * width, rngs=rngs)
    self.fc2 = nnx.Linear(4 * width, width, rngs=rngs)

  def __call__(self, x):
    x = self_attention(self, x)
    return x + self.fc2(jax.nn.gelu(self.fc1(self.ln2(x))))


def self_attention(block, x):
  """``x`` plus ``block``'s causal self-attention of ``block.ln1(x)`` (its
  ``qkv`` and ``proj`` layers, ``heads`` heads). Shared with
  examples/moe_lm.py."""
  b, t, d = x.shape
  q, k, v = jnp.split(block.qkv(block.ln1(x)), 3, axis=-1)
  q, k, v = (a.reshape(b, t, block.heads, d // block.heads) for a in (q, k, v))
  logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d // block.heads)
  causal = jnp.tril(jnp.ones((t, t), bool))
  att = jax.nn.softmax(jnp.where(causal, logits, -jnp.inf), axis=-1)
  return x + block.proj(jnp.einsum("bhqk,bkhd->bqhd", att, v).reshape(b, t, d))


class ByteLM(nnx.Module):
  """Decoder-only byte-level language model."""

  def __init__(self, *, width: int, layers: int, heads: int, seq: int,
               rngs: nnx.Rngs):
    init = nnx.initializers.normal(0.02)
    self.embed = nnx.Embed(256, width, embedding_init=init, rngs=rngs)
    self.pos = nnx.Embed(seq, width, embedding_init=init, rngs=rngs)
    self.blocks = nnx.List([Block(width, heads, rngs=rngs)
                            for _ in range(layers)])
    self.ln = nnx.LayerNorm(width, rngs=rngs)
    self.head = nnx.Linear(width, 256, rngs=rngs)

  def __call__(self, tokens):
    x = self.embed(tokens) + self.pos(jnp.arange(tokens.shape[-1]))
    for block in self.blocks:
      x = block(x)
    return self.head(self.ln(x))


def rules(recipe: str, layers: int) -> list[tuple[str, str | None]]:
  """Which layers train under ``recipe`` (see the module docstring)."""
  hp = [("^head$", None)]
  if recipe.startswith("nvfp4"):
    hp.append((f"^blocks/{layers - 1}/", None))
  return hp + [(".*", recipe)]


def cross_entropy(model, tokens):
  logits = model(tokens[:, :-1])
  return optax.softmax_cross_entropy_with_integer_labels(
      logits, tokens[:, 1:]).mean()


def batches(data: np.ndarray, steps: int, batch: int, seq: int,
            seed: int) -> np.ndarray:
  """(steps, batch, seq + 1) windows of ``data``: one fixed order for all."""
  starts = np.random.default_rng(seed).integers(
      0, data.size - seq - 1, size=(steps, batch))
  return data[starts[..., None] + np.arange(seq + 1)]


def heldout_windows(data: np.ndarray, count: int, seq: int) -> np.ndarray:
  """``count`` evenly spaced (seq + 1)-byte windows of the held-out bytes."""
  starts = np.linspace(0, data.size - seq - 1, count).astype(np.int64)
  return data[starts[:, None] + np.arange(seq + 1)]


def make_step(recipe: str | None, *, width: int, layers: int, heads: int,
              seq: int, seed: int, lr, rhs_sharding=None):
  """The jitted training step of a fresh ByteLM under ``recipe``.

  Returns ``(step, loss_fn, state)``: ``step(*state, tokens)`` returns the
  next ``state`` (params, scaling, rest, opt_state) and the loss;
  ``loss_fn(params, scaling, rest, tokens)`` the loss and next rest. ``lr``
  is a learning rate or an optax schedule. ``recipe=None``: every layer's
  GEMMs in float32, as given (a baseline for examples/scale_out.py).
  ``rhs_sharding``: the recipe layers' kernels' gathered sharding under
  FSDP (``nnx_recipe``'s option: their codes are gathered, not float32).
  """
  model = ByteLM(width=width, layers=layers, heads=heads, seq=seq,
                 rngs=nnx.Rngs(seed))
  # The recipe's stochastic rounding and Hadamard signs draw from their own
  # stream, seeded alike for every run.
  recipes.nnx_recipe(model, [(".*", None)] if recipe is None
                     else rules(recipe, layers),
                     rngs=nnx.Rngs(recipe=seed + 1), rhs_sharding=rhs_sharding)
  tx = optax.chain(optax.clip_by_global_norm(1.0),
                   optax.adamw(lr, b1=0.9, b2=0.95, weight_decay=0.1))
  graphdef, params, scaling, rest = nnx.split(model, nnx.Param,
                                              recipes.NnxRecipeState, ...)

  def loss_fn(params, scaling, rest, tokens):
    # copy=True: Variables made under this trace, so the recipe's rng count
    # may advance inside jax.grad (nnx refuses to mutate it otherwise).
    m = nnx.merge(graphdef, params, scaling, rest, copy=True)
    loss = cross_entropy(m, tokens.astype(jnp.int32))
    return loss, nnx.split(m, nnx.Param, recipes.NnxRecipeState, ...)[3]

  @jax.jit
  def step(params, scaling, rest, opt_state, tokens):
    # Delayed scaling: the gradient with respect to the scaling state is
    # the next state (Flax's overwrite-with-gradient convention).
    (loss, rest), (grads, scaling) = jax.value_and_grad(
        loss_fn, argnums=(0, 1), has_aux=True)(params, scaling, rest, tokens)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), scaling, rest, opt_state, loss

  return step, loss_fn, (params, scaling, rest, tx.init(params))


def train(recipe: str, args, train_tokens: np.ndarray,
          eval_tokens: np.ndarray) -> tuple[np.ndarray, float]:
  """Trains under ``recipe``; returns the per-step losses and held-out loss."""
  schedule = optax.warmup_cosine_decay_schedule(
      0.0, args.lr, warmup_steps=max(1, args.steps // 10),
      decay_steps=args.steps, end_value=args.lr / 10)
  step, loss_fn, state = make_step(
      recipe, width=args.width, layers=args.layers, heads=args.heads,
      seq=args.seq, seed=args.seed, lr=schedule)
  evaluate = jax.jit(lambda p, s, r, t: loss_fn(p, s, r, t)[0])
  return fit(recipe, step, evaluate, state, train_tokens[:args.steps],
             eval_tokens)


def fit(recipe: str, step, evaluate, state, train_tokens: np.ndarray,
        eval_tokens: np.ndarray) -> tuple[np.ndarray, float]:
  """Runs ``step(*state, tokens)`` (-> next state and the loss) once per
  batch of ``train_tokens``, printing progress; returns the per-step
  losses and ``evaluate(*state[:3], tokens)``'s mean over ``eval_tokens``
  (in chunks of 64 windows). Shared with examples/moe_lm.py."""
  params, scaling, rest, opt_state = state
  steps = len(train_tokens)
  losses = np.zeros(steps)
  t0 = t1 = time.perf_counter()
  log_every = max(1, steps // 5)
  for i in range(steps):
    params, scaling, rest, opt_state, loss = step(
        params, scaling, rest, opt_state, train_tokens[i])
    losses[i] = float(loss)
    if i == 0:
      t1 = time.perf_counter()
    if not math.isfinite(losses[i]):
      print(f"[{recipe}] step {i + 1}: loss {losses[i]}, stopping")
      losses[i + 1:] = np.nan
      break
    if (i + 1) % log_every == 0 or i == 0 or i + 1 == steps:
      print(f"[{recipe}] step {i + 1}/{steps} loss {losses[i]:.4f}",
            flush=True)
  t2 = time.perf_counter()
  chunk = min(len(eval_tokens), 64)
  held = float(np.mean([
      evaluate(params, scaling, rest, eval_tokens[j:j + chunk])
      for j in range(0, len(eval_tokens), chunk)]))
  per_step = (t2 - t1) / max(1, steps - 1)
  print(f"[{recipe}] heldout {held:.4f}; first step (compiling) "
        f"{t1 - t0:.1f} s, then {per_step * 1e3:.0f} ms/step", flush=True)
  return losses, held


def plot(curves: dict[str, np.ndarray], held: dict[str, float], path: str,
         tail: int) -> None:
  """Training-loss curves (moving average) and their ratio to bf16's."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  smooth = lambda c: np.convolve(c, np.ones(tail) / tail, mode="valid")
  fig, axes = plt.subplots(1, 2 if "bf16" in curves else 1, figsize=(12, 4.5),
                           squeeze=False)
  for name, c in curves.items():
    s = smooth(c)
    steps = np.arange(tail, tail + s.size)
    axes[0, 0].plot(steps, s, label=f"{name} (held out {held[name]:.3f})")
    if "bf16" in curves:
      axes[0, 1].plot(steps, s / smooth(curves["bf16"]), label=name)
  axes[0, 0].set(xlabel="step", ylabel=f"training loss (mean of {tail} steps)",
                 title="byte-level LM on Python stdlib sources")
  axes[0, 0].legend(fontsize=7)
  if "bf16" in curves:
    axes[0, 1].axhline(1.0, color="k", lw=0.5)
    axes[0, 1].set(xlabel="step", ylabel="training loss / bf16's",
                   title="ratio to bf16")
    axes[0, 1].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=100)
  plt.close(fig)


def _positive(text: str) -> int:
  value = int(text)
  if value < 1:
    raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
  return value


def add_run_arguments(parser: argparse.ArgumentParser,
                      names: tuple[str, ...]) -> None:
  """The options every LM example takes: --quick, --recipes (of
  ``names``), --steps, --tail, --seed. Shared with examples/moe_lm.py."""
  parser.add_argument("--quick", action="store_true",
                      help="CI-sized: a tiny model, few steps, three recipes")
  parser.add_argument("--recipes", default=None,
                      help=f"comma-separated, of {','.join(names)}")
  parser.add_argument("--steps", type=_positive, default=None)
  parser.add_argument("--tail", type=_positive, default=None,
                      help="final_loss averages the last TAIL steps")
  parser.add_argument("--seed", type=int, default=0)


def resolve_run(parser: argparse.ArgumentParser, args, size: dict,
                names: tuple[str, ...]) -> list[str]:
  """The recipes to run (``--recipes``, else ``size["names"]``, each of
  ``names``); fills the options left unset from ``size`` and ``--tail``
  (a tenth of the steps by default), as usage errors where they conflict."""
  size = dict(size)
  chosen = (args.recipes or size.pop("names")).split(",")
  size.pop("names", None)
  bad = [n for n in chosen if n not in names]
  if bad:
    parser.error(f"argument --recipes: unknown {bad}, expected names of "
                 f"{','.join(names)}")
  for k, v in size.items():
    if getattr(args, k, None) is None:
      setattr(args, k, v)
  args.tail = args.tail or max(1, args.steps // 10)
  if args.tail > args.steps:
    parser.error(f"argument --tail: must be <= --steps ({args.steps})")
  return chosen


def run_recipes(names: list[str], train, args, train_tokens: np.ndarray,
                eval_tokens: np.ndarray, *, what: str):
  """``train(name, args, train_tokens, eval_tokens)`` for each recipe in
  turn; prints how long they took and, with bf16 among them, each final
  ``what`` over bf16's. Returns (curves, held-out losses, final losses: the
  mean of the last ``args.tail`` steps). Shared with examples/moe_lm.py."""
  curves, held, t0 = {}, {}, time.perf_counter()
  for name in names:
    curves[name], held[name] = train(name, args, train_tokens, eval_tokens)
  final = {n: float(np.mean(c[-args.tail:])) for n, c in curves.items()}
  print(f"{len(names)} runs in {time.perf_counter() - t0:.0f} s; final_loss "
        f"is the mean {what} of the last {args.tail} steps, "
        f"heldout_loss the loss on {len(eval_tokens)} held-out windows "
        f"(nats per byte)")
  if "bf16" in final:
    print("ratio_to_bf16 " + " ".join(
        f"{n}={final[n] / final['bf16']:.4f}" for n in names))
  return curves, held, final


def print_results(names: list[str], final: dict, held: dict) -> None:
  """The two result lines: ``final_loss ...`` then ``heldout_loss ...``."""
  print("final_loss " + " ".join(f"{n}={final[n]:.4f}" for n in names))
  print("heldout_loss " + " ".join(f"{n}={held[n]:.4f}" for n in names))


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="examples/transformer_lm.py")
  add_run_arguments(parser, RECIPES)
  parser.add_argument("--out", default="transformer_lm.png")
  args = parser.parse_args(argv)
  size = (dict(width=32, layers=1, heads=2, seq=32, batch=8, steps=24, lr=3e-3,
               windows=32, names="bf16,fp8_delayed,nvfp4") if args.quick else
          dict(width=128, layers=4, heads=4, seq=64, batch=8, steps=400,
               lr=2e-3, windows=256, names=",".join(RECIPES)))
  names = resolve_run(parser, args, size, RECIPES)
  train_bytes, held_bytes, about = load_corpus()
  print(about)
  train_tokens = batches(train_bytes, args.steps, args.batch, args.seq,
                         args.seed)
  eval_tokens = heldout_windows(held_bytes, args.windows, args.seq)
  model = ByteLM(width=args.width, layers=args.layers, heads=args.heads,
                 seq=args.seq, rngs=nnx.Rngs(args.seed))
  n_params = sum(p.size for p in jax.tree.leaves(nnx.state(model, nnx.Param)))
  print(f"model {n_params} parameters: width {args.width}, {args.layers} "
        f"blocks of {args.heads} heads, context {args.seq} bytes; batch "
        f"{args.batch}, {args.steps} steps")
  curves, held, final = run_recipes(names, train, args, train_tokens,
                                    eval_tokens, what="training loss")
  plot(curves, held, args.out, args.tail)
  print(f"wrote {args.out}")
  print_results(names, final, held)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
