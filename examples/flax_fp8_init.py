"""The same Flax model initialized in fp8 without and with jaxfp8.

Without jaxfp8, JAX draws Flax's default truncated-normal kernels in the
narrow format itself: every float8_e4m3fn kernel is NaN, and float8_e5m2
kernels get a handful of distinct values with a biased mean. Under
``jaxfp8.installed()`` the same, unchanged model gets its float32 weights
rounded once into the format.

Run: ``python examples/flax_fp8_init.py``
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import jaxfp8


class Model(nn.Module):
  """A small conv net: Conv -> Conv -> Dense -> Dense (Flax defaults)."""
  param_dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x):
    kw = dict(param_dtype=self.param_dtype, dtype=jnp.float32)
    x = nn.relu(nn.Conv(32, (3, 3), **kw)(x))
    x = nn.relu(nn.Conv(64, (3, 3), strides=2, **kw)(x))
    x = nn.relu(nn.Dense(256, **kw)(x.reshape(x.shape[0], -1)))
    return nn.Dense(10, **kw)(x)


def kernels(param_dtype) -> dict[str, np.ndarray]:
  params = Model(param_dtype).init(jax.random.key(0), jnp.ones((1, 16, 16, 3)))
  return {name: np.asarray(jaxfp8.decode(layer["kernel"]), np.float64)
          for name, layer in params["params"].items()}


def report(title: str, got: dict[str, np.ndarray],
           ref: dict[str, np.ndarray]) -> None:
  print(f"\n{title}")
  print(f"  {'layer':<8} {'NaN':>7} {'distinct':>9} {'std':>9} "
        f"{'std/f32':>8} {'mean':>9}")
  for name, w in got.items():
    finite = w[~np.isnan(w)]
    std = finite.std() if finite.size else float("nan")
    mean = finite.mean() if finite.size else float("nan")
    print(f"  {name:<8} {int(np.isnan(w).sum()):>7} "
          f"{len(np.unique(finite)):>9} {std:>9.5f} "
          f"{std / ref[name].std():>8.3f} {mean:>9.5f}")


def main() -> None:
  ref = kernels(jnp.float32)
  report("float32 (reference)", ref, ref)
  for fmt in (jnp.float8_e4m3fn, jnp.float8_e5m2):
    name = jnp.dtype(fmt).name
    try:
      report(f"{name}, JAX alone", kernels(fmt), ref)
    except Exception as e:  # pylint: disable=broad-except
      print(f"\n{name}, JAX alone: {type(e).__name__}: {e}")
    with jaxfp8.installed():
      report(f"{name}, with jaxfp8.installed()", kernels(fmt), ref)


if __name__ == "__main__":
  main()
