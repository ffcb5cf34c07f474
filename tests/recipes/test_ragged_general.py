"""``recipes.ragged_dot_general``: the grouped forms JAX differentiates.

The ragged contraction (``(G, k, n)`` from token operands ``lhs (m, k)``
and ``rhs (m, n)``) is checked group by group, each of its three GEMMs
against the float64 product of the group's own operands quantized by the
dense rule (quantized_reference.py), on data whose magnitudes differ by
group; stochastic rounding of ``dout_g`` reads the words of
``split(key, G)[g]`` (the module docstring). The ragged-rows form is
``ragged_dot`` of the transposed operands, bit for bit.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np
import pytest

from jaxfp8 import recipes
from jaxfp8._src.mx import hadamard
from quantized_reference import expert_state
from quantized_reference import gemm_keys
from quantized_reference import group_amaxes
from quantized_reference import quantized64
from quantized_reference import rel
from quantized_reference import token_align

KEY = jax.random.key(11)
M, K, N = 200, 64, 48
SIZES = (5, 0, 150, 30)  # 15 rows past the total
G = len(SIZES)
ROW_SCALE = (2.0**-9, 1.0, 2.0**5, 2.0**-3, 1.0)
DOUT_SCALE = (1.3 * 2.0**3, 0.7 * 2.0**-6, 1.0, 1.9 * 2.0**8)  # see test_ragged
CONTRACT = lax.RaggedDotDimensionNumbers(
    dot_dimension_numbers=(((0,), (0,)), ((), ())),
    lhs_ragged_dimensions=[0], rhs_group_dimensions=[])
ROWS = lax.RaggedDotDimensionNumbers(
    dot_dimension_numbers=(((1,), (1,)), ((), ())),
    lhs_ragged_dimensions=[0], rhs_group_dimensions=[0])


def _data(seed=0):
  rng = np.random.default_rng(seed)
  group = np.repeat(np.arange(G + 1), list(SIZES) + [M - sum(SIZES)])
  row = np.array(ROW_SCALE)[group][:, None]
  lhs = (rng.standard_normal((M, K)) * row).astype(np.float32)
  rhs = (rng.standard_normal((M, N)) * row[::-1]).astype(np.float32)
  dout = (rng.standard_normal((G, K, N))
          * np.array(DOUT_SCALE)[:, None, None]).astype(np.float32)
  return lhs, rhs, dout


def _reference(recipe, lhs, rhs, dout, state, keys):
  """(out, dlhs, drhs) in float64, group by group by the dense rule of
  ``dot_general(lhs_g, rhs_g)`` contracting the rows; ``keys``: each
  GEMM's ``{user: key}``."""
  signs = {g: hadamard.random_signs(k["rht"]) for g, k in keys.items()
           if "rht" in k}
  st = state or {}

  def words(gemm, g, shape):
    if "dy" not in keys.get(gemm, {}):
      return None
    return np.asarray(jax.random.bits(
        jax.random.split(keys[gemm]["dy"], G)[g], shape, jnp.uint32))

  out, dlhs, drhs = np.zeros((G, K, N)), np.zeros((M, K)), np.zeros((M, N))
  b = token_align(recipe.fwd)
  start = 0
  for g, n in enumerate(SIZES):
    rs = slice(start, start + n)
    start += n
    if n == 0:
      continue
    one = lambda role: None if role not in st else jax.tree.map(
        lambda a: a[g], st[role])
    pad = lambda t: np.concatenate(
        [t[rs], np.zeros((-(-n // b) * b - n, t.shape[1]), np.float32)])
    ql, qr = recipe.fwd
    sf, sd, sw = (signs.get(k) for k in ("fwd", "dgrad", "wgrad"))
    out[g] = quantized64(pad(lhs), (), (0,), ql, signs=sf,
                         state=one("x")).T @ quantized64(
        pad(rhs), (), (0,), qr, signs=sf, state=one("w"))
    qd, qrd = recipe.dgrad
    dlhs[rs] = quantized64(rhs[rs], (), (1,), qrd, signs=sd,
                           state=one("w")) @ quantized64(
        dout[g], (), (1,), qd, signs=sd, state=one("dy"),
        rand=words("dgrad", g, (K, N))).T
    ql, qdw = recipe.wgrad
    drhs[rs] = quantized64(lhs[rs], (), (1,), ql, signs=sw,
                           state=one("x")) @ quantized64(
        dout[g], (), (0,), qdw, signs=sw, state=one("dy"),
        rand=words("wgrad", g, (N, K)))
  return out, dlhs, drhs


@functools.partial(jax.jit, static_argnums=0)
def _run(recipe, lhs, rhs, dout, state, sizes):
  def f(a, b, s):
    return recipes.ragged_dot_general(a, b, sizes, CONTRACT, recipe=recipe,
                                      key=KEY, state=s)
  out, vjp = jax.vjp(f, lhs, rhs, state)
  return (out,) + vjp(dout)


def _check(recipe, seed=0, keys=None):
  if keys is None:
    keys = gemm_keys(recipe, KEY) if recipe.needs_key else {}
  lhs, rhs, dout = _data(seed)
  state = expert_state(recipe, DOUT_SCALE)
  out, dlhs, drhs, new = _run(recipe, lhs, rhs, dout, state,
                              jnp.array(SIZES, jnp.int32))
  r_out, r_dlhs, r_drhs = _reference(recipe, lhs, rhs, dout, state, keys)
  assert out.shape == (G, K, N) and dlhs.shape == (M, K)
  assert drhs.shape == (M, N)
  start = 0
  for g, n in enumerate(SIZES):
    rs = slice(start, start + n)
    start += n
    if n == 0:  # an empty group: a zero product, nothing to differentiate
      assert not np.asarray(out[g]).any()
      continue
    for got, want in ((out[g], r_out[g]), (dlhs[rs], r_dlhs[rs]),
                      (drhs[rs], r_drhs[rs])):
      assert np.abs(want).sum() > 0
      assert rel(got, want) < 1e-6, (g, rel(got, want))
  assert not np.asarray(dlhs[start:]).any()
  assert not np.asarray(drhs[start:]).any()
  return lhs, rhs, dout, state, new


@pytest.mark.parametrize("name", list(recipes.RECIPES))
def test_ragged_contraction_is_the_dense_rule_per_group(name):
  recipe = recipes.get_recipe(name)
  lhs, rhs, dout, state, new = _check(recipe)
  if state is not None:  # each group's rows, each group's cotangent
    for role, t in (("x", lhs), ("w", rhs)):
      np.testing.assert_array_equal(new[role].amax_history[:, 0],
                                    group_amaxes(t, SIZES))
    np.testing.assert_array_equal(new["dy"].amax_history[:, 0],
                                  np.abs(dout).max(axis=(1, 2)))


def test_hadamard_transforms_in_every_gemm():
  """Transforms in the forward GEMM too (along the tokens: 16-row chunks
  from each group's first row, its padding rows mixed in) and in the input
  gradient's (along ``n``); one key per GEMM, split as the core splits."""
  nv = recipes.get_recipe("nvfp4_no_sr")
  rht = lambda q: dataclasses.replace(q, transform="rht")
  every = dataclasses.replace(nv, name="rht_everywhere",
                              fwd=tuple(map(rht, nv.fwd)),
                              dgrad=tuple(map(rht, nv.dgrad)))
  kf, kb = jax.random.split(KEY)
  kd, kw = jax.random.split(kb)
  _check(every, keys={"fwd": {"rht": kf}, "dgrad": {"rht": kd},
                      "wgrad": {"rht": kw}})


@pytest.mark.parametrize("name", ["fp8_delayed", "nvfp4"])
def test_ragged_rows_is_ragged_dot_of_the_transposed_operands(name):
  rng = np.random.default_rng(3)
  x = rng.standard_normal((M, K)).astype(np.float32)
  w = rng.standard_normal((G, K, N)).astype(np.float32)
  sizes = jnp.array(SIZES, jnp.int32)
  state = expert_state(recipes.get_recipe(name), DOUT_SCALE)
  dims = lax.RaggedDotDimensionNumbers(
      dot_dimension_numbers=(((0,), (2,)), ((), ())),
      lhs_ragged_dimensions=[1], rhs_group_dimensions=[1])

  @jax.jit
  def both(x, w, state):
    a = jax.vjp(lambda x, w, s: recipes.ragged_dot(
        x, w, sizes, recipe=name, key=KEY, state=s), x, w, state)
    b = jax.vjp(lambda xt, wt, s: recipes.ragged_dot_general(
        xt, wt, sizes, dims, recipe=name, key=KEY, state=s),
                x.T, w.transpose(2, 0, 1), state)
    dy = jnp.ones((M, N))
    return (a[0], b[0]), a[1](dy), b[1](dy)

  (ya, yb), ga, gb = both(x, w, state)
  np.testing.assert_array_equal(ya, yb)
  np.testing.assert_array_equal(ga[0], gb[0].T)
  np.testing.assert_array_equal(ga[1], gb[1].transpose(1, 2, 0))
  jax.tree.map(np.testing.assert_array_equal, ga[2], gb[2])


def _exact_and_bound(lhs, rhs):
  """Each group's ``lhs_g.T @ rhs_g`` in float64 (G, K, N), and the bound on
  a float32 sum's error there: n * 2^-24 * (|lhs_g|.T @ |rhs_g|)."""
  a, b = np.asarray(lhs, np.float64), np.asarray(rhs, np.float64)
  exact, bound = np.zeros((G, K, N)), np.zeros((G, K, N))
  start = 0
  for g, n in enumerate(SIZES):
    rs = slice(start, start + n)
    start += n
    exact[g] = a[rs].T @ b[rs]
    bound[g] = n * 2.0**-24 * (np.abs(a[rs]).T @ np.abs(b[rs]))
  return exact, bound


def test_without_a_recipe_is_lax_ragged_dot_general():
  lhs, rhs, dout = _data()
  sizes = jnp.array(SIZES, jnp.int32)
  dims_t = lax.RaggedDotDimensionNumbers(
      dot_dimension_numbers=(((1,), (1,)), ((), ())),
      lhs_ragged_dimensions=[1], rhs_group_dimensions=[])
  for a, b, dims in ((lhs, rhs, CONTRACT), (lhs.T, rhs.T, dims_t)):
    mine = lambda a, b: recipes.ragged_dot_general(a, b, sizes, dims,
                                                   recipe=None)
    theirs = lambda a, b: lax.ragged_dot_general(
        a, b, sizes, dims, precision=lax.Precision.HIGHEST)
    # The same float32 sums, each within n * 2^-24 * sum|a||b| of the exact
    # product (n rows in the group): XLA orders the sums by the layout and
    # the host's vector width (AVX-512 hosts differ here), so not bit for
    # bit.
    exact, bound = _exact_and_bound(lhs, rhs)  # (G, K, N): both forms
    for got in (mine(a, b), theirs(a, b)):
      assert np.all(np.abs(np.asarray(got, np.float64) - exact) <= bound)
    # lax differentiates this form only once: its lhs gradient by hand.
    g = jax.grad(lambda a: jnp.vdot(mine(a, b), dout))(a)
    want = np.zeros(a.shape)
    start = 0
    for i, n in enumerate(SIZES):
      rs = slice(start, start + n)
      start += n
      bt = np.asarray(b, np.float64)
      if dims is CONTRACT:
        want[rs] = bt[rs] @ dout[i].T
      else:
        want[:, rs] = dout[i] @ bt[:, rs]
    assert rel(g, want) < 1e-6


def test_under_jit_vmap_and_traced_sizes():
  lhs, rhs, _ = _data()
  f = jax.jit(lambda s: recipes.ragged_dot_general(lhs, rhs, s, CONTRACT,
                                                   recipe="mxfp8"))
  eager = recipes.ragged_dot_general(lhs, rhs, jnp.array(SIZES), CONTRACT,
                                     recipe="mxfp8")
  np.testing.assert_array_equal(f(jnp.array(SIZES)), eager)
  # Traced sums past m: rows follow the running sums, as lax's do.
  past = jnp.array([5, 0, 150, 100])
  exact = lax.ragged_dot_general(lhs, rhs, past, CONTRACT)
  got = jax.jit(lambda s: recipes.ragged_dot_general(
      lhs, rhs, s, CONTRACT, recipe=None))(past)
  np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-4)
  two = jax.vmap(lambda r: recipes.ragged_dot_general(
      lhs, r, jnp.array(SIZES), CONTRACT, recipe="mxfp8"))(
          jnp.stack([rhs, 2 * rhs]))
  np.testing.assert_array_equal(two[0], eager)
  np.testing.assert_array_equal(two[1], 2 * eager)


def test_bad_arguments_are_refused():
  lhs, rhs, dout = _data()
  s = jnp.array(SIZES, jnp.int32)
  rdg = recipes.ragged_dot_general
  with pytest.raises(TypeError, match="RaggedDotDimensionNumbers, got "
                     "tuple"):
    rdg(lhs, rhs, s, (((0,), (0,)), ((), ())))
  batch = lax.RaggedDotDimensionNumbers((((2,), (2,)), ((0,), (0,))), [1],
                                        [])
  with pytest.raises(NotImplementedError, match="batch dimensions.*vmap"):
    rdg(lhs[None], rhs[None], s, batch)
  with pytest.raises(ValueError, match="2-D lhs"):
    rdg(lhs[None], rhs, s, CONTRACT)
  with pytest.raises(ValueError, match=r"rhs \(G, k, n\) with one group"):
    rdg(lhs, dout, s, CONTRACT)
  with pytest.raises(ValueError, match="must be free"):
    rdg(lhs, dout, s, lax.RaggedDotDimensionNumbers(
        (((0,), (1,)), ((), ())), [0], [0]))
  with pytest.raises(ValueError, match="must be its contracting one"):
    rdg(lhs, rhs, s, lax.RaggedDotDimensionNumbers(
        (((0,), (0,)), ((), ())), [1], []))
  with pytest.raises(ValueError, match="out of range"):
    rdg(lhs, rhs, s, lax.RaggedDotDimensionNumbers(
        (((0,), (5,)), ((), ())), [0], []))
  with pytest.raises(ValueError, match="contract lengths 200 and 199"):
    rdg(lhs, rhs[1:], s, CONTRACT)
  with pytest.raises(ValueError, match="`group_sizes` .* 1-D"):
    rdg(lhs, rhs, s[None], CONTRACT)
  with pytest.raises(TypeError, match="`group_sizes` .* integer"):
    rdg(lhs, rhs, s.astype(jnp.float32), CONTRACT)
  with pytest.raises(ValueError, match="sums to 201, past the 200"):
    rdg(lhs, rhs, jnp.array([100, 100, 1]), CONTRACT)
  with pytest.raises(ValueError, match="wgrad GEMM, whose .* got 40"):
    rdg(lhs[:, :40], rhs, s, CONTRACT, recipe="nvfp4", key=KEY)
  with pytest.raises(ValueError, match=r"init_state\(recipe, experts=4\)"):
    rdg(lhs, rhs, s, CONTRACT, recipe="fp8_delayed")
  with pytest.raises(NotImplementedError, match="`group_offset`"):
    rdg(lhs, rhs, s, CONTRACT, group_offset=jnp.array([0]))
  with pytest.raises(ValueError, match="`ragged_dot_general` with recipe "
                     "'nvfp4' needs a `key`"):
    rdg(lhs, dout, s, ROWS, recipe="nvfp4")
