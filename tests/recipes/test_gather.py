"""Narrow gathers (``dot_general(..., rhs_sharding=...)``): same numbers,
codes and scales on the wire.

In this process (one device): the gathered quantization decodes to the
values the GEMM's own quantizer gives, bit for bit, for every weight
quantizer kind and layout; a training step with the option equals the step
without it (to the order of float32 sums); bad options fail clearly. In a 4-device subprocess: the
compiled FSDP step of each recipe family gathers within its target of the
float32 step's bytes, in 1- or 2-byte words, and its numbers equal those of
the same step with the weight unsharded (to the order of cross-device
sums).
"""
from __future__ import annotations

import flax.linen as nn
from flax import nnx
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # pylint: disable=g-multiple-import
import numpy as np
import pytest

import multiprocess
from jaxfp8 import recipes
from jaxfp8._src.recipes import gather
from jaxfp8._src.recipes import operand
from jaxfp8._src.recipes.spec import Quantizer

_MESH = Mesh(np.array(jax.devices()[:1]), ("data",))
_WHOLE = NamedSharding(_MESH, P())
_DIMS = (((1,), (0,)), ((), ()))


@pytest.mark.parametrize("spec,ndim,batch,contract,want", [
    (P("data", None), 2, (), (0,), P(None, "data")),
    (P(None, "model"), 2, (), (0,), P("model", None)),
    (P("data"), 2, (), (1,), P("data", None)),
    (P(), 3, (), (0,), P(None, None)),
    (P("data", None, None), 3, (), (0,), P(None, "data")),
    (P(None, "model"), 3, (), (0,), P("model", None)),
    (P(None, None, "model"), 3, (), (0,), None),  # not the group's first
    (P("b", "data"), 3, (0,), (1,), P("b", None, "data")),
])
def test_view_spec_carries_the_sharding_into_the_gemm_view(
    spec, ndim, batch, contract, want):
  assert gather.view_spec(spec, ndim, batch, contract) == want


def _weight(shape, seed=0):
  """Normal values over many binades, a zero tile and a huge element."""
  rng = np.random.default_rng(seed)
  w = rng.standard_normal(shape) * np.exp2(rng.integers(-20, 20, shape))
  w = w.reshape(-1, shape[-1])
  w[:16, :16] = 0.0
  w[-1, -1] = 3e38
  return jnp.asarray(w.reshape(shape), jnp.float32)


def _quantizers():
  """Every non-random weight quantizer of a block kind in the registry, and
  the 1x128 / 1x16 blocks of the activations'."""
  seen = {}
  for name in recipes.RECIPES:
    r = recipes.get_recipe(name)
    for g in ("fwd", "dgrad", "wgrad"):
      for q in getattr(r, g):
        if (gather.narrow(q) and q.kind in ("block", "mx", "nvfp4")
            and q not in seen):
          seen[q] = f"{name}.{g}.{q.kind}.{q.format}.{q.block}"
  return list(seen.items())


@pytest.mark.parametrize("q", [q for q, _ in _quantizers()],
                         ids=[i for _, i in _quantizers()])
@pytest.mark.parametrize("shape,batch,contract", [
    ((256, 128), (), (0,)),      # a Dense kernel: contracted on its rows
    ((128, 256), (), (1,)),      # contracted on its last dim
    ((64, 4, 32), (), (0,)),     # DenseGeneral: free dims merged
    ((2, 128, 32), (0,), (1,)),  # a batched weight
])
def test_gathered_codes_decode_to_the_gemm_quantization(q: Quantizer, shape,
                                                       batch, contract):
  w = _weight(shape)

  @jax.jit
  def both(w):
    kept = gather.Gathered.of(w, q, batch, contract, _WHOLE)
    want = operand.unview_operand(
        operand.quantize_view(operand.view(w, batch, contract), q), shape,
        batch, contract)
    return kept.values(), want

  got, want = both(w)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  assert np.isfinite(np.asarray(want)).any()


_STEP_RECIPES = ("bf16", "fp8_current", "fp8_delayed", "fp8_blockwise",
                 "mxfp8", "mxfp4", "mxfp8_e5m2_grad", "nvfp4",
                 "nvfp4_1d_weights")


@pytest.mark.parametrize("name", _STEP_RECIPES)
def test_training_step_with_rhs_sharding_equals_the_step_without(name):
  # One device: the constraint moves nothing, so every number must match,
  # through every path of the core (codes kept for dgrad, the other
  # orientation gathered again, delayed state).
  recipe = recipes.get_recipe(name)
  rng = np.random.default_rng(3)
  x = jnp.asarray(rng.standard_normal((32, 128)), jnp.float32)
  w = jnp.asarray(rng.standard_normal((128, 64)) / 11, jnp.float32)
  c = jnp.asarray(rng.standard_normal((32, 64)), jnp.float32)
  state = recipes.init_state(recipe, history_length=2)
  key = jax.random.key(5) if recipe.needs_key else None

  def step(rhs_sharding):
    def loss(x, w, state):
      y = recipes.dot_general(x, w, _DIMS, recipe=recipe, key=key,
                              state=state, rhs_sharding=rhs_sharding)
      return jnp.sum(y * c), y
    (value, y), grads = jax.value_and_grad(loss, argnums=(0, 1, 2),
                                           has_aux=True)(x, w, state)
    return value, (y, grads)

  (v_got, got), (v_want, want) = jax.jit(
      lambda: (step(_WHOLE), step(None)))()
  # The same quantized operands (the test above) in the same GEMMs: equal
  # but for the order of float32 sums, which XLA may emit differently for a
  # dot whose operand comes through the gather's barrier (seen on CPU under
  # the suite's XLA flags: 1-2 ulps of the largest element; a wrong
  # orientation or quantization differs by the quantization step).
  for a, b in zip(jax.tree_util.tree_leaves(got),
                  jax.tree_util.tree_leaves(want)):
    a, b = np.asarray(a), np.asarray(b)
    scale = float(np.max(np.abs(b), initial=0.0))
    np.testing.assert_allclose(a, b, rtol=0, atol=2e-6 * scale)
  np.testing.assert_allclose(float(v_got), float(v_want), rtol=1e-6)


@pytest.mark.parametrize("name", ["fp8_current", "nvfp4"])
def test_rhs_sharding_under_scan_and_vmap_over_layers(name):
  # Stacked layers, as scanned models keep them: the constraint applies to
  # each layer's weight inside the loop body, and under vmap.
  rng = np.random.default_rng(4)
  ws = jnp.asarray(rng.standard_normal((3, 64, 64)) / 8, jnp.float32)
  x = jnp.asarray(rng.standard_normal((32, 64)), jnp.float32)
  key = jax.random.key(2)

  def loss(ws, rhs_sharding):
    def body(h, w):
      return jax.nn.gelu(recipes.dot_general(
          h, w, _DIMS, recipe=name, key=key, rhs_sharding=rhs_sharding)), None
    return jnp.sum(jax.lax.scan(body, x, ws)[0] ** 2)

  grads = jax.jit(lambda ws: [jax.grad(loss)(ws, s) for s in (_WHOLE, None)])
  got, want = grads(ws)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0,
                             atol=2e-6 * float(jnp.max(jnp.abs(want))))
  per_layer = jax.jit(jax.vmap(lambda w: recipes.dot_general(
      x, w, _DIMS, recipe=name, key=key, rhs_sharding=_WHOLE)))(ws)
  assert per_layer.shape == (3, 32, 64)
  one = jax.jit(lambda w: recipes.dot_general(x, w, _DIMS, recipe=name,
                                              key=key))(ws[1])
  # A batched dot against a plain one: float32 sums in another order.
  np.testing.assert_allclose(np.asarray(per_layer[1]), np.asarray(one),
                             rtol=0, atol=2e-6 * float(jnp.max(jnp.abs(one))))


def test_rhs_sharding_as_a_spec_resolves_by_the_mesh_in_context():
  x, w = jnp.ones((4, 64)), jnp.full((64, 8), 0.5)
  with jax.set_mesh(_MESH):
    y = jax.jit(lambda x, w: recipes.dot_general(
        x, w, _DIMS, recipe="fp8_blockwise", rhs_sharding=P()))(x, w)
  np.testing.assert_array_equal(np.asarray(y), np.full((4, 8), 32.0))


@pytest.mark.parametrize("value,error,match", [
    ("P()", TypeError, "must be None, a jax.sharding.NamedSharding or a "
     "PartitionSpec, got str"),
    (_MESH, TypeError, "got Mesh"),
    (P(None, None, "data"), ValueError, "has 3 entries for an rhs with 2 "
     "dims"),
])
def test_bad_rhs_sharding_is_refused(value, error, match):
  with pytest.raises(error, match=f"`rhs_sharding` argument to "
                     f"`dot_general`.*{match}"):
    recipes.dot_general(jnp.ones((4, 64)), jnp.ones((64, 8)), _DIMS,
                        rhs_sharding=value)


def test_faces_pass_rhs_sharding_and_refuse_a_bad_one():
  layer = nnx.Linear(64, 8, rngs=nnx.Rngs(0))
  recipes.nnx_recipe(layer, "fp8_current", rhs_sharding=_WHOLE)
  assert layer.dot_general.rhs_sharding is _WHOLE
  x = jnp.ones((4, 64))
  want = recipes.dot_general(x, layer.kernel[...], _DIMS)
  np.testing.assert_array_equal(np.asarray(layer(x) - layer.bias[...]),
                                np.asarray(want))
  with pytest.raises(TypeError, match="`rhs_sharding` argument to "
                     "`nnx_recipe`"):
    recipes.nnx_recipe(nnx.Linear(4, 4, rngs=nnx.Rngs(0)),
                       rhs_sharding="whole")
  model = nn.Dense(8)
  with recipes.linen_recipe("fp8_current", rhs_sharding=_WHOLE):
    variables = model.init(jax.random.key(0), x)
    y = model.apply(variables, x)
  kernel = variables["params"]["kernel"]
  np.testing.assert_array_equal(
      np.asarray(y), np.asarray(recipes.dot_general(x, kernel, _DIMS)))
  with pytest.raises(TypeError, match="`rhs_sharding` argument to "
                     "`linen_recipe`"):
    with recipes.linen_recipe("fp8_current", rhs_sharding=3):
      pass
  with pytest.raises(TypeError, match="`rhs_sharding` argument to "
                     "`RecipeDotGeneral`"):
    recipes.RecipeDotGeneral(rhs_sharding="whole")


_FSDP_CHILD = r"""
import numpy as np
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jaxfp8 import recipes
from jaxfp8.tools.collectives import collective_bytes

B, K, N = 512, 256, 256  # 128 rows of the batch per device: whole blocks
rng = np.random.default_rng(11)
X = rng.standard_normal((B, K)).astype(np.float32)
W = (rng.standard_normal((K, N)) / 16).astype(np.float32)
C = rng.standard_normal((B, N)).astype(np.float32)
DIMS = (((1,), (0,)), ((), ()))
out, refs = {}, {}
for layout, shape, axes, w_spec, gathered in (
    ("fsdp", (4,), ("data",), P("data"), P()),
    ("fsdp_tp", (2, 2), ("data", "model"), P("data", "model"),
     P(None, "model"))):
  mesh = Mesh(np.array(jax.devices()).reshape(shape), axes)
  put = lambda a, s: jax.device_put(a, NamedSharding(mesh, s))
  x, c = put(X, P("data")), put(C, P("data"))
  sharded, whole = put(W, w_spec), put(W, P())
  for name in ["float32", "bf16", "fp8_current", "fp8_delayed",
               "fp8_blockwise", "mxfp8", "nvfp4"]:
    recipe = None if name == "float32" else recipes.get_recipe(name)
    state = recipes.init_state(recipe, history_length=2) if recipe else None
    def loss(x, w, state, c):
      if recipe is None:
        y = jnp.dot(x, w, precision="highest")
      else:
        y = recipes.dot_general(x, w, DIMS, recipe=recipe, state=state,
                                key=jax.random.key(3),
                                rhs_sharding=NamedSharding(mesh, gathered))
      return jnp.sum(y * c)
    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
    compiled = step.lower(x, sharded, state, c).compile()
    text = compiled.as_text()
    gathers = sorted({line.split("=")[1].split("[")[0].strip()
                      for line in text.splitlines()
                      if " all-gather(" in line or " all-gather-start(" in line})
    got = jax.tree_util.tree_leaves(compiled(x, sharded, state, c))
    if name not in refs:  # the weight unsharded: nothing gathered
      refs[name] = [np.asarray(a) for a in jax.tree_util.tree_leaves(
          step(x, whole, state, c))]
    diff = max(float(np.max(np.abs(np.asarray(a) - b)) / max(
        float(np.max(np.abs(b))), 1e-30)) for a, b in zip(got, refs[name]))
    out[f"{layout}/{name}"] = {"gather": collective_bytes(compiled)[
        "all-gather"], "types": gathers, "diff": diff}
emit(out)
"""


@pytest.fixture(scope="module")
def fsdp():
  return multiprocess.run_one(_FSDP_CHILD, devices=4, timeout=420)


_TARGETS = {"bf16": 0.52, "fp8_current": 0.27, "fp8_delayed": 0.27,
            "fp8_blockwise": 0.27, "mxfp8": 0.53, "nvfp4": 0.16}


@pytest.mark.parametrize("layout", ["fsdp", "fsdp_tp"])
@pytest.mark.parametrize("name", list(_TARGETS))
def test_fsdp_step_gathers_codes_within_its_target(fsdp, layout, name):
  got, base = fsdp[f"{layout}/{name}"], fsdp[f"{layout}/float32"]
  assert base["gather"] > 0 and "f32" in base["types"], base
  ratio = got["gather"] / base["gather"]
  assert 0 < ratio <= _TARGETS[name], (ratio, got)
  # Codes travel as their bits: no fp8 widened to f16, no float32 weight.
  assert set(got["types"]) <= {"u8", "u16", "f32"}, got
  # Its numbers: those of the weight unsharded, to the order of the sums
  # that cross devices (the dw of a batch split over them).
  assert got["diff"] <= 1e-5, got
