"""Every recipe across two processes equals one process of the same devices.

Two local processes of two CPU devices each, joined by JAX's runtime
(``jax.distributed``, gloo collectives), run one recipe GEMM's training step
(value and gradients of ``sum(dot_general(x, w) * c)``: the forward,
input-gradient and weight-gradient GEMMs) on a global mesh of four devices,
and one process of four devices runs the same (tests/multiprocess.py):

* ``dp``: ``x`` split by rows, ``w`` replicated;
* ``fsdp``: ``w`` split by rows too, gathered narrow (``rhs_sharding=
  P()``: each process quantizes its rows, codes and scales are gathered);
* ``tp_column`` / ``tp_row``: a 2 x 2 (data, model) mesh, ``w`` split by
  columns (the output by columns) or by rows (the contracting dim: partial
  products summed across processes).

fp8_delayed runs two steps, the second scaled by the amaxes the first
recorded, and its state is compared too. Values are equal bit for bit but
where a sum crosses devices (gloo's all-reduce adds partial products in its
own order): there within float32 rounding of the sum. The one-process run
also runs each recipe with every array whole (``none``): every layout gives
those unsharded numbers, to the same rounding of sums across devices (so a
quantization that read a shard for the whole tensor would fail).

Every recipe runs ``tp_row``, the layout that communicates most (the
contracting dim split: amaxes reduced and partial products summed across
processes); the recipe families (bf16, fp8_current, fp8_delayed,
fp8_blockwise, mxfp8, nvfp4) run all four. The ablations differ from their
family in local arithmetic, not in what crosses processes, and the full
grid compiles 48 steps in each of three processes (about twice the time of
the 30 kept): ``JAXFP8_TEST_ALL_LAYOUTS=1`` runs it. Each step is compiled
once and its collectives' bytes are read from it: under tensor
parallelism no recipe gathers more than bf16.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import multiprocess
from jaxfp8 import recipes

_NAMES = tuple(recipes.RECIPES)
_LAYOUTS = ("dp", "fsdp", "tp_column", "tp_row")
_FAMILIES = ("bf16", "fp8_current", "fp8_delayed", "fp8_blockwise", "mxfp8",
             "nvfp4")
_CASES = [(layout, name) for layout in _LAYOUTS for name in _NAMES
          if layout == "tp_row" or name in _FAMILIES
          or os.environ.get("JAXFP8_TEST_ALL_LAYOUTS") == "1"]

_CHILD = r"""
import numpy as np
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jax.experimental import multihost_utils
from jaxfp8 import recipes
from jaxfp8.tools.collectives import collective_bytes, KINDS

M, K, N = 32, 128, 64
rng = np.random.default_rng(7)
X = rng.standard_normal((M, K)).astype(np.float32)
W = (rng.standard_normal((K, N)) / 11).astype(np.float32)
C = rng.standard_normal((M, N)).astype(np.float32)  # the output's cotangent
devices = np.array(jax.devices())
LAYOUTS = {  # mesh shape and axis names; specs of x, w and the cotangent
    "dp": ((4,), ("data",), P("data"), P(), P("data"), None),
    "fsdp": ((4,), ("data",), P("data"), P("data"), P("data"), P()),
    "tp_column": ((2, 2), ("data", "model"), P("data"), P(None, "model"),
                  P("data", "model"), None),
    "tp_row": ((2, 2), ("data", "model"), P("data", "model"),
               P("model", None), P("data"), None),
}
if PROCESSES == 1:  # the unsharded reference
  LAYOUTS["none"] = ((4,), ("data",), P(), P(), P(), None)
DIMS = (((1,), (0,)), ((), ()))
out = {}
cases = json.loads(os.environ["JAXFP8_TEST_CASES"])
names = sorted({n for _, n in cases})
for layout, (shape, axes, *specs, gathered) in LAYOUTS.items():
  mesh = Mesh(devices.reshape(shape), axes)
  gathered = None if gathered is None else NamedSharding(mesh, gathered)
  x, w, c = (jax.make_array_from_callback(a.shape, NamedSharding(mesh, s),
                                          lambda i, a=a: a[i])
             for a, s in zip((X, W, C), specs))
  for name in names if layout == "none" else [n for l, n in cases
                                              if l == layout]:
    def loss(x, w, state, c, name=name):
      y = recipes.dot_general(x, w, DIMS, recipe=name, key=jax.random.key(3),
                              state=state, rhs_sharding=gathered)
      return jnp.sum(y * c)
    state = recipes.init_state(name, history_length=2)
    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2))).lower(
        x, w, state, c).compile()
    moved = collective_bytes(step)
    out[f"bytes/{layout}/{name}"] = np.asarray([moved[k] for k in KINDS])
    got = [step(x, w, state, c)]
    if state is not None:  # a second step scales by the first's amaxes
      got.append(step(x, w, got[0][1][2], c))
    got = multihost_utils.process_allgather(got, tiled=True)
    for i, leaf in enumerate(jax.tree_util.tree_leaves(got)):
      out[f"{layout}/{name}/{i}"] = np.asarray(leaf)
if jax.process_index() == 0:
  np.savez(os.environ["JAXFP8_TEST_OUT"], **out)
emit({"process": jax.process_index(), "entries": len(out)})
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  d = tmp_path_factory.mktemp("recipes_across_processes")
  cases = json.dumps(_CASES)
  two = multiprocess.run(_CHILD, timeout=420, env={
      "JAXFP8_TEST_OUT": str(d / "two.npz"), "JAXFP8_TEST_CASES": cases})
  one = multiprocess.run_one(_CHILD, timeout=420, env={
      "JAXFP8_TEST_OUT": str(d / "one.npz"), "JAXFP8_TEST_CASES": cases})
  assert [r["process"] for r in two] == [0, 1]
  two, one = np.load(d / "two.npz"), np.load(d / "one.npz")
  assert set(two.files) == {k for k in one.files if "none/" not in k}
  return two, one


@pytest.mark.parametrize("layout,name", _CASES)
def test_two_processes_equal_one(runs, layout, name):
  two, one = runs
  keys = [k for k in one.files if k.startswith(f"{layout}/{name}/")]
  # value, dx, dw (and the delayed state's leaves, over two steps)
  assert len(keys) >= 3, keys
  moved = 0.0
  for k in keys:
    a, b = two[k], one[k]
    assert a.shape == b.shape and a.dtype == b.dtype, k
    if np.array_equal(a, b):
      moved = max(moved, float(np.max(np.abs(b), initial=0.0)))
      continue
    # A cross-device sum: float32 rounding of the sum, no more.
    scale = float(np.max(np.abs(b)))
    np.testing.assert_allclose(a, b, rtol=0, atol=4e-6 * scale, err_msg=k)
    moved = max(moved, scale)
  assert moved > 0, f"{layout}/{name}: every result is zero"


@pytest.mark.parametrize("layout,name", _CASES)
def test_every_layout_gives_the_unsharded_numbers(runs, layout, name):
  _, one = runs
  keys = [k for k in one.files if k.startswith(f"{layout}/{name}/")]
  assert len(keys) >= 3, keys
  for k in keys:
    a, b = one[k], one[k.replace(f"{layout}/", "none/", 1)]
    assert a.shape == b.shape and a.dtype == b.dtype, k
    scale = float(np.max(np.abs(b), initial=0.0))
    # Sums across devices (the partial products of a split contracting
    # dim, the weight gradient of a split batch) in another order.
    np.testing.assert_allclose(a, b, rtol=0, atol=4e-6 * scale, err_msg=k)


@pytest.mark.parametrize("layout,name", [c for c in _CASES
                                         if c[0].startswith("tp_")])
def test_tensor_parallel_steps_gather_nothing_more_than_bf16(
    runs, layout, name):
  # The compiled step of either process (the programs are the same), by
  # kind: all-gather, all-reduce, reduce-scatter, all-to-all, permute.
  two, one = runs
  moved, bf16 = two[f"bytes/{layout}/{name}"], two[f"bytes/{layout}/bf16"]
  np.testing.assert_array_equal(moved, one[f"bytes/{layout}/{name}"])
  assert moved[0] <= bf16[0], (layout, name, moved, bf16)
