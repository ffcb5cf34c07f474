"""The exact and table methods at 2^21 samples (the table method's DDG tree
sampler above all): laws, keys of every implementation, the tree's overflow
fallback, and the bit budget.

``exact`` is held to the exact rounded law, ``table`` to its own quantized
law, by a chi-square test (small bins pooled) and total variation, with
fixed keys; tests/random/test_random.py covers every distribution at 2^20.
"""
import zlib

import jax
import numpy as np
import pytest

import jaxfp8
from jaxfp8 import formats
from jaxfp8._src.random import exact_method
from jaxfp8._src.random import laws
from jaxfp8._src.random import table_method
from jaxfp8._src.random import tree_plan
from stats import chi_square

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
  # 2^20 samples: the rbg implementations run 60x slower at the suite's -O0.
  key = jax.random.key(11, impl=impl)
  x = R.normal(key, (N // 2,), "e4m3", method=method)
  assert_law(counts_of(x, "float8_e4m3fn"),
             law("normal", "float8_e4m3fn", method, {}))
  again = R.normal(key, (N // 2,), "e4m3", method=method)
  np.testing.assert_array_equal(np.asarray(x).view(np.uint8),
                                np.asarray(again).view(np.uint8))


@pytest.mark.parametrize("shape", [(1,), (3, 5), (127,), (1000, 3)])
def test_odd_shapes(shape):
  x = R.normal(jax.random.key(2), shape, "e5m2", method="exact")
  assert x.shape == shape and x.dtype == formats.get("e5m2").dtype


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float4_e2m1fn"])
def test_overflowing_pools_keep_the_law(fmt):
  """A call whose pool is far too small for its deep samples takes the
  fresh-bits branch, and that branch samples the same law. Had the call used
  its pool instead, every deep sample past the pool's few bytes would read
  zeros, and the law test would fail. The fresh branch reads nothing of the
  pool: any pool that overflows gives the same samples, and they differ from
  the pooled call's."""
  f = formats.get(fmt)
  _, probs = laws.rounded_law("normal", f)
  p = exact_method.plan("normal", f.name, ())
  key = jax.random.key(5)
  needed = tree_plan.pool_for(p, N)
  small = tree_plan.Pool(n_bytes=128, slots=128)
  assert small.n_bytes < needed.n_bytes and small.slots < needed.slots
  x = exact_method.sample_plan(key, p, (N,), f, pool=small)
  assert_law(counts_of(x, f.name), probs)
  smaller = exact_method.sample_plan(key, p, (N,), f,
                                     pool=tree_plan.Pool(n_bytes=64, slots=64))
  np.testing.assert_array_equal(np.asarray(smaller, np.float32),
                                np.asarray(x, np.float32))
  pooled = exact_method.sample_plan(key, p, (N,), f)
  assert not np.array_equal(np.asarray(pooled, np.float32),
                            np.asarray(x, np.float32))


def test_bits_near_the_entropy():
  """At 2^22 samples, every word drawn counted: <= 10 bits for the exact
  normal laws in e4m3fn and e5m2 (entropy 6.45 and 5.49), and no more for
  the table method's law (its DDG tree has two levels)."""
  for fmt in ("float8_e4m3fn", "float8_e5m2"):
    f = formats.get(fmt)
    exact = exact_method.bits_per_sample("normal", f, {})
    assert exact <= 10
    assert table_method.bits_per_sample("normal", f, {}) <= exact
  # Float4: 16 values (entropy 3.0): one byte and a rare second.
  assert exact_method.bits_per_sample("normal", formats.get("e2m1"), {}) < 8.5


@pytest.mark.parametrize("method", ["exact", "table"])
@pytest.mark.parametrize("shape", [(5000,), (4096,), (50, 100)])
def test_a_call_past_one_pass_is_chunks_of_split_keys(shape, method):
  """Past a pass (2^31 samples; here a chunk of 1024 stands for 2^30), a
  call's flat samples are chunks, chunk c a pass of key c of
  ``split(key, chunks)``, the last one cut to the call's size."""
  f = formats.get("float8_e4m3fn")
  p = (exact_method.plan("normal", f.name, ()) if method == "exact"
       else table_method.sampling_plan("normal", f.name, (), 16))
  assert p.kind == "ddg"
  key = jax.random.key(9)
  x = exact_method.sample_plan(key, p, shape, f, chunk=1024)
  assert x.shape == shape and x.dtype == f.dtype
  n = int(np.prod(shape))
  chunks = jax.random.split(key, -(-n // 1024))
  want = np.concatenate([np.asarray(exact_method.sample_plan(k, p, (1024,), f))
                         for k in chunks])[:n]
  np.testing.assert_array_equal(np.asarray(x).view(np.uint8).ravel(),
                                want.view(np.uint8))


# Every sampler of jaxfp8.random that the exact and table methods serve (the
# DDG trees, pure tables, bernoulli and rademacher), and a call to each.
LARGE_CASES = [
    ("normal e4m3", lambda k, s, m: R.normal(k, s, "e4m3", method=m)),
    ("normal e5m2", lambda k, s, m: R.normal(k, s, "e5m2", method=m)),
    ("normal float6", lambda k, s, m: R.normal(k, s, "float6_e2m3fn",
                                               method=m)),
    ("normal float4", lambda k, s, m: R.normal(k, s, "e2m1", method=m)),
    ("uniform e4m3", lambda k, s, m: R.uniform(k, s, "e4m3", method=m)),
    ("uniform float4", lambda k, s, m: R.uniform(k, s, "e2m1", method=m)),
    ("truncated_normal", lambda k, s, m: R.truncated_normal(
        k, -2.0, 3.0, s, "e4m3", method=m)),
    ("exponential", lambda k, s, m: R.exponential(k, s, "e4m3", method=m)),
    ("cauchy", lambda k, s, m: R.cauchy(k, s, "e4m3", method=m)),
    ("gamma", lambda k, s, m: R.gamma(k, 2.0, s, "e4m3", method=m)),
    ("bernoulli", lambda k, s, m: R.bernoulli(k, 0.3, s, method=m)),
    ("rademacher", lambda k, s, m: R.rademacher(k, s, "e4m3", method=m)),
]


@pytest.mark.parametrize("method", ["exact", "table"])
@pytest.mark.parametrize("case", LARGE_CASES, ids=lambda c: c[0])
def test_2_to_31_samples_and_more_under_eval_shape(case, method):
  """2^31 samples or more: the sampler's positions and ranks are int32 (no
  x64), so a call draws chunks; it raised OverflowError while tracing.
  Shapes only (``jax.eval_shape``): nothing is allocated."""
  _, call = case
  for shape in [(2, 1 << 30), (1 << 31) - 1, (3, (1 << 31) + 5)]:
    out = jax.eval_shape(lambda k, s=shape: call(k, s, method),
                         jax.random.key(0))
    assert out.shape == (shape if isinstance(shape, tuple) else (shape,))
