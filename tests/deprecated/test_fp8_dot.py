"""The fp8 dot_general: forward, custom backward, delayed state, Flax and optax."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np
import optax
import pytest

import jaxfp8
from jaxfp8 import policy as P

# These tests exercise the deprecated names themselves.
pytestmark = pytest.mark.filterwarnings(
    "ignore:jaxfp8.policy.* is deprecated:DeprecationWarning")

# (lhs shape, rhs shape, dimension numbers)
DIMS = [
    ((6, 5), (5, 3), (((1,), (0,)), ((), ()))),  # x @ w
    ((4, 6, 5), (5, 3), (((2,), (0,)), ((), ()))),  # Dense on a sequence
    ((3, 5), (4, 5), (((1,), (1,)), ((), ()))),  # x @ w.T
    ((2, 4, 5), (2, 3, 5), (((2,), (2,)), ((0,), (0,)))),  # batched
    ((5, 2, 4, 3), (3, 7, 4, 2), (((2, 3), (2, 0)), ((1,), (3,)))),  # mixed
]
DIM_IDS = ["matmul", "sequence", "transposed", "batched", "mixed"]
# (lhs, rhs, grad) formats: fp8 defaults and others a user may pick.
FORMATS = [("e4m3", "e4m3", "e5m2"), ("e5m2", "e4m3", "e5m2"),
           ("e3m4", "e4m3fnuz", "e5m2fnuz"), ("e2m1", "e2m3", "e3m2")]
FMT_IDS = ["-".join(f) for f in FORMATS]


def _normal(rng, shape):
  return jax.device_put(rng.standard_normal(shape).astype(np.float32))


def _operands(lhs_shape, rhs_shape, seed=0):
  # Drawn in NumPy: where the normals come from does not matter here, and
  # jax.random compiles its samplers once per shape. The generator is handed
  # on for the test's further draws.
  rng = np.random.default_rng(seed)
  return _normal(rng, lhs_shape), _normal(rng, rhs_shape), rng


def _dq(x, scaling):
  q, scale = scaling.quantize(x)
  return jaxfp8.decode(q) * scale


def _scalings(fmts):
  return dict(lhs_scaling=P.CurrentScaling(fmts[0]),
              rhs_scaling=P.CurrentScaling(fmts[1]),
              grad_scaling=P.CurrentScaling(fmts[2]))


# Every layout with the default formats, every format choice on one layout.
CASES = ([(d, FORMATS[0]) for d in DIMS]
         + [(DIMS[-1], f) for f in FORMATS[1:]])
CASE_IDS = DIM_IDS + [f"mixed-{i}" for i in FMT_IDS[1:]]


@pytest.mark.parametrize("shapes,fmts", CASES, ids=CASE_IDS)
def test_forward_and_backward_match_quantized_reference(shapes, fmts):
  lhs_shape, rhs_shape, dims = shapes
  x, w, k = _operands(lhs_shape, rhs_shape)
  kw = _scalings(fmts)
  exact = lambda a, b: lax.dot_general(a, b, dims,
                                       precision=lax.Precision.HIGHEST)

  @jax.jit
  def both(x, w, g):
    y, vjp = jax.vjp(lambda a, b: P.fp8_dot_general(a, b, dims, **kw), x, w)
    # reference: dequantized operands, exact float32 dot; backward: the
    # quantized cotangent against the quantized operands
    xq, wq = _dq(x, kw["lhs_scaling"]), _dq(w, kw["rhs_scaling"])
    ref, ref_vjp = jax.vjp(exact, xq, wq)
    return (y, *vjp(g)), (ref, *ref_vjp(_dq(g, kw["grad_scaling"])))

  g = _normal(k, jax.eval_shape(exact, x, w).shape)
  ours, ref = both(x, w, g)
  for a, b in zip(ours, ref):
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shapes", DIMS[1:4:2] + DIMS[-1:],
                         ids=DIM_IDS[1:4:2] + DIM_IDS[-1:])
def test_gradients_match_float32_finite_differences(shapes):
  lhs_shape, rhs_shape, dims = shapes
  x, w, k = _operands(lhs_shape, rhs_shape, seed=1)
  t = _normal(k, jax.eval_shape(
      lambda: lax.dot_general(x, w, dims)).shape)

  def loss(dot, x, w):
    return jnp.sum(jnp.tanh(dot(x, w, dims)) * t)

  fp8_loss = lambda x, w: loss(P.fp8_dot_general, x, w)
  f32_loss = jax.jit(lambda x, w: loss(
      lambda a, b, d: lax.dot_general(a, b, d,
                                      precision=lax.Precision.HIGHEST), x, w))
  gx, gw = jax.jit(jax.grad(fp8_loss, argnums=(0, 1)))(x, w)
  # The directional arithmetic in NumPy (float64): eager jnp ops would
  # compile once per shape.
  x, w, gx, gw = (np.asarray(a, np.float64) for a in (x, w, gx, gw))
  eps = 1e-2
  for i in range(4):
    rng = np.random.default_rng(10 + i)
    vx = rng.standard_normal(lhs_shape).astype(np.float32)
    vw = rng.standard_normal(rhs_shape).astype(np.float32)
    # the perturbed points rounded to float32, the precision f32_loss sees
    fd = (float(f32_loss((x + eps * vx).astype(np.float32),
                         (w + eps * vw).astype(np.float32)))
          - float(f32_loss((x - eps * vx).astype(np.float32),
                           (w - eps * vw).astype(np.float32)))) / (2 * eps)
    analytic = np.sum(gx * vx) + np.sum(gw * vw)
    # e4m3 operands (3 mantissa bits) and e5m2 gradients (2 bits): a few %
    scale = np.sqrt(np.sum(gx**2) * np.sum(vx**2)
                    + np.sum(gw**2) * np.sum(vw**2))
    assert abs(analytic - fd) <= 0.08 * scale, (i, analytic, fd)


def test_dtypes_and_preferred_element_type():
  x, w, _ = _operands((4, 8), (8, 3))
  dims = (((1,), (0,)), ((), ()))
  # bfloat16 operands rounded in NumPy: an eager astype compiles per shape
  xb, wb = (jax.device_put(np.asarray(a).astype(jnp.bfloat16)) for a in (x, w))

  # One program for the three results (op by op, each op compiles).
  @jax.jit
  def results(xb, wb):
    y = P.fp8_dot_general(xb, wb, dims)
    y32 = P.fp8_dot_general(xb, wb, dims, preferred_element_type=jnp.float32)
    dx, dw = jax.grad(lambda a, b: P.fp8_dot_general(a, b, dims).astype(
        jnp.float32).sum(), argnums=(0, 1))(xb, wb)
    return y, y32, dx, dw

  y, y32, dx, dw = results(xb, wb)
  assert y.dtype == jnp.bfloat16
  assert y32.dtype == jnp.float32
  assert dx.dtype == jnp.bfloat16 and dw.dtype == jnp.bfloat16
  with pytest.raises(TypeError, match="lhs.*floating"):
    P.fp8_dot_general(jax.device_put(np.ones((2, 2), np.int32)),
                      jax.device_put(np.asarray(w)[:2]), dims)
  with pytest.raises(TypeError, match="grad_scaling"):
    P.fp8_dot_general(x, w, dims, grad_scaling=3)
  with pytest.raises(TypeError, match="narrow format"):
    P.fp8_dot_general(x, w, dims, lhs_scaling="bf16")


def test_never_nan_with_huge_inputs():
  # products that float32 can hold, of operands whose scales multiply to Inf
  x = jnp.array([[3e38, -1e30], [1.0, 2.0]])
  w = jnp.array([[1e-30, 0.0], [5.0, 3e-38]])
  dims = (((1,), (0,)), ((), ()))

  # The value and both gradients in one program (op by op, each op compiles).
  @jax.jit
  def value_and_grads(a, b, g):
    y, vjp = jax.vjp(lambda a, b: P.fp8_dot_general(a, b, dims), a, b)
    return y, vjp(g)

  y, grads = value_and_grads(x, w, jax.device_put(np.ones((2, 2), np.float32)))
  assert y.shape == (2, 2) and y.dtype == jnp.float32
  assert np.isfinite(np.asarray(y)).all()
  for d in grads:
    assert not np.isnan(np.asarray(d)).any()


def test_delayed_scaling_state_is_updated_by_gradient_under_jit():
  x, w, k = _operands((8, 16), (16, 4))
  dims = (((1,), (0,)), ((), ()))
  states = tuple(P.DelayedScaling.create(f, history_length=4)
                 for f in ("e4m3", "e4m3", "e5m2"))
  t = _normal(k, (8, 4))

  @jax.jit
  def step(w, states):
    def loss(w, states):
      y = P.fp8_dot_general(x, w, dims, lhs_scaling=states[0],
                            rhs_scaling=states[1], grad_scaling=states[2])
      return jnp.sum((y - t) ** 2)
    return jax.grad(loss, argnums=(0, 1))(w, states)

  gw, new = step(w, states)
  y = jax.jit(lambda x, w, states: P.fp8_dot_general(
      x, w, dims, lhs_scaling=states[0], rhs_scaling=states[1]))(x, w, states)
  # max |.| in NumPy; the output gradient of the squared error is 2 (y - t)
  xn, wn, yn, tn = (np.asarray(a) for a in (x, w, y, t))
  amaxes = [float(np.max(np.abs(a))) for a in (xn, wn, 2 * (yn - tn))]
  for s, a, fmt_max in zip(new, amaxes, (448.0, 448.0, 57344.0)):
    assert isinstance(s, P.DelayedScaling)
    np.testing.assert_allclose(s.amax_history, [a, 0, 0, 0], rtol=1e-5)
    assert float(s.scale) == pytest.approx(a / fmt_max, rel=1e-5)
  gw = np.asarray(gw)
  assert np.isfinite(gw).all() and np.abs(gw).sum() > 0
  # second step: histories shift; the forward now uses the new scales
  _, newer = step(w, new)
  np.testing.assert_allclose(newer[0].amax_history[:2], [amaxes[0]] * 2)


def _regression_data():
  k1, k2, k3 = jax.random.split(jax.random.key(3), 3)
  x = jax.random.normal(k1, (64, 8))
  t = x @ jax.random.normal(k2, (8, 4)) + 0.1
  return x, t, k3


def test_linen_dense_with_train_state():
  nn = pytest.importorskip("flax.linen")
  from flax.training import train_state  # pylint: disable=g-import-not-at-top
  x, t, k = _regression_data()
  model = nn.Dense(4, dot_general_cls=P.Fp8DotGeneral)
  # Jitted: init and the loss op by op would compile each op.
  variables = jax.jit(model.init)(k, x)
  state_vars = variables[P.OVERWRITE_WITH_GRADIENT]["Fp8DotGeneral_0"]
  assert set(state_vars) == {f"{r}_{n}" for r in ("input", "kernel",
                                                  "output_grad")
                             for n in ("amax_history", "scale")}
  ts = train_state.TrainState.create(apply_fn=model.apply, params=variables,
                                     tx=optax.adam(3e-2))
  loss = jax.jit(lambda p: jnp.mean((ts.apply_fn(p, x) - t) ** 2))

  @jax.jit
  def step(ts):
    return ts.apply_gradients(grads=jax.grad(
        lambda p: jnp.mean((ts.apply_fn(p, x) - t) ** 2))(ts.params))

  first = float(loss(ts.params))
  for _ in range(60):
    ts = step(ts)
  owg = ts.params[P.OVERWRITE_WITH_GRADIENT]["Fp8DotGeneral_0"]
  assert float(owg["input_amax_history"][0]) == pytest.approx(
      float(P.amax(x)), rel=1e-6)
  assert float(owg["output_grad_amax_history"][15]) > 0  # history full
  assert float(loss(ts.params)) < 0.1 * first


def test_linen_dense_current_scaling_function_injection():
  nn = pytest.importorskip("flax.linen")
  x, t, k = _regression_data()
  model = nn.Dense(4, dot_general=P.fp8_dot_general)
  params = jax.jit(model.init)(k, x)  # op by op, each op would compile
  assert set(params) == {"params"}
  ref = nn.Dense(4).apply(params, x)
  y = jax.jit(model.apply)(params, x)
  assert float(jnp.abs(y - ref).max()) < 0.1 * float(jnp.abs(ref).max())
  current = nn.Dense(4, dot_general_cls=lambda: P.Fp8DotGeneral(
      scaling="current", fwd_format="e5m2", bwd_format="e5m2"))
  assert set(jax.jit(current.init)(k, x)) == {"params"}
  with pytest.raises(ValueError, match="scaling"):
    nn.Dense(4, dot_general_cls=lambda: P.Fp8DotGeneral(
        scaling="later")).init(k, x)


def test_nnx_linear_delayed_scaling_with_optimizer():
  nnx = pytest.importorskip("flax.nnx")
  x, t, _ = _regression_data()
  model = nnx.Linear(8, 4, dot_general=P.NnxFp8DotGeneral(history_length=4),
                     rngs=nnx.Rngs(0))
  opt = nnx.Optimizer(model, optax.adam(3e-2), wrt=nnx.Param)
  loss = lambda m: jnp.mean((m(x) - t) ** 2)
  jit_loss = nnx.jit(loss)  # op by op, each op would compile

  @nnx.jit
  def step(model, opt):
    grads = nnx.grad(loss, argnums=nnx.DiffState(
        0, (nnx.Param, P.Fp8State)))(model)
    opt.update(model, P.nnx_apply_fp8_state(model, grads))

  first = float(jit_loss(model))
  for _ in range(60):
    step(model, opt)
  dg = model.dot_general
  np.testing.assert_allclose(dg.input_amax_history[...],
                             [float(P.amax(x))] * 4, rtol=1e-6)
  assert float(dg.kernel_scale[...]) == pytest.approx(
      float(P.amax(model.kernel[...])) / 448, rel=0.2)
  assert float(jit_loss(model)) < 0.1 * first
  current = nnx.Linear(8, 4, dot_general=P.NnxFp8DotGeneral(
      scaling="current"), rngs=nnx.Rngs(0))
  assert nnx.jit(lambda m: m(x))(current).shape == (64, 4)


def test_narrow_output_saturates_and_mixed_inputs_promote():
  dims = (((1,), (0,)), ((), ()))
  # Operands made in NumPy, results read in NumPy: jnp.full/ones and
  # indexing a jax.Array are eager ops, each compiled.
  ones = lambda dtype: jax.device_put(np.ones((4, 1), dtype))
  a = jax.device_put(np.full((1, 4), 20.0, jnp.float8_e4m3fn))
  b = jax.device_put(np.full((4, 1), 20.0, jnp.float8_e4m3fn))

  # Every result from one program (op by op, each op compiles).
  @jax.jit
  def results(a, b, f32, bf16, e5m2):
    out = P.fp8_dot_general(a, b, dims)
    promoted = [P.fp8_dot_general(a, o, dims) for o in (f32, bf16, e5m2)]
    g = jax.grad(lambda x: P.fp8_dot_general(x, b, dims).astype(
        jnp.float32).sum() * 100.0)(a)
    return out, promoted, g

  out, (f32, bf16, mixed), g = results(
      a, b, ones(np.float32), ones(jnp.bfloat16), ones(jnp.float8_e5m2))
  # 1600 > 448: saturates, not NaN
  assert out.dtype == jnp.float8_e4m3fn
  assert float(np.asarray(out)[0, 0]) == 448.0
  # A narrow operand counts as float32 in promotion; so do two formats.
  assert f32.dtype == jnp.float32
  assert bf16.dtype == jnp.float32
  assert mixed.dtype == jnp.float32 and float(np.asarray(mixed)[0, 0]) == 80.0
  # Gradients into narrow operands saturate too.
  assert g.dtype == jnp.float8_e4m3fn and not np.isnan(
      np.asarray(g).astype(np.float32)).any()
  with pytest.raises(ValueError, match="`lhs_scaling`.*signed"):
    P.fp8_dot_general(jax.device_put(np.ones((1, 2), np.float32)),
                      jax.device_put(np.ones((2, 1), np.float32)), dims,
                      lhs_scaling="e8m0")


def test_codearray_operands_are_decoded():
  dims = (((1,), (0,)), ((), ()))
  ca = jaxfp8.cast(jnp.array([[1.0, 2.0], [0.5, -1.0]]), "e2m3")
  exact = P.CurrentScaling("e4m3", power_of_two=True)
  eye = jax.device_put(np.eye(2, dtype=np.float32))
  # Jitted (op by op, each op would compile); ca is the CodeArray itself.
  out = jax.jit(lambda eye: P.fp8_dot_general(ca, eye, dims, lhs_scaling=exact,
                                              rhs_scaling=exact))(eye)
  np.testing.assert_array_equal(np.asarray(out), [[1.0, 2.0], [0.5, -1.0]])


def test_module_arguments_are_named():
  from flax import nnx  # pylint: disable=g-import-not-at-top
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  x = jnp.ones((2, 4))
  with pytest.raises(TypeError, match="pass an instance"):
    nnx.Linear(4, 3, dot_general=P.NnxFp8DotGeneral, rngs=nnx.Rngs(0))(x)
  with pytest.raises(TypeError, match="`fwd_format` argument to "
                     "`NnxFp8DotGeneral`"):
    P.NnxFp8DotGeneral(fwd_format="float32")
  with pytest.raises(ValueError, match="`bwd_format`.*signed"):
    P.NnxFp8DotGeneral(bwd_format="e8m0")
  dense = nn.Dense(3, dot_general_cls=lambda: P.Fp8DotGeneral(
      fwd_format="float32"))
  with pytest.raises(TypeError, match="`fwd_format` argument to "
                     "`Fp8DotGeneral`"):
    dense.init(jax.random.key(0), x)
