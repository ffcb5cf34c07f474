"""The ``cast`` method: draw float32 with jax.random, round with jaxfp8.cast.

Works for every sampler and every parameter (traced, per-element, in any
format). With ``rounding="nearest"`` the result is exactly
``jaxfp8.cast(jax.random.<dist>(key, ..., jnp.float32), fmt)``: the law of the
float32 draw rounded to nearest-even, saturating. ``rounding="stochastic"``
splits the key once and spends another 32 random bits per sample on the
rounding. Cost: 32 random bits (64 when stochastic) per sample, plus whatever
jax.random spends on the float32 transformation.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics import rounding as rounding_lib


def sample(key: jax.Array, dist: str, fmt: formats.Format,
           arrays: dict[str, jax.Array], static: dict[str, Any],
           rounding: str = "nearest"):
  """Draws ``jax.random.<dist>(key, dtype=float32, **static, **arrays)`` and
  rounds it into ``fmt``; returns a native array or uint8 codes.

  The draw is jax.random's own (compiled once per distribution and shape,
  shared with direct jax.random calls), the rounding jaxfp8's (once per
  format and shape); under an enclosing ``jit`` they fuse.
  """
  rand = None
  if rounding == "stochastic":
    key, rkey = jax.random.split(key)
  x = getattr(jax.random, dist)(key, dtype=jnp.float32, **static, **arrays)
  if rounding == "stochastic":
    rand = jax.random.bits(rkey, x.shape, jnp.uint32)
  if fmt.native:
    out = rounding_lib.round_to(x, fmt, rounding=rounding, rand=rand)
  else:
    out = rounding_lib.round_to_codes(x, fmt, rounding=rounding, rand=rand)
  if not fmt.signed:
    # E8M0 has no zero: a float32 draw of exactly 0 stands for a positive
    # real below float32's resolution, whose nearest value is the smallest.
    out = jnp.where(x == 0, jnp.asarray(fmt.values[:1].astype(fmt.dtype))[0],
                    out)
  return out
