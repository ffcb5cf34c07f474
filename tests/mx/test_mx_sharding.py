"""MX arrays on 4 simulated CPU devices: sharded quantize and matmul equal
unsharded bit for bit, device_put with a NamedSharding keeps the packed
storage, and gathering moves packed bytes.

The device count must be set before JAX starts, so the checks run in a
subprocess with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

_CHILD = textwrap.dedent(r"""
    import json, re
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from jaxfp8 import mx

    assert jax.device_count() == 4, jax.devices()
    mesh = Mesh(np.array(jax.devices()), ("d",))
    rows, cols = NamedSharding(mesh, P("d", None)), NamedSharding(mesh, P(None, "d"))
    x = jax.random.normal(jax.random.key(0), (64, 256)) * 10.0
    w = jax.random.normal(jax.random.key(1), (256, 64))
    out = {}

    def same(a, b):
      return all(np.array_equal(np.asarray(u).view(np.uint8),
                                np.asarray(v).view(np.uint8))
                 for u, v in zip(jax.tree_util.tree_leaves(a),
                                 jax.tree_util.tree_leaves(b)))

    for fmt in ["mxfp8_e4m3", "mxfp6_e2m3", "mxfp4_e2m1"]:
      q1 = jax.jit(lambda v: mx.quantize(v, fmt))(x)
      # rows sharded; and the blocked axis cut at block boundaries (64 each)
      qr = jax.jit(lambda v: mx.quantize(v, fmt))(jax.device_put(x, rows))
      qc = jax.jit(lambda v: mx.quantize(v, fmt))(jax.device_put(x, cols))
      # device_put of an MXArray: every leaf sharded alike
      qp = jax.device_put(q1, rows)
      m1 = jax.jit(mx.matmul)(q1, mx.quantize(w, fmt, axis=0))
      ms = jax.jit(mx.matmul)(qp, jax.device_put(mx.quantize(w, fmt, axis=0),
                                                  cols))
      out[fmt] = {
          "quantize_rows": same(q1, qr), "quantize_cols": same(q1, qc),
          "device_put": same(q1, qp) and len(qp.data.sharding.device_set) == 4,
          "matmul": bool(np.array_equal(np.asarray(m1), np.asarray(ms))),
      }
    # gathering a sharded MXArray moves the packed bytes, not float32
    q = jax.device_put(mx.quantize(x, "mxfp4_e2m1"), rows)
    gather = jax.jit(lambda a: a, out_shardings=NamedSharding(mesh, P()))
    text = gather.lower(q).compile().as_text()
    ags = re.findall(r"= (\w+)\[([0-9,]+)\][^\n]*all-gather", text)
    out["gather"] = sorted({(t, s) for t, s in ags})
    print(json.dumps(out))
""")


def test_sharded_equals_unsharded():
  env = {**os.environ,
         "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "")
                       + " --xla_force_host_platform_device_count=4"),
         "JAX_PLATFORMS": "cpu"}
  res = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True,
                       text=True, timeout=600, env=env, check=False)
  assert res.returncode == 0, res.stderr[-3000:]
  out = json.loads(res.stdout.strip().splitlines()[-1])
  for fmt in ["mxfp8_e4m3", "mxfp6_e2m3", "mxfp4_e2m1"]:
    assert out[fmt] == {"quantize_rows": True, "quantize_cols": True,
                        "device_put": True, "matmul": True}, (fmt, out[fmt])
  # the all-gathers move uint8: packed data (64 x 128) and scales (64 x 8)
  assert out["gather"] and all(t == "u8" for t, _ in out["gather"]), out
