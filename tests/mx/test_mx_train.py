"""MX training: straight-through gradients, fake_quantize, the MX dot_general.

Each GEMM of ``mx.dot_general`` (forward, input gradient, weight gradient) is
checked against the float64 product of its own operands, quantized by
``mx.quantize`` along that GEMM's contracting dims, for 2-D, batched and
Einsum-style dimension numbers.
"""
from __future__ import annotations

import math
import string

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxfp8 import mx
from jaxfp8._src.kernels import dispatch

FORMATS = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp4_e2m1"]

# name: (lhs shape, rhs shape, dimension numbers)
CASES = {
    "2d": ((8, 64), (64, 32), (((1,), (0,)), ((), ()))),
    "batched_3d": ((2, 8, 64), (2, 64, 32), (((2,), (1,)), ((0,), (0,)))),
    # "btnh,nhd->btd": two contracting dims, blocked as one.
    "einsum": ((2, 4, 2, 32), (2, 32, 16), (((2, 3), (0, 1)), ((), ()))),
    # attention logits "bthd,bshd->bhts"
    "attention": ((2, 32, 2, 32), (2, 32, 2, 32),
                  (((3,), (3,)), ((0, 2), (0, 2)))),
}


def _subscripts(lhs_nd, rhs_nd, dims):
  """einsum subscripts (lhs, rhs, out) of a dot_general."""
  (lc, rc), (lb, rb) = dims
  letters = iter(string.ascii_letters)
  ls, rs = [None] * lhs_nd, [None] * rhs_nd
  for a, b in zip(lb, rb):
    ls[a] = rs[b] = next(letters)
  for a, b in zip(lc, rc):
    ls[a] = rs[b] = next(letters)
  for i in range(lhs_nd):
    ls[i] = ls[i] or next(letters)
  for i in range(rhs_nd):
    rs[i] = rs[i] or next(letters)
  out = ([ls[a] for a in lb] + [ls[i] for i in range(lhs_nd)
                                if i not in lc and i not in lb]
         + [rs[i] for i in range(rhs_nd) if i not in rc and i not in rb])
  return "".join(ls), "".join(rs), "".join(out)


def _qdq64(x, axes, fmt):
  """float64 values of x quantized along `axes` (flattened), by mx.quantize."""
  x = np.asarray(x, np.float32)
  rest = [a for a in range(x.ndim) if a not in axes]
  perm = rest + list(axes)
  xt = x.transpose(perm)
  lead = xt.shape[:len(rest)]
  q = mx.quantize(xt.reshape(lead + (math.prod(xt.shape[len(rest):]),)), fmt,
                  scale_mode="rceil", pad=True)
  return np.asarray(q.dequantize(), np.float64).reshape(xt.shape).transpose(
      np.argsort(perm))


def _normal(seed, shape, scale=1.0):
  """float32 N(0, scale^2) test inputs from NumPy: their source doesn't
  matter to these tests, and jax.random would compile per shape."""
  x = np.random.default_rng(seed).standard_normal(shape) * scale
  return jax.device_put(x.astype(np.float32))


def _rel(a, b):
  a = np.asarray(a, np.float64)
  return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)


# Every format on 2-D; the other layouts each with two formats (compile time);
# the kernel backends (Pallas interpreted, lax.scaled_dot) on a few of each.
PAIRS = ([("2d", f, "auto") for f in FORMATS]
         + [("batched_3d", "mxfp8_e4m3", "auto"),
            ("batched_3d", "mxfp4_e2m1", "auto"),
            ("einsum", "mxfp8_e5m2", "auto"), ("einsum", "mxfp6_e2m3", "auto"),
            ("attention", "mxfp8_e4m3", "auto"),
            ("2d", "mxfp8_e4m3", "pallas"), ("attention", "mxfp8_e5m2", "pallas"),
            ("2d", "mxfp4_e2m1", "scaled_dot"),
            ("batched_3d", "mxfp8_e4m3", "scaled_dot")])


@pytest.mark.parametrize("case,fmt,backend", PAIRS)
def test_each_gemm_is_the_product_of_its_own_quantized_operands(case, fmt,
                                                                backend):
  ls, rs, dims = CASES[case]
  seed = list(CASES).index(case) * 3
  x = _normal(seed, ls, 3.0)
  w = _normal(seed + 1, rs, 0.1)
  recipe = mx.MXRecipe(fwd=fmt, dgrad=fmt, wgrad=fmt)

  interpret = True if backend == "pallas" else None

  @jax.jit
  def gemms(a, b, g):
    y, vjp = jax.vjp(lambda a, b: mx.dot_general(
        a, b, dims, recipe=recipe, backend=backend, interpret=interpret), a, b)
    return (y,) + vjp(g)

  y_shape = jax.eval_shape(lambda a, b: mx.dot_general(
      a, b, dims, recipe=recipe), x, w).shape
  g = _normal(seed + 2, y_shape)
  y, dx, dw = gemms(x, w, g)
  sl, sr, so = _subscripts(len(ls), len(rs), dims)
  (lc, rc), (lb, rb) = dims
  lf = [i for i in range(len(ls)) if i not in lc and i not in lb]
  rf = [i for i in range(len(rs)) if i not in rc and i not in rb]
  g_lf = list(range(len(lb), len(lb) + len(lf)))
  g_rf = list(range(len(lb) + len(lf), y.ndim))
  fwd = np.einsum(f"{sl},{sr}->{so}", _qdq64(x, lc, fmt), _qdq64(w, rc, fmt))
  dgrad = np.einsum(f"{so},{sr}->{sl}", _qdq64(g, g_rf, fmt),
                    _qdq64(w, rf, fmt))
  wgrad = np.einsum(f"{sl},{so}->{sr}", _qdq64(x, lf, fmt),
                    _qdq64(g, g_lf, fmt))
  assert y.dtype == dx.dtype == dw.dtype == jnp.float32
  assert _rel(y, fwd) < 1e-6
  assert _rel(dx, dgrad) < 1e-6
  assert _rel(dw, wgrad) < 1e-6


def test_backend_choice_per_platform_and_format():
  choose = dispatch.mx_backend
  assert choose("gpu", "mxfp8_e4m3", block_size=32) == "pallas"
  assert choose("cuda", "mxfp8_e5m2", block_size=64) == "pallas"
  assert choose("gpu", "mxfp8_e4m3", block_size=16) == "dequantize"
  for fmt in ["mxfp4_e2m1", "mxfp6_e3m2", "nvfp4", "mxint8"]:
    assert choose("gpu", fmt, block_size=32) == "dequantize"
  for platform in ["cpu", "tpu"]:
    assert choose(platform, "mxfp8_e4m3", block_size=32) == "dequantize"
  assert choose("cpu", "mxfp4_e2m1", block_size=32,
                backend="scaled_dot") == "scaled_dot"
  assert choose("cpu", "mxfp8_e4m3", block_size=32,
                backend="pallas") == "pallas"
  with pytest.raises(NotImplementedError, match="mxfp4_e2m1"):
    choose("gpu", "mxfp4_e2m1", block_size=32, backend="pallas")
  with pytest.raises(NotImplementedError, match="fp6"):
    choose("cpu", "mxfp6_e2m3", block_size=32, backend="scaled_dot")
  x, w = jnp.ones((4, 64)), jnp.ones((64, 8))
  dims = (((1,), (0,)), ((), ()))
  with pytest.raises(ValueError, match="`backend` argument to `dot_general`"):
    mx.dot_general(x, w, dims, backend="cudnn")
  # raised at the forward, for a backward GEMM the backend can't take
  with pytest.raises(NotImplementedError, match="backend='pallas'"):
    mx.dot_general(x, w, dims, recipe="d=mxfp4", backend="pallas")
  with pytest.raises(TypeError, match="`interpret`"):
    mx.dot_general(x, w, dims, interpret="yes")


@pytest.mark.parametrize("backend,fmt", [("pallas", "mxfp8_e4m3"),
                                         ("scaled_dot", "mxfp4_e2m1"),
                                         ("auto", "mxfp6_e2m3")])
def test_packed_weight_products_per_backend(backend, fmt):
  x = _normal(0, (2, 5, 96), 3.0)
  w = _normal(1, (96, 24), 0.1)
  packed = mx.quantize(w, fmt, axis=0, scale_mode="rceil", pad=True)
  dims = (((2,), (0,)), ((), ()))
  wd = np.asarray(packed.dequantize(), np.float64)
  interpret = True if backend == "pallas" else None
  serve = jax.jit(lambda a, q, r: mx.dot_general(
      a, q, dims, recipe=r, backend=backend, interpret=interpret),
                  static_argnums=2)
  dyn = serve(x, packed, fmt)
  ref = np.einsum("btk,kn->btn", _qdq64(x, [2], fmt), wd)
  assert dyn.dtype == jnp.float32 and _rel(dyn, ref) < 1e-6
  if backend == "auto":  # weight-only: the activations as they are
    only = serve(x, packed, None)
    ref = np.einsum("btk,kn->btn", np.asarray(x, np.float64), wd)
    assert _rel(only, ref) < 1e-6
  else:
    with pytest.raises(NotImplementedError, match="dynamic MX activations"):
      serve(x, packed, None)


def test_high_precision_weight_gradient_and_jit():
  ls, rs, dims = CASES["2d"]
  x, w, g = _normal(0, ls), _normal(1, rs), _normal(2, (ls[0], rs[1]))
  f = jax.jit(lambda a, b: jax.vjp(
      lambda a, b: mx.dot_general(a, b, dims, recipe="mxfp8_hp_wgrad"),
      a, b)[1](g))
  dx, dw = f(x, w)
  np.testing.assert_allclose(
      dw, np.asarray(x, np.float64).T @ np.asarray(g, np.float64),
      rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(
      dx, _qdq64(g, [1], "mxfp8_e4m3") @ _qdq64(w, [1], "mxfp8_e4m3").T,
      rtol=1e-5, atol=1e-5)
  # bf16 operands give bf16 results and gradients
  xb = jax.device_put(np.asarray(x).astype(jnp.bfloat16))
  wb = jax.device_put(np.asarray(w).astype(jnp.bfloat16))
  yb, vjp = jax.vjp(lambda a, b: mx.dot_general(a, b, dims), xb, wb)
  assert yb.dtype == jnp.bfloat16
  assert [t.dtype for t in vjp(yb)] == [jnp.bfloat16, jnp.bfloat16]


def test_stochastic_gradient_needs_a_key_and_uses_it():
  ls, rs, dims = CASES["2d"]
  x, w = _normal(0, ls), _normal(1, rs)
  recipe = mx.MXRecipe(stochastic_grad=True)
  with pytest.raises(ValueError, match="needs a `key`"):
    mx.dot_general(x, w, dims, recipe=recipe)

  def grads(key):
    return jax.grad(lambda a: mx.dot_general(
        a, w, dims, recipe=recipe, key=key).sum() * 0.37)(x)

  a, b = grads(jax.random.key(3)), grads(jax.random.key(4))
  assert not np.array_equal(a, b)
  np.testing.assert_array_equal(a, grads(jax.random.key(3)))


def test_recipes_and_strings():
  assert mx.get_recipe("mxfp8") == mx.MXRecipe()
  r = mx.get_recipe("f=mxfp4,d=mxfp8_e5m2,w=none,scale=floor,block=16,sr=1")
  assert (r.fwd, r.dgrad, r.wgrad, r.scale_mode, r.block_size,
          r.stochastic_grad) == ("mxfp4_e2m1", "mxfp8_e5m2", None, "floor",
                                 16, True)
  assert mx.get_recipe("nvfp4").wgrad == "nvfp4"
  assert mx.get_recipe(None) == mx.MXRecipe(None, None, None)
  with pytest.raises(AttributeError):
    r.fwd = "mxfp8"  # frozen
  with pytest.raises(ValueError, match="bad entry"):
    mx.get_recipe("q=mxfp8")
  with pytest.raises(ValueError, match="fwd"):
    mx.MXRecipe(fwd="float8_e4m3fn")
  with pytest.raises(ValueError, match="scale_mode"):
    mx.MXRecipe(scale_mode="up")


# -- gradients: never silent zeros ---------------------------------------------

def test_grad_through_quantize_dequantize_is_straight_through():
  x = np.asarray(_normal(0, (4, 64), 100.0)).copy()
  x[0, 0] = 1e6  # saturates in e4m3 under floor: still passes
  x = jax.device_put(x)
  c = _normal(1, x.shape)
  for fmt in ["mxfp8_e4m3", "mxfp6_e3m2", "mxfp4_e2m1", "nvfp4", "mxint8"]:
    g = jax.grad(lambda v: (mx.quantize(v, fmt).dequantize() * c).sum())(x)
    np.testing.assert_array_equal(g, c)
  for fmt in ["mxfp8_e4m3", "nvfp4"]:
    g = jax.jit(jax.grad(
        lambda v: (mx.quantize(v, fmt).dequantize("bf16") * c).sum()))(x)
    np.testing.assert_allclose(g, c, rtol=1e-2)
    g = jax.grad(lambda v: (mx.fake_quantize(v, fmt) * c).sum())(x)
    np.testing.assert_array_equal(g, c)
  y = mx.fake_quantize(jax.device_put(np.asarray(x).astype(jnp.bfloat16)),
                       "mxfp4")
  assert y.dtype == jnp.bfloat16
  # views keep the straight-through source
  g = jax.grad(lambda v: mx.quantize(v, "mxfp4").T[32:, 3:].dequantize().sum()
               )(x)
  g = np.asarray(g)  # checked in NumPy: no eager slice programs
  assert g.shape == (4, 64) and g[3, 32:].sum() == 32 and g.sum() == 32


def test_grad_through_matmul():
  a, b = _normal(0, (4, 64)), _normal(1, (64, 8))

  def loss(a, b, method):
    qa = mx.quantize(a, "mxfp8_e4m3")
    qb = mx.quantize(b, "mxfp8_e4m3", axis=0)
    return mx.matmul(qa, qb, method=method).sum()

  ga, gb = jax.grad(loss, argnums=(0, 1))(a, b, "dequantize")
  qa = mx.quantize(a, "mxfp8_e4m3").dequantize()
  qb = mx.quantize(b, "mxfp8_e4m3", axis=0).dequantize()
  # References in float64 NumPy (exact sums of 8 and 4 values).
  ones = np.ones((4, 8))
  np.testing.assert_allclose(ga, ones @ np.asarray(qb, np.float64).T,
                             rtol=1e-6)
  np.testing.assert_allclose(gb, np.asarray(qa, np.float64).T @ ones,
                             rtol=1e-6)
  ga2, gb2 = jax.grad(loss, argnums=(0, 1))(a, b, "scaled_dot")
  np.testing.assert_allclose(ga2, ga, rtol=1e-2)
  np.testing.assert_allclose(gb2, gb, rtol=1e-2)
  # a plain operand against packed weights: quantized on the fly
  c = mx.matmul(a, mx.quantize(b, "mxfp4_e2m1", axis=0), method="scaled_dot")
  ref = mx.matmul(mx.quantize(a, "mxfp4_e2m1"),
                  mx.quantize(b, "mxfp4_e2m1", axis=0))
  np.testing.assert_allclose(c, ref, rtol=1e-2, atol=1e-2)
  # fake_quantize crosses a jit boundary
  g = jax.grad(lambda v: jax.jit(mx.fake_quantize, static_argnums=1)(
      v, "mxfp4").sum())(a)
  np.testing.assert_array_equal(g, np.ones(a.shape, np.float32))


def test_a_path_without_gradient_raises():
  # Operands built in NumPy: their values don't matter here.
  e = np.arange(64.0, dtype=np.float32).reshape(2, 32).astype(
      jnp.float8_e4m3fn)
  s = jax.device_put(np.full((2, 1), 127, np.uint8))

  def loss(elements):
    return mx.from_scaled(elements, s, "mxfp8_e4m3").dequantize().sum()

  with pytest.raises(TypeError, match="carries no gradient"):
    jax.grad(loss)(jax.device_put(e))


# -- MXArray views -------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["mxfp8_e4m3", "mxfp6_e3m2", "mxfp4_e2m1",
                                 "nvfp4"])
def test_views_match_the_dequantized_views(fmt):
  x = _normal(0, (2, 3, 96))
  a = mx.quantize(x, fmt)
  d = np.asarray(a.dequantize())
  np.testing.assert_array_equal(a.T.dequantize(), d.T)
  np.testing.assert_array_equal(a.transpose(1, 2, 0).dequantize(),
                                d.transpose(1, 2, 0))
  np.testing.assert_array_equal(a.reshape(6, 96).dequantize(),
                                d.reshape(6, 96))
  np.testing.assert_array_equal(a.reshape(3, 2, 1, 96).dequantize(),
                                d.reshape(3, 2, 1, 96))
  b = a.T  # blocked axis first
  bs = a.block_size
  for idx in [(1,), (1, slice(None), slice(bs, None)), (Ellipsis, slice(0, bs)),
              (slice(None, None, -1), 2, slice(bs, 2 * bs))]:
    np.testing.assert_array_equal(a[idx].dequantize(), d[idx])
  np.testing.assert_array_equal(b[bs:, 1:].dequantize(), d.T[bs:, 1:])
  packed = a[0, :, bs:]
  assert packed.nbytes < a.nbytes
  with pytest.raises(IndexError, match="int index on its blocked axis"):
    a[..., 3]
  with pytest.raises(IndexError, match="block boundaries"):
    a[..., 1:]
  with pytest.raises(ValueError, match="keep the blocked axis"):
    a.reshape(2, 288)
  with pytest.raises(ValueError, match="permutation"):
    a.transpose(0, 0, 1)
