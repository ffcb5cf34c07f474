"""jaxfp8.es sharded over 4 simulated CPU devices equals one device.

The device count must be set before JAX starts, so the checks run in a
subprocess with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``.
"""
from __future__ import annotations

import textwrap

import pytest

import xla_flags

_CHILD = textwrap.dedent(r"""
    import json, re
    import jax, jax.numpy as jnp, numpy as np, optax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import jaxfp8
    from jaxfp8 import es
    from jaxfp8._src.es import population as es_lib

    assert jax.device_count() == 4, jax.devices()
    mesh = Mesh(np.array(jax.devices()), ("pop",))
    rows = NamedSharding(mesh, P("pop"))
    POP, N = 16, 1 << 15
    key = jax.random.key(42)

    def codes(x):
      if isinstance(x, jaxfp8.CodeArray):
        return np.asarray(x.codes)
      a = np.asarray(x)
      return a.view(np.uint32 if a.dtype == np.float32 else np.uint8)

    def leaves(x):
      return jax.tree_util.tree_leaves(x)

    def largest_buffer(compiled):
      # Per-device HLO after SPMD partitioning: the biggest array any
      # instruction holds, in elements (sampler tables included).
      dims = re.findall(r"\b[a-z]+[0-9a-z]*\[([0-9,]+)\]", compiled.as_text())
      return max(int(np.prod([int(d) for d in s.split(",")])) for s in dims)

    out = {}
    # Unblocked (one draw), then in blocks of 4 rows (2 steps of the
    # antithetic half, 4 of a plain population): a loop, sharded by rows.
    for blocked in (False, True):
      es_lib.BLOCK_ENTRIES = 4 * N if blocked else 1 << 22
      tag = "blocked " if blocked else ""
      for fmt, anti in [("float8_e4m3fn", True), ("float6_e2m3fn", True),
                        ("float32", True), ("float8_e4m3fn", False)]:
        fn = lambda k: es.perturbations(k, POP, (N,), fmt, antithetic=anti)
        # Compiled once: the program that runs is the one inspected.
        compiled = jax.jit(fn, out_shardings=rows).lower(key).compile()
        sharded = compiled(key)
        single = jax.jit(fn)(key)
        leaf = leaves(sharded)[0]
        name = f"{tag}perturbations/{fmt}" + ("" if anti else "/plain")
        out[name] = {
            "equal": bool(np.array_equal(codes(sharded), codes(single))),
            "shards": sorted({tuple(s.data.shape)
                              for s in leaf.addressable_shards}),
            "devices": len(leaf.sharding.device_set),
            "largest": largest_buffer(compiled),
        }

      mean = jnp.linspace(-1.0, 1.0, N)
      for rounding in ["nearest", "stochastic"]:
        fn = lambda k, m: es.sample_population(k, m, 0.1, POP, "e4m3",
                                               rounding=rounding)
        compiled = jax.jit(fn, out_shardings=rows).lower(key, mean).compile()
        sharded = compiled(key, mean)
        single = jax.jit(fn)(key, mean)
        out[f"{tag}sample_population/{rounding}"] = {
            "equal": bool(np.array_equal(codes(sharded), codes(single))),
            "shards": sorted({tuple(s.data.shape)
                              for s in sharded.addressable_shards}),
            "devices": len(sharded.sharding.device_set),
            "largest": largest_buffer(compiled),
        }
    es_lib.BLOCK_ENTRIES = 1 << 22

    # One ES generation with the population sharded: the same new mean, up
    # to the order of the cross-device sum (sgd: no Adam division by ~0).
    opt = es.OpenAIES(POP, optax.sgd(1.0), sigma=0.1, dtype="e4m3")
    state = opt.init(jnp.zeros(N))
    def generation(state, k, shard):
      eps = opt.ask(k, state)
      if shard:
        eps = jax.lax.with_sharding_constraint(eps, rows)
      loss = jnp.sum((opt.candidates(state, eps) - 0.5) ** 2, axis=1)
      return opt.tell(state, eps, loss).mean
    a = jax.jit(lambda s, k: generation(s, k, True))(state, key)
    b = jax.jit(lambda s, k: generation(s, k, False))(state, key)
    out["OpenAIES/tell"] = {"max_abs_diff": float(jnp.max(jnp.abs(a - b))),
                            "moved": float(jnp.max(jnp.abs(b)))}

    # Drawn where it lives (sharding=): each shard its own population of
    # fold_in(key, s), for every method; nothing crosses devices.
    from jaxfp8.tools.collectives import collective_bytes

    def per_shard(fn, own, *args):
      # fn(key, *args) sharded, against own(fold_in(key, s), POP // 4, *args)
      compiled = jax.jit(fn).lower(key, *args).compile()
      got = compiled(key, *args)
      q = POP // 4
      return {
          "moved": sum(collective_bytes(compiled).values()),
          "equal": all(np.array_equal(
              codes(got)[s * q:(s + 1) * q],
              codes(own(jax.random.fold_in(key, s), q, *args)))
                       for s in range(4)),
          "shards": sorted({tuple(x.data.shape)
                            for x in leaves(got)[0].addressable_shards}),
          "eager_equal": bool(np.array_equal(codes(fn(key, *args)),
                                             codes(got))),
      }

    for fmt, method in [("float8_e4m3fn", "exact"), ("float8_e4m3fn", "table"),
                        ("float8_e4m3fn", "cast"), ("float6_e2m3fn", "exact"),
                        ("float32", None)]:
      out[f"per-shard/{fmt}/{method}"] = per_shard(
          lambda k: es.perturbations(k, POP, (N,), fmt, method=method,
                                     sharding=rows),
          lambda k, n: es.perturbations(k, n, (N,), fmt, method=method))
    mean = jnp.linspace(-1.0, 1.0, N)
    for fmt in ("float8_e4m3fn", "float6_e2m3fn"):
      out[f"per-shard/sample_population/{fmt}"] = per_shard(
          lambda k, m: es.sample_population(k, m, 0.1, POP, fmt,
                                            rounding="stochastic",
                                            sharding=rows),
          lambda k, n, m: es.sample_population(k, m, 0.1, n, fmt,
                                               rounding="stochastic"),
          mean)
    # A generation with the population drawn where it lives: the fitness
    # is gathered (ranks), the update all-reduced, nothing else moves.
    opt = es.OpenAIES(POP, optax.sgd(1.0), sigma=0.1, dtype="e4m3",
                      sharding=rows)
    def generation(state, k):
      eps = opt.ask(k, state)
      loss = jnp.sum((opt.candidates(state, eps) - 0.5) ** 2, axis=1)
      return opt.tell(state, eps, loss).mean, eps, loss
    compiled = jax.jit(generation).lower(state, key).compile()
    mean, eps, loss = compiled(state, key)
    # sgd(1) moves the mean by sum_i w_i eps_i / (POP sigma): in float64
    # over the whole population (no pairing shortcut), centered ranks.
    loss, eps = np.asarray(loss), np.asarray(eps, np.float64)
    w = np.argsort(np.argsort(-loss, kind="stable"), kind="stable") / (
        POP - 1) - 0.5
    want = w @ eps / (POP * 0.1)
    q = POP // 4
    out["OpenAIES/sharding"] = {
        "bytes": collective_bytes(compiled),
        "error": float(np.max(np.abs(np.asarray(mean) - want))),
        "moved": float(np.max(np.abs(want))),
        "pairs": all(np.array_equal(eps[s * q + q // 2:(s + 1) * q],
                                    -eps[s * q:s * q + q // 2])
                     for s in range(4))}
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def results():
  # XLA's own emitters: float32 bit-equality of a program and its sharded
  # twin is a property of them (the elemental emitter's can differ).
  env = xla_flags.default_codegen_env(JAX_PLATFORMS="cpu")
  env["XLA_FLAGS"] += " --xla_force_host_platform_device_count=4"
  return xla_flags.child_result(_CHILD, env)


POP, N = 16, 1 << 15
CASES = ["perturbations/float8_e4m3fn", "perturbations/float6_e2m3fn",
         "perturbations/float32", "perturbations/float8_e4m3fn/plain",
         "sample_population/nearest", "sample_population/stochastic"]
CASES += ["blocked " + c for c in CASES]


@pytest.mark.parametrize("case", CASES)
def test_sharded_equals_single_device(results, case):
  r = results[case]
  assert r["equal"], r
  assert r["devices"] == 4 and r["shards"] == [[POP // 4, N]], r


@pytest.mark.parametrize("case", CASES)
def test_no_device_materializes_the_population(results, case):
  # Every buffer of the partitioned program is at most one device's quarter
  # (which is larger than any sampler table: 2^17 > 2^16 entries).
  r = results[case]
  assert r["largest"] <= POP * N // 4, r


@pytest.mark.parametrize("case", ["float8_e4m3fn/exact", "float8_e4m3fn/table",
                                  "float8_e4m3fn/cast", "float6_e2m3fn/exact",
                                  "float32/None",
                                  "sample_population/float8_e4m3fn",
                                  "sample_population/float6_e2m3fn"])
def test_population_drawn_where_it_lives(results, case):
  r = results[f"per-shard/{case}"]
  assert r["moved"] == 0, r  # no collective at all, whatever the method
  assert r["equal"] and r["eager_equal"], r
  assert r["shards"] == [[POP // 4, N]], r


def test_es_generation_drawn_where_it_lives_moves_only_fitness_and_update(
    results):
  r = results["OpenAIES/sharding"]
  moved = {k: v for k, v in r["bytes"].items() if v}
  # The fitness for the ranks (POP floats) and the update (N floats).
  assert set(moved) <= {"all-gather", "all-reduce"}, moved
  assert moved.get("all-gather", 0) <= 4 * POP * 4, moved
  assert moved["all-reduce"] <= 4 * N + 64, moved
  # The float64 update over the whole population (in the child), and the
  # antithetic pairs within each shard's rows.
  assert r["moved"] > 0.1 and r["error"] <= 1e-5 * r["moved"], r
  assert r["pairs"], r


def test_sharded_es_generation_matches(results):
  r = results["OpenAIES/tell"]
  assert r["moved"] > 0.1, r
  assert r["max_abs_diff"] <= 1e-6 * r["moved"], r
