"""Reference quantization for the recipe tests, in float64.

:func:`quantized64` quantizes an operand along a GEMM's contracting axes by
the quantizers' own public functions (``jaxfp8.policy`` scaling,
``mx.quantize``, the blockwise and NVFP4 quantizers, the Hadamard
transform) and brings it back to the operand's layout in float64, the
transform undone exactly (its matrix is orthogonal): references built from
it share no layout code with the recipe core. Shared by the dense
(test_recipe_core.py) and grouped (test_ragged.py) core tests.
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxfp8 import mx
from jaxfp8 import policy
from jaxfp8 import recipes
from jaxfp8._src.mx import blockwise
from jaxfp8._src.mx import hadamard
from jaxfp8._src.mx import nvfp4


def free_dims(ndim, contract, batch):
  return [d for d in range(ndim) if d not in contract and d not in batch]


def h16():
  h = np.array([[1.0]])
  while h.shape[0] < 16:
    h = np.block([[h, h], [h, -h]])
  return h


def unrht64(v, signs):
  """The inverse transform in float64: (1/4) diag(s) H16 on each chunk."""
  s = np.asarray(signs, np.float64)
  chunks = v.reshape(*v.shape[:-1], -1, 16)
  return (np.einsum("ij,...j->...i", h16(), chunks) * s / 4).reshape(v.shape)


@functools.partial(jax.jit, static_argnums=1)
def _tensor_values(v, q, state):
  # Jitted: run op by op, per-tensor scaling compiled a program per operation
  # (the block quantizers below are jitted functions of their own).
  if q.kind == "cast":
    return v.astype(q.format).astype(jnp.float32)
  s = state if q.delayed else policy.CurrentScaling(
      q.format, q.margin, q.scale == "pow2")
  c, scale = policy.quantize(v, q.format, s.scale_for(v)), s.scale_for(v)
  return policy.dequantize(c, scale)


@functools.partial(jax.jit, static_argnums=1)
def _block_values(v, q, key):
  # Jitted: quantize and dequantize in one program per quantizer and shape
  # (each is a jitted function of its own, two programs apart).
  if q.kind == "mx":
    return mx.quantize(
        v, q.format, block_size=q.block_size, scale_mode=q.scale,
        rounding=q.rounding, key=key, pad=True).dequantize()
  if q.kind == "block":
    return blockwise.dequantize(*blockwise.quantize(
        v, block=q.block, fmt=q.format, scale=q.scale), block=q.block)
  return nvfp4.dequantize(*nvfp4.quantize(
      v, block=q.block, tensor_scale=q.scale, rounding=q.rounding, key=key),
                          block=q.block)


@functools.partial(jax.jit, static_argnums=1)
def _nvfp4_values(v, q, rand):
  # The NVFP4 rule with the random words given (nvfp4.values equals
  # dequantize(*quantize(...)) bit for bit: tests/mx/test_quantized_values.py).
  return nvfp4.values(v, rand, q.block, tensor_scale=q.scale,
                      scale_mode="floor", rounding=q.rounding)


def _values(v, q, key, state, rand=None):
  """float32 values of the view ``v`` (..., M, K) quantized by ``q``."""
  if rand is not None:
    assert q.kind == "nvfp4" and q.stochastic, q
    return np.asarray(_nvfp4_values(v, q, jnp.asarray(rand, jnp.uint32)))
  if q.kind in ("cast", "tensor"):
    return np.asarray(_tensor_values(v, q, state))
  return np.asarray(_block_values(v, q, key))


def quantized64(t, batch, contract, q, *, key=None, signs=None, state=None,
                rand=None):
  """float64 values of ``t`` quantized by ``q`` along ``contract`` (None:
  ``t`` itself), back in ``t``'s own layout; ``rand``: the words an NVFP4
  stochastic rounding reads, one per element of the view, instead of
  drawing them with ``key``."""
  t = np.asarray(t, np.float32)
  if q is None:
    return t.astype(np.float64)
  free = free_dims(t.ndim, contract, batch)
  perm = list(batch) + free + list(contract)
  tt = t.transpose(perm)
  nb, nf = len(batch), len(free)
  shape = tt.shape[:nb] + (int(np.prod(tt.shape[nb:nb + nf])),
                           int(np.prod(tt.shape[nb + nf:])))
  v = tt.reshape(shape)
  if key is None:  # no words drawn by shape: the view may grow
    v, rand = _padded(v), None if rand is None else _padded(rand)
  v = jax.device_put(v)
  if signs is not None:
    v = hadamard.rht(v, signs)
  out = _values(v, q, key, state, rand).astype(np.float64)
  if signs is not None:
    out = unrht64(out, signs)
  out = out[..., :shape[-2], :shape[-1]]
  return out.reshape(tt.shape).transpose(np.argsort(perm))


def _bucket(n: int) -> int:
  return max(256, 1 << (n - 1).bit_length())


def _padded(v):
  """``v`` (..., R, C) with zero rows and columns up to a power of two (at
  least 256), so that views of many sizes (a grouped GEMM's groups, the
  tests' shapes) share a few compiled quantizers. Zeros change no
  quantization of the others (no block's or tensor's amax, no 16-chunk's
  transform: blocks and chunks start at 0) and quantize to zero."""
  v = np.asarray(v)
  r, c = v.shape[-2:]
  pad = [(0, 0)] * (v.ndim - 2) + [(0, _bucket(r) - r), (0, _bucket(c) - c)]
  return np.pad(v, pad)


def gemm_keys(recipe, key):
  """The keys of each GEMM's consumers, as the core's docstring says."""
  r = recipe
  users = {g: (["rht"] if any(q is not None and q.transform
                              for q in getattr(r, g)) else [])
           + [role for q, role in zip(order, roles)
              if q is not None and q.stochastic]
           for g, order, roles in (
               ("fwd", r.fwd, ("x", "w")),
               ("dgrad", r.dgrad, ("dy", "w")),
               ("wgrad", (r.wgrad[1], r.wgrad[0]), ("dy", "x")))}
  assert not users["fwd"]  # no named recipe needs a forward key
  kd, kw = jax.random.split(key)
  out = {}
  for g, k in (("dgrad", kd), ("wgrad", kw)):
    ks = [k] if len(users[g]) == 1 else list(jax.random.split(k, len(users[g])))
    out[g] = dict(zip(users[g], ks))
  return out


def delayed_state(recipe):
  """A delayed state whose scales are not 1: two amaxes recorded."""
  st = recipes.init_state(recipe, history_length=4)
  if st is None:
    return None
  return {r: s.update(jnp.float32(3.0)).update(jnp.float32(5.0))
          for r, s in st.items()}


def expert_state(recipe, scales):
  """A delayed recipe's per-expert state (None for others) whose experts'
  scales differ: amaxes ``scales[g]`` and ``3 scales[g]`` recorded."""
  st = recipes.init_state(recipe, history_length=4, experts=len(scales))
  if st is None:
    return None
  amax = jnp.array(scales, jnp.float32)
  up = jax.vmap(lambda s, a: s.update(a).update(3 * a))
  return {role: up(s, amax) for role, s in st.items()}


def token_align(pair):
  """The group alignment of a GEMM contracting the tokens (the grouped
  core's ``B``), from its quantizers' token-axis blocks."""
  lengths = [1]
  for q in pair:
    if q is not None and q.kind == "mx":
      lengths.append(q.block_size or 32)
    elif q is not None and q.kind in ("block", "nvfp4"):
      lengths.append(q.block[-1])
    if q is not None and q.transform:
      lengths.append(16)
  return math.lcm(*lengths)


def group_amaxes(t, sizes):
  """The largest magnitude of each group's rows of ``t`` (groups of
  ``sizes`` consecutive rows from row 0; 0 for an empty one)."""
  ends = np.cumsum(sizes)
  return [np.abs(t[e - n:e]).max(initial=0.0) for n, e in zip(sizes, ends)]


def rel(a, b):
  a = np.asarray(a, np.float64)
  return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)
