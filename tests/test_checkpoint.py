"""Checkpoints round-trip every narrow-format state bit for bit.

orbax (``jaxfp8.checkpoint.save``/``restore``) and ``flax.serialization``
(msgpack), for: native arrays of every narrow format (IEEE float8_e4m3,
which TensorStore refuses, and float8_e3m4 included), CodeArray (float6),
MXArray (every MX format, nvfp4 with its tensor scale), delayed-scaling
state, the state of ``with_stochastic_rounding`` (a typed PRNG key inside),
a whole train state, and arrays sharded over 4 simulated devices. Restoring
into a target of another format or shape is a ValueError naming the leaf.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from flax import serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxfp8
import jaxfp8.checkpoint

NATIVE = [f.name for f in jaxfp8.formats.all_formats(narrow=True) if f.native]
FLOAT6 = [f.name for f in jaxfp8.formats.all_formats(narrow=True)
          if not f.native]
MX = list(jaxfp8.mx.MX_FORMATS)
KEY = jax.random.key(0)
X = jax.random.normal(KEY, (4, 64)) * 3


def bits(tree):
  """Every leaf as raw bytes (NaN-safe bitwise comparison)."""
  out = []
  for leaf in jax.tree_util.tree_leaves(tree):
    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
      leaf = jax.random.key_data(leaf)
    out.append((leaf.dtype.name, leaf.shape,
                np.asarray(leaf).tobytes()))
  return out


def native(fmt):
  if fmt == "float8_e8m0fnu":
    return jaxfp8.cast(jnp.abs(X) + 1e-3, fmt)
  return jaxfp8.cast(X, fmt)


def state_of_everything():
  params = {f: native(f) for f in NATIVE}
  params.update({f: jaxfp8.encode(X, f) for f in FLOAT6})
  params.update({m: jaxfp8.mx.quantize(X, m) for m in MX})
  scaling = jaxfp8.policy.DelayedScaling.create("e4m3", history_length=4)
  scaling = scaling.update(jnp.float32(3.5))
  tx = jaxfp8.policy.with_stochastic_rounding(optax.adam(1e-2),
                                              key=jax.random.key(1))
  fp8 = {"w": jaxfp8.cast(X, "e4m3")}
  opt_state = tx.init(fp8)
  updates, opt_state = tx.update({"w": jnp.ones_like(X)}, opt_state, fp8)
  return {"params": params, "scaling": scaling, "opt_state": opt_state,
          "step": jnp.int32(3)}


@pytest.fixture(scope="module")
def state():
  return state_of_everything()


def test_orbax_round_trip_is_exact(state, tmp_path):
  jaxfp8.checkpoint.save(tmp_path / "ck", state)
  back = jaxfp8.checkpoint.restore(tmp_path / "ck", state)
  assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(
      state)
  assert bits(back) == bits(state)
  assert back["params"]["float6_e2m3fn"].format.name == "float6_e2m3fn"


def test_orbax_restores_into_an_abstract_target(state, tmp_path):
  jaxfp8.checkpoint.save(tmp_path / "ck", state)
  abstract = jax.tree_util.tree_map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding),
      state)
  back = jaxfp8.checkpoint.restore(tmp_path / "ck", abstract)
  assert bits(back) == bits(state)


@pytest.mark.parametrize("swap", [
    ("float8_e4m3fn", lambda: jaxfp8.cast(X, "e5m2")),
    ("float6_e2m3fn", lambda: jaxfp8.encode(X, "e3m2")),
    ("mxfp4_e2m1", lambda: jaxfp8.mx.quantize(X, "mxfp6_e2m3")),
    ("float8_e4m3", lambda: jaxfp8.cast(X[:, :32], "float8_e4m3")),
], ids=lambda s: s[0])
def test_orbax_wrong_format_or_shape_is_a_clear_error(state, tmp_path, swap):
  jaxfp8.checkpoint.save(tmp_path / "ck", state)
  name, make = swap
  target = {**state, "params": {**state["params"], name: make()}}
  with pytest.raises(ValueError, match=rf"`restore`.*\n.*params/{name}"):
    jaxfp8.checkpoint.restore(tmp_path / "ck", target)


def test_flax_msgpack_round_trip_is_exact(state):
  """CodeArray and MXArray have state-dict handlers: plain to_bytes works
  (a typed PRNG key is the one leaf msgpack can't hold, Flax's limit)."""
  keyless = {k: v for k, v in state.items() if k != "opt_state"}
  data = serialization.to_bytes(keyless)
  back = serialization.from_bytes(keyless, data)
  assert bits(back) == bits(keyless)
  assert isinstance(back["params"]["float6_e3m2fn"], jaxfp8.CodeArray)
  assert isinstance(back["params"]["nvfp4"], jaxfp8.mx.MXArray)


def test_flax_msgpack_of_the_storable_form_holds_keys_too(state):
  data = serialization.to_bytes(jaxfp8.checkpoint.to_storable(state))
  stored = serialization.from_bytes(jaxfp8.checkpoint.to_storable(state),
                                    data)
  back = jaxfp8.checkpoint.from_storable(stored, state)
  assert bits(back) == bits(state)


@pytest.mark.parametrize("target", [
    lambda: jaxfp8.encode(X, "e3m2"),
    lambda: jaxfp8.encode(X[:2], "e2m3"),
])
def test_flax_msgpack_wrong_format_or_shape_is_a_clear_error(target):
  data = serialization.to_bytes({"v": jaxfp8.encode(X, "e2m3")})
  with pytest.raises(ValueError, match="flax.serialization"):
    serialization.from_bytes({"v": target()}, data)


def test_flax_msgpack_mx_wrong_format_is_a_clear_error():
  data = serialization.to_bytes({"v": jaxfp8.mx.quantize(X, "mxfp8_e4m3")})
  with pytest.raises(ValueError, match="mxfp8_e5m2"):
    serialization.from_bytes({"v": jaxfp8.mx.quantize(X, "mxfp8_e5m2")},
                             data)


_SHARDED = textwrap.dedent(r"""
    import sys
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    import jaxfp8, jaxfp8.checkpoint
    mesh = Mesh(np.array(jax.devices()), ("d",))
    rows = NamedSharding(mesh, P("d"))
    x = jax.random.normal(jax.random.key(0), (8, 64))
    state = {f: jax.device_put(jaxfp8.cast(x, f), rows)
             for f in ("e4m3", "e5m2", "float8_e4m3")}
    state["codes"] = jaxfp8.CodeArray(
        jax.device_put(jaxfp8.encode(x, "e2m3").codes, rows), "e2m3")
    jaxfp8.checkpoint.save(sys.argv[1], state)
    abstract = jax.tree_util.tree_map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=rows),
        state)
    back = jaxfp8.checkpoint.restore(sys.argv[1], abstract)
    for k in state:
      a, b = jax.tree_util.tree_leaves(state[k])[0], jax.tree_util.tree_leaves(back[k])[0]
      assert b.sharding.is_equivalent_to(rows, b.ndim), (k, b.sharding)
      assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), k
    print("ok", len(state))
""")


def test_sharded_round_trip_keeps_shards(tmp_path):
  env = dict(os.environ,
             XLA_FLAGS=os.environ.get("XLA_FLAGS", "")
             + " --xla_force_host_platform_device_count=4",
             JAX_PLATFORMS="cpu")
  proc = subprocess.run([sys.executable, "-c", _SHARDED, str(tmp_path / "ck")],
                        env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.split() == ["ok", "4"]
