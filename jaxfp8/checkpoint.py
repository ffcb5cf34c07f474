"""Checkpoints of narrow-format state, exact: orbax and ``flax.serialization``.

>>> import tempfile, jax.numpy as jnp, jaxfp8
>>> state = {"w": jnp.ones((2, 2), jnp.float8_e4m3fn),
...          "v": jaxfp8.encode(jnp.ones(3), "e3m2")}
>>> d = tempfile.mkdtemp() + "/ck"
>>> jaxfp8.checkpoint.save(d, state)
>>> back = jaxfp8.checkpoint.restore(d, state)
>>> back["v"]
CodeArray(float6_e3m2fn, shape=(3,), values=[1 1 1])
"""
from jaxfp8._src.checkpoint import from_storable as from_storable
from jaxfp8._src.checkpoint import register_flax_serialization as register_flax_serialization
from jaxfp8._src.checkpoint import restore as restore
from jaxfp8._src.checkpoint import save as save
from jaxfp8._src.checkpoint import to_storable as to_storable

register_flax_serialization()

__all__ = ["from_storable", "register_flax_serialization", "restore", "save",
           "to_storable"]
