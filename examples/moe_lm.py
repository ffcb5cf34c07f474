"""Trains a small byte-level mixture-of-experts language model once per recipe.

The transformer of ``examples/transformer_lm.py`` (same corpus, held-out
files, embeddings, attention, optimizer and schedule) with its GELU MLP
replaced by a mixture-of-experts FFN: a router (``nnx.Linear``, float32)
picks the top 2 of 8 experts for every token, the tokens are sorted by
expert, and each expert's two GEMMs run as grouped GEMMs
(``jax.lax.ragged_dot``, kept as the layer's ``up`` and ``down``
attributes); each token's output is the router-weighted sum of its two
experts' (weights renormalized over the two). A load-balancing loss
(Switch Transformer's: ``experts * sum_e f_e * P_e``, ``f_e`` the share of
assignments to expert ``e``, ``P_e`` its mean router probability) is added
with weight ``--aux`` (0.01).

Each recipe trains the same model from the same initial parameters on the
same batches: ``jaxfp8.recipes.nnx_recipe`` turns the blocks' attention
``nnx.Linear`` layers into the recipe's dense GEMMs and the experts'
``ragged_dot`` attributes into its grouped GEMMs
(:func:`jaxfp8.recipes.ragged_dot`: every expert a tensor of its own, the
weight gradient's token blocks restarting at each expert's first token).
The output head and the routers stay in float32 in every run; the NVFP4
run also keeps the last block in high precision, as examples/transformer_lm.py
does (the NVFP4 paper's practice).

Usage::

    python examples/moe_lm.py                  # bf16, fp8_current, fp8_blockwise, mxfp8, nvfp4
    python examples/moe_lm.py --quick          # CI-sized
    python examples/moe_lm.py --recipes bf16,fp8_delayed --steps 100

It prints progress lines per run, then ``final_loss bf16=... ...`` (the mean
training loss, cross-entropy without the balancing term, of the last
``--tail`` steps), ``ratio_to_bf16 ...`` and ``heldout_loss ...``.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

from flax import nnx
import jax
import jax.numpy as jnp
import optax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transformer_lm  # pylint: disable=g-import-not-at-top,wrong-import-position

from jaxfp8 import recipes  # pylint: disable=g-import-not-at-top,wrong-import-position

RECIPES = ("bf16", "fp8_current", "fp8_delayed", "fp8_blockwise", "mxfp8",
           "nvfp4")
DEFAULT = ("bf16", "fp8_current", "fp8_blockwise", "mxfp8", "nvfp4")


class MoE(nnx.Module):
  """Top-k routed experts, each a GELU MLP, as grouped GEMMs."""

  def __init__(self, width: int, hidden: int, experts: int, top_k: int, *,
               rngs: nnx.Rngs):
    self.experts, self.top_k = experts, top_k
    self.router = nnx.Linear(width, experts, use_bias=False, rngs=rngs)
    self.w1 = nnx.Param(nnx.initializers.normal(1 / math.sqrt(width))(
        rngs.params(), (experts, width, hidden)))
    self.w2 = nnx.Param(nnx.initializers.normal(1 / math.sqrt(hidden))(
        rngs.params(), (experts, hidden, width)))
    self.up = jax.lax.ragged_dot
    self.down = jax.lax.ragged_dot

  def __call__(self, x):
    shape = x.shape
    tokens = x.reshape(-1, shape[-1])
    probs = jax.nn.softmax(self.router(tokens), axis=-1)
    top_p, top_e = jax.lax.top_k(probs, self.top_k)
    top_p = top_p / top_p.sum(axis=-1, keepdims=True)
    # Assignments sorted by expert: row r of the grouped GEMMs is token
    # token_of[r]'s copy for expert flat[order[r]].
    flat = top_e.reshape(-1)
    order = jnp.argsort(flat, stable=True)
    token_of = order // self.top_k
    sizes = jnp.bincount(flat, length=self.experts).astype(jnp.int32)
    h = jax.nn.gelu(self.up(tokens[token_of], self.w1[...], sizes))
    out = self.down(h, self.w2[...], sizes)
    weight = top_p.reshape(-1)[order][:, None]
    y = jnp.zeros_like(tokens).at[token_of].add(out * weight)
    share = sizes / flat.size
    balance = self.experts * jnp.sum(share * probs.mean(axis=0))
    return y.reshape(shape), balance


class Block(nnx.Module):
  """Pre-LN block: the attention of transformer_lm, then the experts."""

  def __init__(self, width: int, heads: int, experts: int, top_k: int, *,
               rngs: nnx.Rngs):
    self.heads = heads
    self.ln1 = nnx.LayerNorm(width, rngs=rngs)
    self.qkv = nnx.Linear(width, 3 * width, rngs=rngs)
    self.proj = nnx.Linear(width, width, rngs=rngs)
    self.ln2 = nnx.LayerNorm(width, rngs=rngs)
    self.moe = MoE(width, 2 * width, experts, top_k, rngs=rngs)

  def __call__(self, x):
    x = transformer_lm.self_attention(self, x)
    y, balance = self.moe(self.ln2(x))
    return x + y, balance


class MoELM(nnx.Module):
  """Decoder-only byte-level language model with MoE FFNs."""

  def __init__(self, *, width: int, layers: int, heads: int, seq: int,
               experts: int, top_k: int, rngs: nnx.Rngs):
    init = nnx.initializers.normal(0.02)
    self.embed = nnx.Embed(256, width, embedding_init=init, rngs=rngs)
    self.pos = nnx.Embed(seq, width, embedding_init=init, rngs=rngs)
    self.blocks = nnx.List([Block(width, heads, experts, top_k, rngs=rngs)
                            for _ in range(layers)])
    self.ln = nnx.LayerNorm(width, rngs=rngs)
    self.head = nnx.Linear(width, 256, rngs=rngs)

  def __call__(self, tokens):
    x = self.embed(tokens) + self.pos(jnp.arange(tokens.shape[-1]))
    balance = 0.0
    for block in self.blocks:
      x, b = block(x)
      balance = balance + b
    return self.head(self.ln(x)), balance / len(self.blocks)


def rules(recipe: str, layers: int) -> list[tuple[str, str | None]]:
  """Which GEMMs train under ``recipe`` (see the module docstring)."""
  hp = [("^head$", None), ("/router$", None)]
  if recipe.startswith("nvfp4"):
    hp.append((f"^blocks/{layers - 1}/", None))
  return hp + [(".*", recipe)]


def make_step(recipe: str, args):
  """(step, loss_fn, state) of a fresh MoELM under ``recipe``, as
  transformer_lm.make_step; the loss adds ``args.aux`` times the balance."""
  model = MoELM(width=args.width, layers=args.layers, heads=args.heads,
                seq=args.seq, experts=args.experts, top_k=args.top_k,
                rngs=nnx.Rngs(args.seed))
  recipes.nnx_recipe(model, rules(recipe, args.layers),
                     rngs=nnx.Rngs(recipe=args.seed + 1),
                     experts=args.experts)
  schedule = optax.warmup_cosine_decay_schedule(
      0.0, args.lr, warmup_steps=max(1, args.steps // 10),
      decay_steps=args.steps, end_value=args.lr / 10)
  tx = optax.chain(optax.clip_by_global_norm(1.0),
                   optax.adamw(schedule, b1=0.9, b2=0.95, weight_decay=0.1))
  graphdef, params, scaling, rest = nnx.split(model, nnx.Param,
                                              recipes.NnxRecipeState, ...)

  def loss_fn(params, scaling, rest, tokens):
    m = nnx.merge(graphdef, params, scaling, rest, copy=True)
    tokens = tokens.astype(jnp.int32)
    logits, balance = m(tokens[:, :-1])
    ce = optax.softmax_cross_entropy_with_integer_labels(
        logits, tokens[:, 1:]).mean()
    rest = nnx.split(m, nnx.Param, recipes.NnxRecipeState, ...)[3]
    return ce + args.aux * balance, (ce, rest)

  @jax.jit
  def step(params, scaling, rest, opt_state, tokens):
    (_, (ce, rest)), (grads, scaling) = jax.value_and_grad(
        loss_fn, argnums=(0, 1), has_aux=True)(params, scaling, rest, tokens)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), scaling, rest, opt_state, ce

  return step, loss_fn, (params, scaling, rest, tx.init(params))


def train(recipe: str, args, train_tokens, eval_tokens):
  """Trains under ``recipe``: (per-step cross-entropy, held-out loss)."""
  step, loss_fn, state = make_step(recipe, args)
  evaluate = jax.jit(lambda p, s, r, t: loss_fn(p, s, r, t)[1][0])
  return transformer_lm.fit(recipe, step, evaluate, state,
                            train_tokens[:args.steps], eval_tokens)


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog="examples/moe_lm.py")
  transformer_lm.add_run_arguments(parser, RECIPES)
  parser.add_argument("--aux", type=float, default=0.01,
                      help="weight of the load-balancing loss")
  args = parser.parse_args(argv)
  # --quick: two blocks, so that NVFP4 (its last block in high precision)
  # quantizes one.
  size = (dict(width=32, layers=2, heads=2, seq=32, batch=8, steps=24,
               lr=3e-3, windows=32, names="bf16,fp8_delayed,nvfp4")
          if args.quick else
          dict(width=128, layers=4, heads=4, seq=64, batch=8, steps=400,
               lr=2e-3, windows=256, names=",".join(DEFAULT)))
  names = transformer_lm.resolve_run(parser, args, size, RECIPES)
  args.experts, args.top_k = 8, 2
  train_bytes, held_bytes, about = transformer_lm.load_corpus()
  print(about)
  train_tokens = transformer_lm.batches(train_bytes, args.steps, args.batch,
                                        args.seq, args.seed)
  eval_tokens = transformer_lm.heldout_windows(held_bytes, args.windows,
                                               args.seq)
  model = MoELM(width=args.width, layers=args.layers, heads=args.heads,
                seq=args.seq, experts=args.experts, top_k=args.top_k,
                rngs=nnx.Rngs(args.seed))
  n_params = sum(p.size for p in jax.tree.leaves(nnx.state(model, nnx.Param)))
  print(f"model {n_params} parameters: width {args.width}, {args.layers} "
        f"blocks of {args.heads} heads and {args.experts} experts (top "
        f"{args.top_k}), context {args.seq} bytes; batch {args.batch}, "
        f"{args.steps} steps")
  _, held, final = transformer_lm.run_recipes(
      names, train, args, train_tokens, eval_tokens,
      what="training cross-entropy")
  transformer_lm.print_results(names, final, held)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
