"""``jaxfp8.checkpoint`` saved by two processes restores in one, and back.

Two local processes of two CPU devices each (joined by ``jax.distributed``,
gloo) save a state split by rows over the four devices: float8_e4m3fn,
IEEE float8_e4m3 (stored as codes: TensorStore refuses it), float6 codes,
an MXArray and a typed key. One process of four devices restores it into
the same shardings and saves it again; the two processes restore that
(tests/multiprocess.py). Every leaf comes back bit for bit, in its type.
"""
from __future__ import annotations

import pytest

import multiprocess

pytest.importorskip("orbax.checkpoint")

_CHILD = r"""
import numpy as np
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jax.experimental import multihost_utils
import jaxfp8
from jaxfp8 import mx

rows = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P("data"))
X = (np.arange(8 * 64, dtype=np.float32).reshape(8, 64) - 200) / 7


@jax.jit
def build(x):
  return {"e4m3fn": x.astype(jnp.float8_e4m3fn),
          "e4m3": x.astype(jnp.float8_e4m3),
          "float6": jaxfp8.encode(x, "float6_e2m3fn"),
          "mx": mx.quantize(x, "mxfp8_e4m3"),
          "key": jax.random.key(5)}


def fingerprint(state):
  # Every stored leaf, gathered whole: dtype, shape and bytes.
  leaves = jax.tree_util.tree_leaves(jaxfp8.checkpoint.to_storable(state))
  return [f"{l.dtype}{l.shape}:" + np.asarray(
              multihost_utils.process_allgather(l, tiled=True)
          ).view(np.uint8).tobytes().hex() for l in leaves]


target = build(jax.make_array_from_callback(X.shape, rows, lambda i: X[i]))
result = {"built": fingerprint(target)}
if os.environ.get("JAXFP8_TEST_RESTORE"):
  back = jaxfp8.checkpoint.restore(os.environ["JAXFP8_TEST_RESTORE"], target)
  result["restored"] = fingerprint(back)
  result["types"] = {k: type(v).__name__ for k, v in back.items()}
  result["specs"] = [str(l.sharding.spec) for l in jax.tree_util.tree_leaves(
      jaxfp8.checkpoint.to_storable(back))]
if os.environ.get("JAXFP8_TEST_SAVE"):
  jaxfp8.checkpoint.save(os.environ["JAXFP8_TEST_SAVE"], target)
emit(result)
"""


def test_saved_by_two_processes_restored_by_one_and_back(tmp_path):
  by_two, by_one = str(tmp_path / "by_two"), str(tmp_path / "by_one")
  saved = multiprocess.run(_CHILD, env={"JAXFP8_TEST_SAVE": by_two})
  one = multiprocess.run_one(_CHILD, env={"JAXFP8_TEST_RESTORE": by_two,
                                           "JAXFP8_TEST_SAVE": by_one})
  back = multiprocess.run(_CHILD, env={"JAXFP8_TEST_RESTORE": by_one})
  built = saved[0]["built"]
  assert len(built) == 6 and saved[1]["built"] == built == one["built"]
  assert one["restored"] == built
  assert back[0]["restored"] == back[1]["restored"] == built
  types = {"e4m3fn": "ArrayImpl", "e4m3": "ArrayImpl", "float6": "CodeArray",
           "mx": "MXArray", "key": "PRNGKeyArray"}
  for r in (one, back[0], back[1]):
    assert r["types"] == types, r["types"]
    # restored into the target's shardings: rows split, the key replicated
    assert r["specs"] == ["P('data',)"] * 3 + ["P()"] + ["P('data',)"] * 2
