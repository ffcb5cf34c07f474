"""Properties of the recipe core over every named recipe, by hypothesis (#43).

Valid calls (:func:`check_call`): each GEMM of ``recipes.dot_general``
(forward ``y = x . w``, input gradient ``dx = dy . w``, weight gradient
``dw = x . dy``) is the float64 product of its two operands as the recipe
quantizes them, to float32 accumulation: ``|out - ref| <= 2 (K + 2) 2^-24
sum_k |a_k b_k|``, plus what XLA's flushing of float32 subnormals on CPU can
move (the terms with a subnormal factor, ``2^-126`` per term). The operands
are quantized by the core's own quantizers (``operand.quantize_tensor``:
exact codes and scale, for per-tensor kinds; ``operand.quantize_view`` on
each GEMM's (batch, free, contracting) view for the others, with the
Hadamard signs and stochastic bits of the keys the core's docstring says it
splits) and multiplied by an ``einsum`` of the operands' own layouts: no
layout code of the core (``transpose_dims``, ``unview``) is shared. A cast
keeps Inf and NaN (bfloat16 has them). Results are NaN where the reference
is, its Inf where it is Inf, and finite wherever the float32 sum can't
overflow; finite operands whose exact product is far below float32's max
give finite results (no overflowing scale or transform); the jitted call
and the eager one agree bit for bit. Empty operands give empty or zero
results.

Invalid calls raise ValueError, TypeError or NotImplementedError naming
``dot_general`` and the argument (``dimension_numbers``, ``key``,
``state``).

The cost is XLA compiling a program per recipe, call shape and dtype: in CI
each recipe takes one case of :data:`FULL` and one of :data:`EMPTY`, in
turn, so every case runs with some recipes and programs are reused while
values, magnitudes and the places of Inf and NaN vary freely;
``HYPOTHESIS_PROFILE=long`` runs every case with every recipe.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import hypothesis
from hypothesis import strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dot_reference import subscripts
import jaxfp8
from jaxfp8 import policy
from jaxfp8 import recipes
from jaxfp8._src.recipes import gemm
from jaxfp8._src.recipes import operand

NAMES = tuple(recipes.RECIPES)
KEYED = tuple(n for n in NAMES if recipes.get_recipe(n).needs_key)
ERRORS = (ValueError, TypeError, NotImplementedError)
KEY = jax.random.key(43)
F32_MAX = float(np.finfo(np.float32).max)
TINY = 2.0**-126  # float32's smallest normal: XLA on CPU flushes below it
_BASE = 60  # the CI profile's max_examples (tests/conftest.py)


def _n(k: int) -> int:
  """``k`` examples in the CI profile, scaled with the loaded profile."""
  return max(1, round(k * hypothesis.settings.default.max_examples / _BASE))


def _long() -> bool:
  return hypothesis.settings.default.max_examples > _BASE


# -- call shapes ---------------------------------------------------------------

class Case(NamedTuple):
  name: str
  lhs: tuple[int, ...]
  rhs: tuple[int, ...]
  dims: Any
  dtype: Any = np.float32


D2 = (((1,), (0,)), ((), ()))
# x's free dims hold 16 elements: the weight gradient contracts them, and
# the NVFP4 recipes' Hadamard transform takes multiples of 16.
FULL = (
    Case("dense", (16, 40), (40, 24), D2),
    Case("contract_first", (48, 16), (48, 8), (((0,), (0,)), ((), ()))),
    Case("batched", (2, 16, 36), (2, 36, 10), (((2,), (1,)), ((0,), (0,)))),
    Case("batch_in_the_middle", (20, 3, 16), (7, 20, 3),
         (((0,), (1,)), ((1,), (2,))), jnp.bfloat16),
    Case("two_contracting_swapped", (4, 16, 6), (6, 9, 4),
         (((2, 0), (0, 2)), ((), ()))),
    Case("vector_rhs", (16, 32), (32,), D2),
    Case("outer", (16,), (5,), (((), ()), ((), ()))),
)
# Each GEMM's result is empty or contracts nothing (exact zeros).
EMPTY = (
    Case("empty_m", (0, 32), (32, 8), D2),
    Case("empty_k", (16, 0), (0, 8), D2),
    Case("empty_batch", (0, 16, 24), (0, 24, 5), (((2,), (1,)), ((0,), (0,)))),
    Case("empty_n", (16, 24), (24, 0), D2, jnp.bfloat16),
)


def _cases(name: str) -> tuple[Case, ...]:
  """One case per recipe in CI, in turn (every case runs with some
  recipes); every case, empty ones too, in the ``long`` profile."""
  if _long():
    return FULL + EMPTY
  return (FULL[NAMES.index(name) % len(FULL)],)


# -- inputs --------------------------------------------------------------------

_SPECIAL = (0.0, -0.0, math.inf, -math.inf, math.nan, F32_MAX, -F32_MAX,
            2.0**-149, -(2.0**-149), 1e-40, TINY, 2.0**127, -3.3e38)


@st.composite
def arrays(draw, shape, dtype):
  """Values of one magnitude (a power of two from 2^-149 to 2^127) or
  spread log-uniformly over float32's whole range, a few Inf, NaN, zeros,
  subnormals and +-max placed anywhere."""
  size = math.prod(shape)
  rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
  if draw(st.booleans()):
    v = rng.standard_normal(size) * 2.0**draw(st.integers(-149, 127))
  else:
    v = rng.choice([-1.0, 1.0], size) * 2.0**rng.uniform(-149, 128, size)
  top = F32_MAX if dtype == np.float32 else float(jnp.finfo(dtype).max)
  v = np.clip(v, -top, top)
  if size:
    for i, s in draw(st.lists(st.tuples(st.integers(0, size - 1),
                                        st.sampled_from(_SPECIAL)),
                              max_size=3)):
      v[i] = s
  with np.errstate(over="ignore"):
    return v.astype(np.float32).astype(dtype).reshape(shape)


def _state(draw, recipe):
  """A delayed state whose scales are drawn (2^-126 .. 2^127), or None."""
  if not recipe.state_roles:
    return None
  out = {}
  for role in recipe.state_roles:
    q = recipe.delayed_quantizer(role)
    scale = float(np.float32(draw(st.floats(1.0, 1.99)) * 2.0**draw(
        st.integers(-126, 126))))
    out[role] = policy.DelayedScaling.create(
        q.format, history_length=4, margin=q.margin,
        power_of_two=q.scale == "pow2", initial_scale=scale)
  return out


# -- the core, jitted and eager ------------------------------------------------

def _vjp(x, w, g, key, state, name, dims):
  y, pull = jax.vjp(lambda a, b: recipes.dot_general(
      a, b, dims, recipe=name, key=key, state=state), x, w)
  return (y,) + tuple(pull(g))


_gemms = jax.jit(_vjp, static_argnums=(5, 6))


# -- the reference -------------------------------------------------------------

class Spec(NamedTuple):
  """One GEMM: its quantizers, each operand's (batch, contracting) dims and
  role, in the order of the product (``dy`` first in both backward GEMMs)."""
  qa: Any
  qb: Any
  a: tuple[tuple[int, ...], tuple[int, ...]]
  b: tuple[tuple[int, ...], tuple[int, ...]]
  roles: tuple[str, str]


def _free(ndim, contract, batch):
  return tuple(d for d in range(ndim) if d not in contract and d not in batch)


def gemm_specs(recipe, lhs_nd: int, rhs_nd: int, dims) -> dict[str, Spec]:
  """The three GEMMs of ``dot_general(x, w, dims)``: ``dy`` (laid out as
  ``y``) contracts with ``w`` over ``w``'s free dims and with ``x`` over
  ``x``'s free dims, both in order."""
  (lc, rc), (lb, rb) = dims
  nb = len(lb)
  lf, rf = _free(lhs_nd, lc, lb), _free(rhs_nd, rc, rb)
  y_b = tuple(range(nb))
  y_lf = tuple(range(nb, nb + len(lf)))
  y_rf = tuple(range(nb + len(lf), nb + len(lf) + len(rf)))
  r = recipe
  return {"fwd": Spec(*r.fwd, (lb, lc), (rb, rc), ("x", "w")),
          "dgrad": Spec(*r.dgrad, (y_b, y_rf), (rb, rf), ("dy", "w")),
          "wgrad": Spec(r.wgrad[1], r.wgrad[0], (y_b, y_lf), (lb, lf),
                        ("dy", "x"))}


def _view(t, batch, contract):
  perm = tuple(batch) + _free(t.ndim, contract, batch) + tuple(contract)
  size = lambda ds: math.prod(t.shape[d] for d in ds)
  return t.transpose(perm).reshape(
      [t.shape[d] for d in batch]
      + [size(_free(t.ndim, contract, batch)), size(contract)])


def _unview(v, shape, batch, contract):
  perm = tuple(batch) + _free(len(shape), contract, batch) + tuple(contract)
  return v.reshape([shape[d] for d in perm]).transpose(np.argsort(perm))


def _keys(recipe, key):
  """Each GEMM's key, split as the core's docstring says."""
  if key is None:
    return {}
  fwd = recipe.gemm_needs_key("fwd")
  bwd = recipe.gemm_needs_key("dgrad") or recipe.gemm_needs_key("wgrad")
  kf, kb = jax.random.split(key) if fwd and bwd else (
      key if fwd else None, key if bwd else None)
  out = {"fwd": kf}
  if kb is not None:
    out["dgrad"], out["wgrad"] = jax.random.split(kb)
  return out


def _operands(a, b, spec: Spec, key, states):
  """One GEMM's two operands quantized, each in its own layout: ``(values,
  codes, scale)``, codes and scale (exact in NumPy) for per-tensor kinds."""
  transform = any(q is not None and q.transform for q in (spec.qa, spec.qb))
  sr = [q is not None and q.stochastic for q in (spec.qa, spec.qb)]
  n = int(transform) + sum(sr)
  keys = [key] * n if n <= 1 else list(jax.random.split(key, n))
  signs = operand.rht_signs(keys.pop(0)) if transform else None
  out = []
  for t, q, (batch, contract), stochastic, role in (
      (a, spec.qa, spec.a, sr[0], spec.roles[0]),
      (b, spec.qb, spec.b, sr[1], spec.roles[1])):
    if not transform and (q is None or gemm.elementwise(q)):
      codes, scale = (None, None) if q is None else operand.quantize_tensor(
          t, q, states.get(role))
      out.append((t if q is None else None, codes, scale))
      continue
    v = _view(t, batch, contract)
    if transform:
      v = operand.rht(v, signs, -1)
    if q is not None:
      v = operand.quantize_view(v, q, keys.pop(0) if stochastic else None)
    out.append((_unview(v, t.shape, batch, contract), None, None))
  return out


@functools.partial(jax.jit, static_argnums=(5, 6))
def _quantized(x, w, g, key, state, name, dims):
  """The quantized operands of the three GEMMs, by the core's quantizers."""
  recipe = recipes.get_recipe(name)
  x, w, g = (t.astype(jnp.float32) for t in (x, w, g))
  keys, states = _keys(recipe, key), state or {}
  specs = gemm_specs(recipe, x.ndim, w.ndim, dims)
  tensors = {"fwd": (x, w), "dgrad": (g, w), "wgrad": (g, x)}
  return {k: _operands(*tensors[k], s, keys.get(k), states)
          for k, s in specs.items()}


def value64(entry, q, raw) -> np.ndarray:
  """float64 values of one quantized operand; a cast keeps Inf and NaN."""
  v, codes, scale = entry
  if codes is None:
    return np.asarray(v).astype(np.float64)
  out = np.asarray(codes).astype(np.float64)
  if scale is not None:
    out = out * np.float64(np.asarray(scale))
  if q.kind == "cast":
    raw = np.asarray(raw).astype(np.float64)
    out = np.where(np.isfinite(raw), out, raw)
  return out


class Reference(NamedTuple):
  """A GEMM's float64 product, the same with subnormal factors flushed to
  zero (as XLA on CPU may: Inf times one is NaN), the sum of its terms'
  magnitudes (finite ones) and of those with a subnormal factor, and its
  contracting length."""
  ref: np.ndarray
  flushed: np.ndarray
  mag: np.ndarray
  sub: np.ndarray
  k: int


def product64(a64, b64, sa: str, sb: str, so: str, k: int) -> Reference:
  """The :class:`Reference` of ``einsum(sa,sb->so)`` of float64 operands."""
  e = f"{sa},{sb}->{so}"
  fin = lambda v: np.where(np.isfinite(v), np.abs(v), 0.0)
  subn = lambda v: np.where((v != 0) & (np.abs(v) < TINY), np.abs(v), 0.0)
  with np.errstate(all="ignore"):
    # optimize=False: NumPy's own loop (IEEE Inf and NaN), never BLAS.
    ref = np.einsum(e, a64, b64, optimize=False)
    flush = lambda v: np.where(np.abs(v) < TINY, 0.0, v)
    flushed = np.einsum(e, flush(a64), flush(b64), optimize=False)
    mag = np.einsum(e, fin(a64), fin(b64), optimize=False)
    sub = (np.einsum(e, subn(a64), fin(b64), optimize=False)
           + np.einsum(e, fin(a64), subn(b64), optimize=False))
  return Reference(ref, flushed, mag, sub, k)


def check_gemm(what: str, out, r: Reference) -> None:
  """``out`` (the core's GEMM, in its dtype) against the float64 reference."""
  dtype = np.dtype(out.dtype)
  got = np.asarray(out).astype(np.float64)
  assert got.shape == r.ref.shape, (what, got.shape, r.ref.shape)
  top = float(jnp.finfo(dtype).max)
  tol = (2.0 * (r.k + 2) * 2.0**-24 * r.mag + r.sub
         + 4.0 * (r.k + 1) * TINY)
  if dtype != np.float32:  # rounded once more, to the result's dtype
    tol = tol + 2.0 ** -(jnp.finfo(dtype).nmant + 1) * (np.abs(
        np.nan_to_num(r.ref)) + tol)
  can_overflow = r.mag + tol > top
  with np.errstate(all="ignore"):
    bad = np.zeros(got.shape, bool)
    nan_ref, inf_ref = np.isnan(r.ref), np.isinf(r.ref)
    bad |= nan_ref & ~np.isnan(got)
    bad |= inf_ref & (got != r.ref) & ~(
        (can_overflow | np.isnan(r.flushed)) & np.isnan(got))
    fin_ref = np.isfinite(r.ref)
    bad |= fin_ref & ~np.isfinite(got) & ~can_overflow
    bad |= fin_ref & np.isfinite(got) & ~(np.abs(got - r.ref) <= tol)
  if bad.any():
    i = tuple(int(j) for j in np.argwhere(bad)[0])
    raise AssertionError(
        f"{what}: {int(bad.sum())} of {bad.size} elements off the float64 "
        f"product of the quantized operands; first at {i}: got {got[i]!r}, "
        f"reference {r.ref[i]!r} (tolerance {tol[i]:.3g}, sum of |terms| "
        f"{r.mag[i]:.3g}, K={r.k})")


def _stays_finite(t, q) -> bool:
  """Finite, and finite in a wide format it is cast to (bfloat16 rounds
  values past its max to Inf, as IEEE and ``astype`` do)."""
  t = np.asarray(t).astype(np.float32)
  with np.errstate(over="ignore"):
    return bool(np.isfinite(t).all() and (
        q is None or q.kind != "cast" or jaxfp8.formats.is_narrow(q.format)
        or np.isfinite(t.astype(jnp.dtype(q.format))).all()))


def check_call(name, x, w, g, dims, *, key=None, state=None, reference=True,
               eager=True, label=""):
  """Every GEMM of one call, jitted and (with ``eager``) op by op, against
  its reference (with ``reference``), and finite where the inputs say so.

  jit and eager are each held to the reference, not to each other's bits:
  XLA sums a dot in another order inside a fused program than alone
  (``jax.vjp(lax.dot_general)`` itself differs by many ulps between the
  two on CPU), so the quantized operands agree and the sums agree to
  float32 accumulation."""
  recipe = recipes.get_recipe(name)
  args = (x, w, g, key, state, name, dims)
  outs = dict(zip(("fwd", "dgrad", "wgrad"), _gemms(*args)))
  quantized = _quantized(*args) if reference else None
  specs = gemm_specs(recipe, x.ndim, w.ndim, dims)
  sl, sr, so = subscripts(x.ndim, w.ndim, dims)
  letters = {"fwd": (sl, sr, so), "dgrad": (so, sr, sl),
             "wgrad": (so, sl, sr)}
  raw = {"fwd": (x, w), "dgrad": (g, w), "wgrad": (g, x)}
  eager_outs = (dict(zip(("fwd", "dgrad", "wgrad"), _vjp(*args)))
                if eager else {})
  for k, spec in specs.items():
    size = math.prod(raw[k][0].shape[d] for d in spec.a[1])
    runs = {"jit": outs[k], **({"eager": eager_outs[k]} if eager else {})}
    if reference:
      a, b = (value64(e, q, t) for e, q, t in zip(
          quantized[k], (spec.qa, spec.qb), raw[k]))
      r = product64(a, b, *letters[k], size)
      for run, out in runs.items():
        check_gemm(f"{name} {label} {k} ({run})", out, r)
    # Finite inputs, each at most 2^125 (from there a quantized value may
    # round up to 2^128, or a Hadamard transform reach 4x its input, past
    # float32's max: the bound docs/recipes.md states), and an exact product
    # far from float32's max: finite, jitted and eager.
    t0, t1 = (np.asarray(t).astype(np.float64) for t in raw[k])
    amax = lambda t: np.abs(t).max(initial=0.0)
    if (all(_stays_finite(t, q) for t, q in zip(raw[k], (spec.qa, spec.qb)))
        and max(amax(t0), amax(t1)) <= 2.0**125
        and max(size, 1) * amax(t0) * amax(t1) <= 2.0**100):
      for run, out in runs.items():
        out = np.asarray(out).astype(np.float32)
        assert np.isfinite(out).all(), (
            f"{name} {label} {k} ({run}): {int((~np.isfinite(out)).sum())} "
            f"non-finite elements from finite operands (amaxes "
            f"{amax(t0):.3g}, {amax(t1):.3g}, K={size})")


# -- valid calls -------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
@hypothesis.settings(max_examples=_n(8))
@hypothesis.given(data=st.data())
def test_gemms_are_products_of_their_quantized_operands(name, data):
  recipe = recipes.get_recipe(name)
  case = data.draw(st.sampled_from(_cases(name)), label="case")
  x = data.draw(arrays(case.lhs, case.dtype), label="x")
  w = data.draw(arrays(case.rhs, case.dtype), label="w")
  y_shape = jax.eval_shape(lambda a, b: jax.lax.dot_general(a, b, case.dims),
                           x, w).shape
  g = data.draw(arrays(y_shape, case.dtype), label="dy")
  key = (jax.random.key(data.draw(st.integers(0, 2**31 - 1), label="key"))
         if recipe.needs_key else None)
  # A keyed recipe's reference costs a program as large as the core's: in
  # CI only the first keyed recipe checks it; the others check that their
  # results are finite where they must be and that jit and eager agree.
  check_call(name, x, w, g, case.dims, key=key, state=_state(data.draw, recipe),
             reference=not recipe.needs_key or name == KEYED[0] or _long(),
             label=case.name)


@functools.partial(jax.jit, static_argnums=(2, 3))
def _empty_gemms(operands, key, name, cases):
  return [_vjp(x, w, g, key, state, name, c.dims)
          for c, (x, w, g, state) in zip(cases, operands)]


@pytest.mark.parametrize("name", NAMES)
def test_empty_operands_give_empty_or_zero_results(name):
  """Each GEMM of a case of :data:`EMPTY` is empty or contracts no element,
  so exact zeros, whatever the other operands hold (Inf and NaN here), in
  the shape and dtype of ``lax.dot_general``. One program: one case per
  recipe in CI, in turn; all four in the ``long`` profile."""
  recipe = recipes.get_recipe(name)
  cases = EMPTY if _long() else (EMPTY[NAMES.index(name) % len(EMPTY)],)
  operands = []
  for i, c in enumerate(cases):
    rng = np.random.default_rng(i)
    x, w = (rng.standard_normal(s).astype(np.float32) for s in (c.lhs, c.rhs))
    y = jax.eval_shape(lambda a, b: jax.lax.dot_general(a, b, c.dims), x, w)
    g = rng.standard_normal(y.shape).astype(np.float32)
    for t in (x, w, g):
      t.flat[:2] = (np.inf, np.nan)[:t.size]
    operands.append(tuple(t.astype(c.dtype) for t in (x, w, g))
                    + (recipes.init_state(recipe),))
  key = KEY if recipe.needs_key else None
  for c, (x, w, g, _), outs in zip(cases, operands,
                                   _empty_gemms(operands, key, name, cases)):
    for what, out, like in (("fwd", outs[0], g), ("dgrad", outs[1], x),
                            ("wgrad", outs[2], w)):
      assert (out.shape, out.dtype) == (like.shape, like.dtype), (
          c.name, what, out.shape, out.dtype)
      assert not np.asarray(out).astype(np.float32).any(), (
          f"{name} {c.name} {what}: {np.asarray(out)}")


# -- invalid calls -------------------------------------------------------------

def _x_w(lhs_shape=(16, 32), rhs_shape=(32, 16)):
  return np.ones(lhs_shape, np.float32), np.ones(rhs_shape, np.float32)


def _valid_key_state(recipe):
  return (KEY if recipe.needs_key else None,
          recipes.init_state(recipe) if recipe.state_roles else None)


def check_raises(call, arg: str) -> None:
  """``call(jit)`` raises eagerly and under ``jax.jit``, naming ``arg``."""
  for jit in (False, True):
    with pytest.raises(ERRORS) as e:
      call(jit)
    msg = str(e.value)
    assert "dot_general" in msg and f"`{arg}`" in msg, (jit, msg)


def _call(x, w, dims, name, key, state, jit: bool):
  f = lambda a, b, k, s: recipes.dot_general(a, b, dims, recipe=name, key=k,
                                             state=s)
  return (jax.jit(f) if jit else f)(x, w, key, state)


@st.composite
def bad_dims(draw):
  """(lhs shape, rhs shape, dimension_numbers) lax.dot_general refuses, or
  dims that are not ints; shapes fit every recipe but for the fault."""
  kind = draw(st.sampled_from((
      "out_of_range", "negative", "float", "bool", "duplicate",
      "contract_overlaps_batch", "contract_lengths", "batch_lengths",
      "unequal_counts", "dims_of_a_3d_operand", "scalar_operand",
      "malformed")))
  if draw(st.booleans()):
    lhs, rhs, dims = (2, 16, 32), (2, 32, 16), [[[2], [1]], [[0], [0]]]
  else:
    lhs, rhs, dims = (16, 32), (32, 16), [[[1], [0]], [[], []]]
  nd = len(lhs)
  side = draw(st.integers(0, 1))
  which = draw(st.integers(0, 1)) if nd == 3 else 0
  if kind == "out_of_range":
    dims[which][side][0] = nd + draw(st.integers(0, 3))
  elif kind == "negative":
    dims[which][side][0] = -draw(st.integers(1, 3))
  elif kind == "float":
    dims[which][side][0] = draw(st.sampled_from((1.7, 0.5, 2.0, 1.0)))
  elif kind == "bool":
    lhs, rhs, dims = (16, 32), (32, 16), [[[1], [0]], [[], []]]
    dims[0][side][0] = draw(st.sampled_from((True, False)))
  elif kind == "duplicate":
    lhs, rhs = (2, 32, 32), (2, 32, 32)
    dims = [[[2, 2], [1, 1]], [[0], [0]]]
  elif kind == "contract_overlaps_batch":
    lhs, rhs = (32, 32), (32, 32)
    dims = [[[1], [0]], [[1], [0]]]
  elif kind == "contract_lengths":
    rhs = (rhs[:-2] + (draw(st.sampled_from((16, 31, 33, 0))),) + rhs[-1:])
  elif kind == "batch_lengths":
    lhs, rhs, dims = (2, 16, 32), (2, 32, 16), [[[2], [1]], [[0], [0]]]
    rhs = (draw(st.sampled_from((1, 3, 0))), 32, 16)
  elif kind == "unequal_counts":
    dims[0][side] = dims[0][side] + [nd - 2 if side else 0]
  elif kind == "dims_of_a_3d_operand":
    lhs, rhs, dims = (16, 32), (32, 16), [[[2], [1]], [[0], [0]]]
  elif kind == "scalar_operand":
    lhs, rhs = (), (32,)
    dims = [[[0], [0]], [[], []]]
    if side:
      lhs, rhs = (32,), ()
  else:
    dims = draw(st.sampled_from((((2,), (1,)), None, 3, "((2,),(1,))",
                                 (((2,), (1,)),),
                                 (((2,), (1,)), ((0,), (0,)), ()))))
    return lhs, rhs, dims
  tup = lambda t: tuple(tuple(d) for d in t)
  return lhs, rhs, (tup(dims[0]), tup(dims[1]))


@pytest.mark.parametrize("name", NAMES)
@hypothesis.settings(max_examples=_n(12))
@hypothesis.given(bad=bad_dims())
def test_bad_dimension_numbers_raise_naming_them(name, bad):
  lhs, rhs, dims = bad
  x, w = _x_w(lhs, rhs)
  key, state = _valid_key_state(recipes.get_recipe(name))
  check_raises(functools.partial(_call, x, w, dims, name, key, state),
               "dimension_numbers")


_BAD_KEYS = {
    "missing": lambda: None,
    "batch_of_two": lambda: jax.random.split(KEY, 2),
    "batch_of_one": lambda: KEY[None],
    "raw_batch": lambda: jax.random.split(jax.random.PRNGKey(0), 2),
    "float32_array": lambda: np.zeros((2,), np.float32),
    "int32_array": lambda: np.zeros((2,), np.int32),
    "raw_of_the_wrong_length": lambda: np.zeros((3,), np.uint32),
    "float_scalar": lambda: jnp.float32(0.0),
    "python_int": lambda: 0,
}


@pytest.mark.parametrize("bad", list(_BAD_KEYS))
@pytest.mark.parametrize("name", KEYED)
def test_bad_keys_raise_naming_the_key(name, bad):
  x, w = _x_w()
  check_raises(functools.partial(_call, x, w, D2, name, _BAD_KEYS[bad](),
                                 None), "key")


BAD_STATES = ("none", "missing_role", "extra_role", "not_a_mapping",
              "not_delayed_scaling", "scale_of_shape_2", "scale_of_shape_1x1",
              "history_of_shape_0", "scalar_history",
              "format_of_another_role")


def _bad_delayed_states():
  good = recipes.init_state("fp8_delayed")
  return {
      "none": None,
      "missing_role": {r: good[r] for r in ("x", "w")},
      "extra_role": dict(good, bias=good["x"]),
      "not_a_mapping": [good["x"], good["w"], good["dy"]],
      "not_delayed_scaling": dict(good, w=1.0),
      "scale_of_shape_2": dict(good, x=dataclasses.replace(
          good["x"], scale=jnp.ones((2,), jnp.float32))),
      "scale_of_shape_1x1": dict(good, dy=dataclasses.replace(
          good["dy"], scale=jnp.ones((1, 1), jnp.float32))),
      "history_of_shape_0": dict(good, w=dataclasses.replace(
          good["w"], amax_history=jnp.zeros((0,), jnp.float32))),
      "scalar_history": dict(good, x=dataclasses.replace(
          good["x"], amax_history=jnp.zeros((), jnp.float32))),
      "format_of_another_role": dict(good, dy=good["x"]),
  }


@pytest.mark.parametrize("bad", BAD_STATES)
def test_bad_delayed_states_raise_naming_the_state(bad):
  x, w = _x_w()
  check_raises(functools.partial(_call, x, w, D2, "fp8_delayed", None,
                                 _bad_delayed_states()[bad]), "state")


@pytest.mark.parametrize("name", [n for n in NAMES
                                  if not recipes.get_recipe(n).state_roles])
def test_a_state_for_a_stateless_recipe_raises(name):
  x, w = _x_w()
  key = KEY if recipes.get_recipe(name).needs_key else None
  check_raises(functools.partial(_call, x, w, D2, name, key,
                                 recipes.init_state("fp8_delayed")), "state")
