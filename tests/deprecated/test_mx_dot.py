"""The deprecated MX ``dot_general`` (``jaxfp8.mx.dot_general``).

Each GEMM of ``mx.dot_general`` (forward, input gradient, weight gradient) is
checked against the float64 product of its own operands, quantized by
``mx.quantize`` along that GEMM's contracting dims, for 2-D, batched and
Einsum-style dimension numbers.
"""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dot_reference import subscripts
from jaxfp8 import mx
from mx_testing import device_normal
from mx_testing import rel

# These tests exercise the deprecated name itself.
pytestmark = pytest.mark.filterwarnings(
    "ignore:jaxfp8.mx.* is deprecated:DeprecationWarning")

FORMATS = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp4_e2m1"]

# Room for the six operands of every case below, each flattened to rows of
# its blocked (contracting) elements.
_ROWS, _COLS = 1024, 64


@functools.lru_cache(maxsize=None)
def _qdq_program(fmt):
  return jax.jit(lambda x: mx.quantize(x, fmt, scale_mode="rceil",
                                       pad=True).dequantize())


def qdq64s(fmt, *pairs):
  """float64 values of each (x, axes) quantized along `axes` (flattened) by
  mx.quantize: mx_testing.qdq64 for several operands at once.

  mx_testing.qdq64 calls mx.quantize eagerly, compiling it for every
  operand's shape. Here every operand's rows (blocks run along a row) are
  stacked, zero-padded, into one array of a fixed shape, quantized by one
  program compiled once per format. An MX block's scale is its own
  elements' (no per-tensor scale in MX formats), and zeros padding a block
  leave its amax as it was, so each operand quantizes as it does alone.
  """
  buf = np.zeros((_ROWS, _COLS), np.float32)
  layouts, row = [], 0
  for x, axes in pairs:
    x = np.asarray(x, np.float32)
    rest = [a for a in range(x.ndim) if a not in axes]
    perm = rest + list(axes)
    xt = x.transpose(perm)
    flat = xt.reshape(-1, math.prod(xt.shape[len(rest):]))
    assert row + flat.shape[0] <= _ROWS and flat.shape[1] <= _COLS
    buf[row:row + flat.shape[0], :flat.shape[1]] = flat
    layouts.append((row, flat.shape, xt.shape, perm))
    row += flat.shape[0]
  deq = np.asarray(_qdq_program(fmt)(jax.device_put(buf)), np.float64)
  return [deq[r:r + rows, :cols].reshape(shape).transpose(np.argsort(perm))
          for r, (rows, cols), shape, perm in layouts]


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
  x = device_normal(seed, ls, 3.0)
  w = device_normal(seed + 1, rs, 0.1)
  recipe = mx.MXRecipe(fwd=fmt, dgrad=fmt, wgrad=fmt)

  interpret = True if backend == "pallas" else None

  @jax.jit
  def gemms(a, b, g):
    y, vjp = jax.vjp(lambda a, b: mx.dot_general(
        a, b, dims, recipe=recipe, backend=backend, interpret=interpret), a, b)
    return (y,) + vjp(g)

  y_shape = jax.eval_shape(lambda a, b: mx.dot_general(
      a, b, dims, recipe=recipe), x, w).shape
  g = device_normal(seed + 2, y_shape)
  y, dx, dw = gemms(x, w, g)
  sl, sr, so = subscripts(len(ls), len(rs), dims)
  (lc, rc), (lb, rb) = dims
  lf = [i for i in range(len(ls)) if i not in lc and i not in lb]
  rf = [i for i in range(len(rs)) if i not in rc and i not in rb]
  g_lf = list(range(len(lb), len(lb) + len(lf)))
  g_rf = list(range(len(lb) + len(lf), y.ndim))
  x_c, w_c, g_rf_q, w_rf, x_lf, g_lf_q = qdq64s(
      fmt, (x, lc), (w, rc), (g, g_rf), (w, rf), (x, lf), (g, g_lf))
  fwd = np.einsum(f"{sl},{sr}->{so}", x_c, w_c)
  dgrad = np.einsum(f"{so},{sr}->{sl}", g_rf_q, w_rf)
  wgrad = np.einsum(f"{sl},{so}->{sr}", x_lf, g_lf_q)
  assert y.dtype == dx.dtype == dw.dtype == jnp.float32
  assert rel(y, fwd) < 1e-6
  assert rel(dx, dgrad) < 1e-6
  assert rel(dw, wgrad) < 1e-6


def test_high_precision_weight_gradient_and_jit():
  ls, rs, dims = CASES["2d"]
  x, w, g = device_normal(0, ls), device_normal(1, rs), device_normal(2, (ls[0], rs[1]))
  f = jax.jit(lambda a, b: jax.vjp(
      lambda a, b: mx.dot_general(a, b, dims, recipe="mxfp8_hp_wgrad"),
      a, b)[1](g))
  dx, dw = f(x, w)
  np.testing.assert_allclose(
      dw, np.asarray(x, np.float64).T @ np.asarray(g, np.float64),
      rtol=1e-5, atol=1e-5)
  g_q, w_q = qdq64s("mxfp8_e4m3", (g, [1]), (w, [1]))
  np.testing.assert_allclose(dx, g_q @ w_q.T, rtol=1e-5, atol=1e-5)
  # bf16 operands give bf16 results and gradients
  xb = jax.device_put(np.asarray(x).astype(jnp.bfloat16))
  wb = jax.device_put(np.asarray(w).astype(jnp.bfloat16))

  @jax.jit  # one program (op by op, each op compiles)
  def bf16_value_and_grads(xb, wb):
    yb, vjp = jax.vjp(lambda a, b: mx.dot_general(a, b, dims), xb, wb)
    return yb, vjp(yb)

  yb, grads = bf16_value_and_grads(xb, wb)
  assert yb.dtype == jnp.bfloat16
  assert [t.dtype for t in grads] == [jnp.bfloat16, jnp.bfloat16]


def test_stochastic_gradient_needs_a_key_and_uses_it():
  ls, rs, dims = CASES["2d"]
  x, w = device_normal(0, ls), device_normal(1, rs)
  recipe = mx.MXRecipe(stochastic_grad=True)
  with pytest.raises(ValueError, match="needs a `key`"):
    mx.dot_general(x, w, dims, recipe=recipe)

  @jax.jit  # one program for the three keys (op by op, each op compiles)
  def grads(key):
    return jax.grad(lambda a: mx.dot_general(
        a, w, dims, recipe=recipe, key=key).sum() * 0.37)(x)

  a, b = grads(jax.random.key(3)), grads(jax.random.key(4))
  assert not np.array_equal(a, b)
  np.testing.assert_array_equal(a, grads(jax.random.key(3)))


# -- gradients: never silent zeros ---------------------------------------------
