"""The exact and table methods at 2^21 samples (the DDG tree sampler both
use above all): laws, keys of every implementation, the tree's overflow loop,
its pieces (SWAR flags, ranks, the random stream) against NumPy, and the bit
budget.

``exact`` is held to the exact rounded law, ``table`` to its own quantized
law, by a chi-square test (small bins pooled) and total variation, with
fixed keys; tests/test_random.py covers every distribution at 2^20.
"""
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxfp8
from jaxfp8 import formats
from jaxfp8._src import laws
from jaxfp8._src.random import bits as bits_lib
from jaxfp8._src.random import ddg
from jaxfp8._src.random import exact_method
from jaxfp8._src.random import table_method
from stats import chi_square
from stats import tree_law

R = jaxfp8.random
FORMATS = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float4_e2m1fn",
           "float6_e2m3fn")
N = 2**21

CASES = [
    ("normal", {}, lambda k, s, f, m: R.normal(k, s, f, method=m)),
    ("uniform", {}, lambda k, s, f, m: R.uniform(k, s, f, method=m)),
    ("cauchy", {}, lambda k, s, f, m: R.cauchy(k, s, f, method=m)),
    ("truncated_normal", {"lower": -2.0, "upper": 3.0},
     lambda k, s, f, m: R.truncated_normal(k, -2.0, 3.0, s, f, method=m)),
]


def counts_of(x, fmt) -> np.ndarray:
  f = formats.get(fmt)
  codes = np.asarray(x.codes if isinstance(x, jaxfp8.CodeArray)
                     else np.asarray(x).view(np.uint8)).ravel()
  index = {int(c): i for i, c in enumerate(f.codes)}
  by_code = np.bincount(codes, minlength=256)
  assert set(np.flatnonzero(by_code)) <= set(index), "codes off the format"
  out = np.zeros(len(f.values), np.int64)
  for c, i in index.items():
    out[i] = by_code[c]
  return out


def law(dist, fmt, method, params):
  if method == "table":
    return table_method.table_law(dist, fmt, **params)[1]
  return laws.rounded_law(dist, fmt, **params)[1]


def assert_law(counts, probs):
  stat, dof, p = chi_square(counts, probs)
  tv = laws.total_variation(counts / counts.sum(), probs)
  assert p > 1e-4, f"chi-square {stat:.1f} on {dof} dof, p={p:.2e}"
  assert tv < 0.01, f"TV {tv:.4f}"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("method", ["exact", "table"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_law_at_2_to_21(case, method, fmt):
  dist, params, call = case
  key = jax.random.key(zlib.crc32(f"m{dist}{method}{fmt}".encode()))
  x = call(key, (N,), fmt, method)
  assert_law(counts_of(x, fmt), law(dist, fmt, method, params))


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg", "unsafe_rbg"])
@pytest.mark.parametrize("method", ["exact", "table"])
def test_every_key_implementation(impl, method):
  key = jax.random.key(11, impl=impl)
  x = R.normal(key, (N,), "e4m3", method=method)
  assert_law(counts_of(x, "float8_e4m3fn"),
             law("normal", "float8_e4m3fn", method, {}))
  again = R.normal(key, (N,), "e4m3", method=method)
  np.testing.assert_array_equal(np.asarray(x).view(np.uint8),
                                np.asarray(again).view(np.uint8))


@pytest.mark.parametrize("shape", [(1,), (3, 5), (127,), (1000, 3)])
def test_odd_shapes(shape):
  x = R.normal(jax.random.key(2), shape, "e5m2", method="exact")
  assert x.shape == shape and x.dtype == formats.get("e5m2").dtype


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float4_e2m1fn"])
@pytest.mark.parametrize("pools", ["tiny", "mean"])
def test_overflowing_pools_keep_the_law(fmt, pools):
  """With pools of 64 entries every chunk overflows: the loop draws every
  deep sample again, and the law must not change. With a pool of the mean
  bytes a chunk needs (deep bytes plus rare pairs), about half the chunks
  overflow, each on its own."""
  f = formats.get(fmt)
  _, probs = laws.rounded_law("normal", f)
  p = exact_method.plan("normal", f.name, ())
  assert p.kind == "ddg" and p.levels == 4
  chunk = ddg.layout((N,)).chunk
  p1, rare = p.fractions
  caps = (64, 64) if pools == "tiny" else (
      int(chunk * (p1 + 2 * rare)) // 8 * 8, ddg.pool_sizes(p, chunk)[1])
  x = ddg.sample_plan(jax.random.key(5), p, (N,), f, caps=caps)
  assert_law(counts_of(x, f.name), probs)


def test_bits_near_the_entropy():
  """At 2^22 samples, every word drawn counted (the pools of its chunks of
  2^16 samples included): about 10 bits for normal in e4m3fn and e5m2 by
  both methods (entropy 6.45 and 5.49; 18 and 16 before the DDG tree), and
  well under 18 for the float4/float6 laws whose masses are irrational."""
  for fmt, most in [("float8_e4m3fn", 10.05), ("float8_e5m2", 9.25),
                    ("float4_e2m1fn", 8.4), ("float6_e2m3fn", 8.85),
                    ("float6_e3m2fn", 8.75)]:
    f = formats.get(fmt)
    assert exact_method.plan("normal", fmt, ()).kind == "ddg"
    assert exact_method.bits_per_sample("normal", f, {}) <= most
    assert table_method.bits_per_sample("normal", f, {}) <= most


LAWS = [("normal", {}), ("uniform", {}), ("uniform", {"minval": 0.0,
                                                       "maxval": 3.0}),
        ("cauchy", {}), ("laplace", {}), ("exponential", {}),
        ("truncated_normal", {"lower": -2.0, "upper": 3.0})]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", LAWS, ids=lambda c: c[0] + str(len(c[1])))
def test_exact_plans_hold_the_law_within_2_to_minus_32(case, fmt):
  dist, params = case
  _, probs = laws.rounded_law(dist, fmt, **params)
  plan = exact_method.plan(dist, fmt, tuple(sorted(params.items())))
  q = tree_law(plan, fmt)
  np.testing.assert_array_equal(q, laws.quantize(probs, 32))
  assert np.all(np.abs(q / 2**32 - probs) < 2**-32)
  if plan.kind == "ddg":  # four levels at most, the last without deep entries
    assert len(plan.deep) == 4 and plan.deep[-1] == 0
    sizes = [256] + [d * 256 for d in plan.deep[:-1]]
    assert list(np.diff(list(plan.offset) + [len(plan.main)])) == sizes


def test_group_flags_compare_every_byte():
  rng = np.random.default_rng(0)
  w = rng.integers(0, 2**32, (8, 64), dtype=np.uint32)
  w[0, :4] = [0, 0xFFFFFFFF, 0x80808080, 0x7F7F7F7F]
  byte = (w[:, None, :] >> (8 * np.arange(4, dtype=np.uint32))[None, :, None]
          ) & 255  # (8, 4, G): byte b of word j is bit 4 j + b
  weight = (np.uint64(1) << np.arange(32, dtype=np.uint64)).reshape(8, 4, 1)
  for t in [0, 1, 2, 127, 128, 129, 196, 255, 256]:
    want = np.sum((byte >= t) * weight, axis=(0, 1)).astype(np.uint32)
    got = np.asarray(ddg.group_flags(jnp.asarray(w), jnp.int32(t)))
    np.testing.assert_array_equal(got, want, err_msg=f"t={t}")


@pytest.mark.parametrize("p", [0.0, 0.01, 0.3, 1.0])
def test_select_finds_the_flagged_samples_in_rank_order(p):
  rng = np.random.default_rng(1)
  mask = rng.random((32, 96)) < p  # (lane, group)
  flags = np.sum(mask * (np.uint64(1) << np.arange(32, dtype=np.uint64)
                         )[:, None], axis=0).astype(np.uint32)
  incl = np.cumsum(mask.sum(axis=0)).astype(np.int32)
  want = [(l, g) for g in range(96) for l in range(32) if mask[l, g]]
  size = 64
  for start in range(0, max(len(want), 1), size):
    l, g, valid = (np.asarray(a) for a in ddg.select(
        jnp.asarray(incl), jnp.asarray(flags), start, size))
    got = list(zip(l[valid].tolist(), g[valid].tolist()))
    assert got == want[start:start + size]
    assert valid.sum() == len(want[start:start + size])


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg", "unsafe_rbg"])
def test_stream_block(impl):
  """Threefry keys: row r is JAX's own threefry_2x32 on counters start + r n
  .. start + (r + 1) n - 1 (both words of each hash); other implementations:
  jax.random.bits of fold_in(key, start). Raw keys work, and so does a
  traced start."""
  key = jax.random.key(7, impl=impl)
  rows, n, start = 3, 2000, 4096
  block = jax.jit(bits_lib.stream_block, static_argnums=(1, 2))
  got = np.asarray(block(key, rows, n, start))
  if impl == "threefry2x32":
    from jax.extend import random as jex_random  # pylint: disable=g-import-not-at-top
    want = np.stack([jex_random.threefry_2x32(
        jax.random.key_data(key),
        jnp.arange(start + r * n, start + (r + 1) * n, dtype=jnp.uint32))
                     for r in range(rows)])
    np.testing.assert_array_equal(np.asarray(bits_lib.stream_block(
        jax.random.key_data(key), rows, n, start)), got)
  else:
    want = jax.random.bits(jax.random.fold_in(key, start), (rows, n),
                           jnp.uint32)
  np.testing.assert_array_equal(got, np.asarray(want))
  got = got.ravel()
  n = got.size
  bit = (got[:, None] >> np.arange(32, dtype=np.uint32)) & 1
  assert np.all(np.abs(bit.mean(axis=0) - 0.5) < 5 * 0.5 / np.sqrt(n))
