"""The deprecated MX ``dot_general`` (``jaxfp8.mx.dot_general``).

Each GEMM of ``mx.dot_general`` (forward, input gradient, weight gradient) is
checked against the float64 product of its own operands, quantized by
``mx.quantize`` along that GEMM's contracting dims, for 2-D, batched and
Einsum-style dimension numbers.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dot_reference import subscripts
from jaxfp8 import mx
from mx_testing import device_normal
from mx_testing import qdq64
from mx_testing import rel

# These tests exercise the deprecated name itself.
pytestmark = pytest.mark.filterwarnings(
    "ignore:jaxfp8.mx.* is deprecated:DeprecationWarning")

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
  fwd = np.einsum(f"{sl},{sr}->{so}", qdq64(x, lc, fmt), qdq64(w, rc, fmt))
  dgrad = np.einsum(f"{so},{sr}->{sl}", qdq64(g, g_rf, fmt),
                    qdq64(w, rf, fmt))
  wgrad = np.einsum(f"{sl},{so}->{sr}", qdq64(x, lf, fmt),
                    qdq64(g, g_lf, fmt))
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
  np.testing.assert_allclose(
      dx, qdq64(g, [1], "mxfp8_e4m3") @ qdq64(w, [1], "mxfp8_e4m3").T,
      rtol=1e-5, atol=1e-5)
  # bf16 operands give bf16 results and gradients
  xb = jax.device_put(np.asarray(x).astype(jnp.bfloat16))
  wb = jax.device_put(np.asarray(w).astype(jnp.bfloat16))
  yb, vjp = jax.vjp(lambda a, b: mx.dot_general(a, b, dims), xb, wb)
  assert yb.dtype == jnp.bfloat16
  assert [t.dtype for t in vjp(yb)] == [jnp.bfloat16, jnp.bfloat16]


def test_stochastic_gradient_needs_a_key_and_uses_it():
  ls, rs, dims = CASES["2d"]
  x, w = device_normal(0, ls), device_normal(1, rs)
  recipe = mx.MXRecipe(stochastic_grad=True)
  with pytest.raises(ValueError, match="needs a `key`"):
    mx.dot_general(x, w, dims, recipe=recipe)

  def grads(key):
    return jax.grad(lambda a: mx.dot_general(
        a, w, dims, recipe=recipe, key=key).sum() * 0.37)(x)

  a, b = grads(jax.random.key(3)), grads(jax.random.key(4))
  assert not np.array_equal(a, b)
  np.testing.assert_array_equal(a, grads(jax.random.key(3)))


# -- gradients: never silent zeros ---------------------------------------------
