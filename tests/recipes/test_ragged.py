"""``recipes.ragged_dot``: grouped GEMMs, every expert a tensor of its own.

Each GEMM of every named recipe is checked, group by group, against the
float64 product of that group's own operands quantized by the dense rule
(quantized_reference.py, as test_recipe_core.py checks the dense core):
the group's rows and its expert's weight, the weight gradient's operands
padded with zero rows to the group's own blocks. The data's magnitudes
differ by group and by expert (factors up to 2^14 apart), so a scale,
amax or block shared across groups would show. Stochastic rounding reads
the words the module docstring names: the reference draws them with
``jax.random.bits`` for the whole operand in that layout and slices the
group's.
"""
from __future__ import annotations

import dataclasses
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import multiprocess
from jaxfp8 import recipes
from jaxfp8._src.recipes import groups
from jaxfp8._src.recipes import operand
from jaxfp8._src.mx import hadamard
from quantized_reference import expert_state
from quantized_reference import gemm_keys
from quantized_reference import group_amaxes
from quantized_reference import quantized64
from quantized_reference import rel
from quantized_reference import token_align

KEY = jax.random.key(5)
M, K, N = 200, 64, 48
# Uneven groups: one of 5 rows, an empty one, one past a 128-row block and
# one of 30; 15 rows past the total (in no group).
SIZES = (5, 0, 150, 30)
G = len(SIZES)
ROW_SCALE = (2.0**-9, 1.0, 2.0**5, 2.0**-3)
# Not powers of two apart: per-tensor scales that differ by a power of two
# give the same values in range, and a scale shared across experts would
# hide.
EXPERT_SCALE = (1.3 * 2.0**3, 0.7 * 2.0**-6, 1.0, 1.9 * 2.0**8)


def _data(seed=0, row_scale=ROW_SCALE):
  rng = np.random.default_rng(seed)
  group = np.repeat(np.arange(G + 1), list(SIZES) + [M - sum(SIZES)])
  row = np.array(tuple(row_scale) + (1.0,))[group][:, None]
  x = (rng.standard_normal((M, K)) * row).astype(np.float32)
  w = (rng.standard_normal((G, K, N))
       * np.array(EXPERT_SCALE)[:, None, None]).astype(np.float32)
  dy = (rng.standard_normal((M, N)) * row[::-1]).astype(np.float32)
  return x, w, dy


def _reference(name, x, w, dy, state):
  """(y, dx, dw) in float64, group by group by the dense rule."""
  recipe = name if isinstance(name, recipes.Recipe) else recipes.get_recipe(
      name)
  keys = gemm_keys(recipe, KEY) if recipe.needs_key else {}
  signs = {g: hadamard.random_signs(k["rht"]) for g, k in keys.items()
           if "rht" in k}
  st = state or {}
  b = token_align(recipe.wgrad)
  rows = -(-(M + G * (b - 1)) // b) * b
  bits = lambda gm, shape: (
      None if "dy" not in keys.get(gm, {}) else np.asarray(
          jax.random.bits(keys[gm]["dy"], shape, jnp.uint32)))
  bits_d, bits_w = bits("dgrad", (M, N)), bits("wgrad", (N, rows))
  y, dx = np.zeros((M, N)), np.zeros((M, K))
  dw = np.zeros((G, K, N))
  start = aligned = 0
  for g, n in enumerate(SIZES):
    if n == 0:  # no rows: nothing to quantize, a zero weight gradient
      continue
    one = lambda role: None if role not in st else jax.tree.map(
        lambda a: a[g], st[role])
    rs = slice(start, start + n)
    qx, qw = recipe.fwd
    y[rs] = quantized64(x[rs], (), (1,), qx, state=one("x")) @ quantized64(
        w[g], (), (0,), qw, state=one("w"))
    qd, qwd = recipe.dgrad
    dx[rs] = quantized64(
        dy[rs], (), (1,), qd, state=one("dy"),
        rand=None if bits_d is None else bits_d[rs]) @ quantized64(
            w[g], (), (1,), qwd, state=one("w")).T
    padded = -(-n // b) * b
    pad = lambda t: np.concatenate([t[rs], np.zeros((padded - n,) + t.shape[1:],
                                                    np.float32)])
    qx, qdw = recipe.wgrad
    dw[g] = quantized64(pad(x), (), (0,), qx, signs=signs.get("wgrad"),
                        state=one("x")).T @ quantized64(
        pad(dy), (), (0,), qdw, signs=signs.get("wgrad"), state=one("dy"),
        rand=None if bits_w is None else bits_w[:, aligned:aligned + padded])
    start += n
    aligned += padded
  return y, dx, dw


def _run(name, x, w, dy, state, sizes):
  def f(a, b, s):
    return recipes.ragged_dot(a, b, sizes, recipe=name, key=KEY, state=s)

  @jax.jit
  def gemms(a, b, s, g):
    y, vjp = jax.vjp(f, a, b, s)
    return (y,) + vjp(g)

  return gemms(x, w, state, dy)


@pytest.mark.parametrize("name", list(recipes.RECIPES))
def test_each_grouped_gemm_is_the_dense_rule_per_group(name):
  x, w, dy = _data()
  state = expert_state(recipes.get_recipe(name), EXPERT_SCALE)
  y, dx, dw, new = _run(name, x, w, dy, state, jnp.array(SIZES, jnp.int32))
  ry, rdx, rdw = _reference(name, x, w, dy, state)
  assert y.shape == (M, N) and dx.shape == (M, K) and dw.shape == (G, K, N)
  start = 0
  for g, n in enumerate(SIZES):
    rs = slice(start, start + n)
    start += n
    if n == 0:  # an empty group: no rows, a zero weight gradient
      assert not np.asarray(dw[g]).any()
      continue
    for got, want in ((y[rs], ry[rs]), (dx[rs], rdx[rs]), (dw[g], rdw[g])):
      assert np.abs(want).sum() > 0
      assert rel(got, want) < 1e-6, (g, rel(got, want))
  # Rows past the total: no output, no input gradient.
  assert not np.asarray(y[start:]).any() and not np.asarray(dx[start:]).any()
  if state is not None:  # the next state records each group's own amax
    for role, t in (("x", x), ("dy", dy)):
      np.testing.assert_array_equal(new[role].amax_history[:, 0],
                                    group_amaxes(t, SIZES))
    np.testing.assert_array_equal(new["w"].amax_history[:, 0],
                                  np.abs(w).max(axis=(1, 2)))


def test_groups_near_the_bottom_of_float32():
  """NVFP4's tensor scale per group where one group's amax is below 2^-100
  (the exact integer forms) and the others' are not: each group's GEMMs
  still the dense rule of its own rows."""
  x, w, dy = _data(2, row_scale=(2.0**-110, 1.0, 2.0**5, 2.0**-120))
  y, dx, dw, _ = _run("nvfp4", x, w, dy, None, jnp.array(SIZES, jnp.int32))
  ry, rdx, rdw = _reference("nvfp4", x, w, dy, None)
  start = 0
  for g, n in enumerate(SIZES):
    rs = slice(start, start + n)
    start += n
    if n:
      for got, want in ((y[rs], ry[rs]), (dx[rs], rdx[rs]), (dw[g], rdw[g])):
        assert np.abs(want).sum() > 0 and rel(got, want) < 1e-6, g


def _bits(a):
  return np.asarray(a, np.float32).view(np.uint32)


@pytest.mark.parametrize("name,gemm,index,axis", [
    ("fp8_current", "fwd", 0, 1), ("fp8_delayed", "dgrad", 0, 1),
    ("nvfp4", "fwd", 0, 1), ("nvfp4", "wgrad", 1, 0)])
def test_one_pass_per_operand_is_each_group_alone(name, gemm, index, axis):
  """``quantize_rows`` quantizes every group in one pass: bit for bit
  each group's rows alone by the dense rule (the other rows zero), with a
  NaN in one group, a subnormal group and an empty one."""
  recipe = recipes.get_recipe(name)
  q = getattr(recipe, gemm)[index]
  sizes = (16, 0, 48, 32)  # 16-row aligned; 32 rows of no group
  seg = np.repeat(np.arange(G + 1), list(sizes) + [32]).astype(np.int32)
  rng = np.random.default_rng(9)
  scale = np.array([2.0**-128, 1.0, 2.0**7, 2.0**-3, 1.0])[seg][:, None]
  x = (rng.standard_normal((128, 64)) * scale).astype(np.float32)
  x[70, 5] = np.nan
  # Scales apart by other factors than powers of two (which would give the
  # same values in range).
  state = expert_state(recipe, (5.0, 0.3, 1.7, 300.0))
  st = None if state is None else state["dy" if gemm != "fwd" else "x"]
  got = _bits(groups.quantize_rows(jnp.asarray(x), axis, q,
                                   jnp.asarray(seg), G, KEY, st))
  for g, n in enumerate(sizes):
    if n == 0:
      continue
    rows = seg == g
    alone = jnp.asarray(np.where(rows[:, None], x, np.float32(0)))
    if q.kind == "tensor":  # the dense rule, its own scale or state
      one = None if st is None else jax.tree.map(lambda a: a[g], st)
      want = operand.dequantize_elementwise(
          *operand.quantize_tensor(alone, q, one))
    else:
      want = operand.quantize_along(alone, axis, q, KEY)
    np.testing.assert_array_equal(got[rows], _bits(want)[rows],
                                  err_msg=f"group {g}")


def _square_token_blocks():
  """fp8_blockwise with x and dy in 128x128 blocks too: blocks spanning
  rows in the forward and input-gradient GEMMs."""
  r = recipes.get_recipe("fp8_blockwise")
  square = r.fwd[1]
  return dataclasses.replace(r, name="square_tokens", fwd=(square, r.fwd[1]),
                             dgrad=(square, r.dgrad[1]))


def test_blocks_spanning_rows_restart_at_each_group():
  x, w, dy = _data(1)
  recipe = _square_token_blocks()
  y, dx, _, _ = _run(recipe, x, w, dy, None, jnp.array(SIZES, jnp.int32))
  ry, rdx, _ = _reference(recipe, x, w, dy, None)
  start = 0
  for n in SIZES:
    rs = slice(start, start + n)
    start += n
    if n:
      assert rel(y[rs], ry[rs]) < 1e-6 and rel(dx[rs], rdx[rs]) < 1e-6


def test_a_shared_scale_would_differ():
  """The data can tell: the dense recipe over all rows (one scale, one
  tensor amax) misses the per-group forward product."""
  x, w, _ = _data()
  ry = _reference("fp8_current", x, w, np.zeros((M, N), np.float32), None)[0]
  one = np.asarray(recipes.dot_general(x, w[0], (((1,), (0,)), ((), ())),
                                       recipe="fp8_current"), np.float64)
  assert rel(one[:5], ry[:5]) > 1e-3


def test_group_sizes_under_jit_assign_rows_as_lax_ragged_dot():
  """Traced sizes are not checked: rows follow the running sums as in
  ``lax.ragged_dot`` (sums past ``m``, a negative size)."""
  x, w, _ = _data()
  f = jax.jit(lambda s: recipes.ragged_dot(x, w, s, recipe=None))
  ref = jax.jit(lambda s: jax.lax.ragged_dot(
      x, w, s, precision=jax.lax.Precision.HIGHEST))
  for sizes in ((100, 100, 100, 100), (-3, 60, 0, 300), (0, 0, 0, 0)):
    s = jnp.array(sizes, jnp.int32)
    np.testing.assert_allclose(f(s), ref(s), rtol=1e-6, atol=1e-6)
  # The concrete ones are refused (below); gradients follow the same rows.
  s = jnp.array((100, 100, 100, 100), jnp.int32)
  g = jax.jit(jax.grad(lambda a, b, t: recipes.ragged_dot(
      a, b, t, recipe="fp8_current").sum(), (0, 1)))(x, w, s)
  assert not np.asarray(g[1][2:]).any() and np.asarray(g[1][:2]).all()


def test_vmap_over_batches_of_groups():
  x, w, dy = _data()
  sizes = jnp.array([SIZES, (50, 50, 50, 50)], jnp.int32)
  xs, ws = jnp.stack([x, x[::-1]]), jnp.stack([w, w * 2])
  f = lambda a, b, s: recipes.ragged_dot(a, b, s, recipe="mxfp8")
  got = jax.jit(jax.vmap(jax.grad(lambda a, b, s: f(a, b, s).sum(),
                                  (0, 1))))(xs, ws, sizes)
  for i in range(2):
    want = jax.jit(jax.grad(lambda a, b: f(a, b, sizes[i]).sum(), (0, 1)))(
        xs[i], ws[i])
    for a, b in zip(got, want):
      np.testing.assert_array_equal(a[i], b)
  # Only the tokens batched (one set of experts and sizes for all).
  one = lambda a: jax.grad(lambda a: f(a, w, sizes[0]).sum())(a)
  got = jax.jit(jax.vmap(one))(xs)
  for i in range(2):
    np.testing.assert_array_equal(got[i], jax.jit(one)(xs[i]))


def test_dtypes_follow_the_operands():
  x, w, _ = _data()
  s = jnp.array(SIZES, jnp.int32)
  xb, wb = x.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
  y, g = jax.value_and_grad(lambda a: recipes.ragged_dot(
      a, wb, s, recipe="fp8_blockwise").astype(jnp.float32).sum())(xb)
  assert y.dtype == jnp.float32 and g.dtype == jnp.bfloat16
  assert recipes.ragged_dot(xb, wb, s).dtype == jnp.bfloat16
  assert recipes.ragged_dot(x, w, s, preferred_element_type="e4m3",
                            recipe="mxfp8").dtype == jnp.float8_e4m3fn


@pytest.mark.parametrize("sizes,error,match", [
    (np.array([1.0, 2, 3, 4]), TypeError, "`group_sizes` .* integer"),
    ([1, 2, 3, 4], TypeError, "`group_sizes` .* integer array, got list"),
    (np.array([1, 2, 3]), ValueError, r"`group_sizes` .* shape \(4,\)"),
    (np.array([1, -2, 3, 4]), ValueError, "non-negative"),
    (np.array([100, 100, 1, 0]), ValueError, "sums to 201, past the 200"),
])
def test_bad_group_sizes_are_refused(sizes, error, match):
  x, w, _ = _data()
  with pytest.raises(error, match=match):
    recipes.ragged_dot(x, w, sizes, recipe="fp8_current")


def test_bad_operands_options_and_state_are_refused():
  x, w, _ = _data()
  s = jnp.array(SIZES, jnp.int32)
  with pytest.raises(ValueError, match=r"lhs \(m, k\) and rhs \(G, k, n\)"):
    recipes.ragged_dot(x[None], w, s)
  with pytest.raises(ValueError, match="contract lengths 64 and 32"):
    recipes.ragged_dot(x, w[:, :32], s)
  with pytest.raises(NotImplementedError, match="`group_offset`"):
    recipes.ragged_dot(x, w, s, group_offset=jnp.array([0]))
  with pytest.raises(ValueError, match="needs a `key`"):
    recipes.ragged_dot(x, w, s, recipe="nvfp4")
  nv = recipes.get_recipe("nvfp4")  # a Hadamard transform in the forward
  rht_fwd = dataclasses.replace(nv, name="rht_fwd", fwd=tuple(
      dataclasses.replace(q, transform="rht") for q in nv.fwd))
  with pytest.raises(ValueError, match="fwd GEMM, whose .* got 40"):
    recipes.ragged_dot(x[:, :40], w[:, :40], s, recipe=rht_fwd, key=KEY)
  with pytest.raises(ValueError, match=r"init_state\(recipe, experts=4\)"):
    recipes.ragged_dot(x, w, s, recipe="fp8_delayed")
  dense = recipes.init_state("fp8_delayed")
  with pytest.raises(ValueError, match=r"shape \(4, n\).*experts=4"):
    recipes.ragged_dot(x, w, s, recipe="fp8_delayed", state=dense)
  bad = recipes.init_state("fp8_delayed", experts=G)
  bad["w"] = dataclasses.replace(bad["w"],
                                 scale=bad["w"].scale.at[2].set(0.0))
  with pytest.raises(ValueError, match="scale of expert 2"):
    recipes.ragged_dot(x, w, s, recipe="fp8_delayed", state=bad)
  with pytest.raises(ValueError, match="`experts`"):
    recipes.init_state("fp8_delayed", experts=0)


_SHARDED_CHILD = r"""
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jaxfp8 import recipes
from jaxfp8._src.recipes import groups
from jaxfp8._src.recipes import operand

assert jax.device_count() == 4
mesh = Mesh(np.array(jax.devices()), ("expert",))
rng = np.random.default_rng(0)
x = rng.standard_normal((96, 64)).astype(np.float32)
w = (rng.standard_normal((4, 64, 32))
     * np.array([8.0, 1e-2, 1.0, 256.0])[:, None, None]).astype(np.float32)
sizes = jnp.array([20, 0, 41, 30], jnp.int32)
out = {}
for name in ("fp8_delayed", "fp8_blockwise", "mxfp8", "nvfp4"):
  state = recipes.init_state(name, history_length=2, experts=4)
  def loss(a, b, s):
    return (recipes.ragged_dot(a, b, sizes, recipe=name, key=jax.random.key(1),
                               state=s) ** 2).sum()
  step = jax.jit(jax.grad(loss, (0, 1, 2)))
  whole = step(x, w, state)
  experts = NamedSharding(mesh, P("expert"))
  spread = jax.device_put(w, experts)
  st = None if state is None else jax.device_put(state, experts)
  got = step(x, spread, st)
  diff = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))
                   / max(float(np.max(np.abs(np.asarray(b)))), 1e-30))
             for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(whole)))
  out[name] = {"diff": diff,
               "sharded": len(got[1].sharding.device_set) == 4}
emit(out)
"""


@pytest.fixture(scope="module")
def sharded():
  return multiprocess.run_one(textwrap.dedent(_SHARDED_CHILD), devices=4,
                              timeout=300)


@pytest.mark.parametrize("name", ["fp8_delayed", "fp8_blockwise", "mxfp8",
                                  "nvfp4"])
def test_experts_sharded_over_devices_give_the_same_step(sharded, name):
  """Experts' weights (and delayed states) split over 4 simulated devices:
  the same gradients and next states as on one, to float32 sum order."""
  assert sharded[name]["sharded"], sharded[name]
  assert sharded[name]["diff"] <= 1e-6, sharded[name]
