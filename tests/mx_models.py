"""Flax models the MX Flax tests share (linen and nnx), and their data."""
from __future__ import annotations

from flax import linen as nn
from flax import nnx
import jax


class MLP(nn.Module):

  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(64, name="hidden")(x))
    x = nn.relu(nn.DenseGeneral(64, name="mid")(x))
    return nn.Dense(8, name="head")(x)


def data():
  x = jax.random.normal(jax.random.key(0), (16, 32))
  y = jax.random.normal(jax.random.key(1), (16, 8))
  return x, y


class NnxMLP(nnx.Module):

  def __init__(self, rngs):
    self.hidden = nnx.Linear(32, 64, rngs=rngs)
    self.mix = nnx.Einsum("bi,io->bo", (64, 64), (64,), rngs=rngs)
    self.head = nnx.Linear(64, 8, rngs=rngs)

  def __call__(self, x):
    return self.head(nnx.relu(self.mix(nnx.relu(self.hidden(x)))))
