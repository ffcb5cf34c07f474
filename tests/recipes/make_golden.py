"""Golden outputs of ``fp8_dot_general`` and ``mx.dot_general``, bit for bit.

The recipe core (``jaxfp8.recipes``) replaced the bodies of
``jaxfp8.policy.fp8_dot_general`` and ``jaxfp8.mx.dot_general``; they must
give the bits they gave before. This module holds the cases (fixed NumPy
seeds, so the inputs are the same on every JAX) and records, for each, the
forward value and the VJP (gradients of ``lhs``, ``rhs`` and of every
``DelayedScaling`` argument, i.e. the next states) of one jitted program
into ``tests/recipes/data/golden_dot_jax<version>.npz``; test_recipe_golden.py
computes the same with the current code and compares the bits.

XLA's float32 code may differ in the last bit across JAX versions, code
generation flags and the host's vector extensions (AVX-512 or not), so one
file is recorded per JAX version and :func:`host_isa`, under the flags the
test suite compiles with (tests/xla_flags.py), and the test compares against
the file of the JAX and host it runs on.

Regenerate ONLY from the code before the refactor (the commit before issue
#30's recipe core, c1bf68d), never from the current code (that would make
the test compare the code with itself)::

  rm -rf /tmp/golden_src && mkdir /tmp/golden_src
  git archive c1bf68d jaxfp8 | tar -x -C /tmp/golden_src
  PYTHONPATH=/tmp/golden_src:tests python tests/recipes/make_golden.py
  PYTHONPATH=/tmp/golden_src:tests /work/venvs/py313/bin/python \\
      tests/recipes/make_golden.py

A new JAX version adds its own file the same way.
"""
from __future__ import annotations

import json
import os
import pathlib
import sys

DATA = pathlib.Path(__file__).resolve().parent / "data"

# Cases: name -> (kind, lhs shape, rhs shape, dimension numbers, options).
# kind "fp8" is policy.fp8_dot_general, "mx" is mx.dot_general; options:
# dtype (of both operands; "e4m3" makes lhs narrow), pref
# (preferred_element_type) and the op's own keywords, spelled as data.
D2 = (((1,), (0,)), ((), ()))
BATCH = (((2,), (1,)), ((0,), (0,)))
# lhs (4, 6, 8) contracting dims (2, 1) with rhs (8, 6, 5) dims (0, 1)
MULTI = (((2, 1), (0, 1)), ((), ()))
CASES = {
    "fp8_current": ("fp8", (8, 32), (32, 16), D2, {}),
    "fp8_e5m2_lhs": ("fp8", (8, 32), (32, 16), D2,
                     {"lhs_scaling": "e5m2", "grad_scaling": "e4m3"}),
    "fp8_pow2_margin": ("fp8", (8, 32), (32, 16), D2,
                        {"current": dict(power_of_two=True, margin=1)}),
    "fp8_delayed": ("fp8", (8, 32), (32, 16), D2, {"delayed": True}),
    "fp8_delayed_pow2": ("fp8", (8, 32), (32, 16), D2,
                         {"delayed": True, "power_of_two": True}),
    "fp8_bf16": ("fp8", (8, 32), (32, 16), D2, {"dtype": "bfloat16"}),
    "fp8_narrow_lhs": ("fp8", (8, 32), (32, 16), D2, {"dtype": "e4m3"}),
    "fp8_pref_e4m3": ("fp8", (8, 32), (32, 16), D2, {"pref": "float8_e4m3fn"}),
    "fp8_pref_bf16": ("fp8", (8, 32), (32, 16), D2, {"pref": "bfloat16"}),
    "fp8_batch": ("fp8", (2, 8, 32), (2, 32, 16), BATCH, {}),
    "fp8_multi": ("fp8", (4, 6, 8), (8, 6, 5), MULTI, {}),
    "mx_mxfp8": ("mx", (8, 64), (64, 16), D2, {"recipe": "mxfp8"}),
    "mx_hp_wgrad": ("mx", (8, 64), (64, 16), D2, {"recipe": "mxfp8_hp_wgrad"}),
    "mx_e5m2_grad": ("mx", (8, 64), (64, 16), D2,
                     {"recipe": "mxfp8_e5m2_grad"}),
    "mx_mxfp4": ("mx", (8, 64), (64, 16), D2, {"recipe": "mxfp4"}),
    "mx_nvfp4": ("mx", (8, 64), (64, 16), D2, {"recipe": "nvfp4"}),
    "mx_stochastic": ("mx", (8, 64), (64, 16), D2,
                      {"recipe": dict(stochastic_grad=True)}),
    "mx_floor": ("mx", (8, 64), (64, 16), D2,
                 {"recipe": dict(scale_mode="floor")}),
    "mx_block16": ("mx", (8, 64), (64, 16), D2,
                   {"recipe": dict(block_size=16, fwd="mxfp6_e2m3")}),
    "mx_ragged_k": ("mx", (8, 40), (40, 16), D2, {"recipe": "mxfp8"}),
    "mx_batch": ("mx", (2, 8, 64), (2, 64, 16), BATCH, {"recipe": "mxfp8"}),
    "mx_multi": ("mx", (4, 6, 8), (8, 6, 5), MULTI, {"recipe": "mxfp4"}),
    "mx_bf16": ("mx", (8, 64), (64, 16), D2,
                {"recipe": "mxfp8", "dtype": "bfloat16"}),
    "mx_pref_bf16": ("mx", (8, 64), (64, 16), D2,
                     {"recipe": "mxfp8_e5m2_grad", "pref": "bfloat16"}),
}


def host_isa() -> str:
  """The widest x86 vector extension XLA's CPU code may use here: "avx512"
  or "avx2" (XLA picks reduction and FMA code by it, so the float32 bits of
  one program differ between the two)."""
  try:
    flags = pathlib.Path("/proc/cpuinfo").read_text()
  except OSError:
    return "unknown"
  return "avx512" if " avx512f" in flags else "avx2"


def golden_path(jax_version: str, isa: str | None = None) -> pathlib.Path:
  return DATA / f"golden_dot_jax{jax_version}_{isa or host_isa()}.npz"


def _data(rng, shape):
  """Normals spread over 2^-6 .. 2^6, so blocks get different scales."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  x = rng.standard_normal(shape) * 2.0 ** rng.integers(-6, 7, shape)
  return x.astype(np.float32)


def _delayed(fmt, rng, power_of_two=False):
  """A DelayedScaling state with a non-trivial history."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from jaxfp8 import policy  # pylint: disable=g-import-not-at-top
  s = policy.DelayedScaling.create(fmt, history_length=4,
                                   power_of_two=power_of_two)
  for a in rng.uniform(0.5, 40.0, 2).astype(np.float32):
    s = s.update(jnp.float32(a))
  return s


def case_program(name: str):
  """(function of (args, cotangent) -> (out, cotangents), args, cotangent)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from jaxfp8 import mx  # pylint: disable=g-import-not-at-top
  from jaxfp8 import policy  # pylint: disable=g-import-not-at-top
  kind, ls, rs, dims, opts = CASES[name]
  opts = dict(opts)
  rng = np.random.default_rng(sorted(CASES).index(name))
  lhs, rhs = _data(rng, ls), _data(rng, rs)
  dtype = opts.pop("dtype", "float32")
  if dtype == "e4m3":
    lhs = jnp.asarray(lhs / 64).astype(jnp.float8_e4m3fn)
    rhs = jnp.asarray(rhs)
  else:
    lhs, rhs = jnp.asarray(lhs, dtype), jnp.asarray(rhs, dtype)
  pref = opts.pop("pref", None)
  args = [lhs, rhs]
  if kind == "fp8":
    if opts.pop("delayed", False):
      p2 = opts.pop("power_of_two", False)
      args += [_delayed(f, rng, p2) for f in ("e4m3", "e4m3", "e5m2")]
      fn = lambda a, b, sl, sr, sg: policy.fp8_dot_general(
          a, b, dims, None, pref, lhs_scaling=sl, rhs_scaling=sr,
          grad_scaling=sg)
    else:
      current = opts.pop("current", None)
      if current is not None:
        opts = {k: policy.CurrentScaling(f, **current) for k, f in (
            ("lhs_scaling", "e4m3"), ("rhs_scaling", "e4m3"),
            ("grad_scaling", "e5m2"))}
      fn = lambda a, b: policy.fp8_dot_general(a, b, dims, None, pref, **opts)
  else:
    recipe = opts.pop("recipe")
    key = None
    if isinstance(recipe, dict):
      recipe = mx.MXRecipe(**recipe)
      if recipe.stochastic_grad:
        key = jax.random.PRNGKey(7)
    fn = lambda a, b: mx.dot_general(a, b, dims, None, pref, recipe=recipe,
                                     key=key)
  out = jax.eval_shape(fn, *args)
  g = jnp.asarray(_data(rng, out.shape)).astype(out.dtype)

  def program(args, g):
    y, vjp = jax.vjp(fn, *args)
    return y, vjp(g)

  return jax.jit(program), args, g


def run_case(name: str) -> list:
  """The case's output and cotangents, as NumPy arrays in pytree order."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  program, args, g = case_program(name)
  return [np.asarray(a) for a in jax.tree_util.tree_leaves(program(args, g))]


def bits(a):
  """The raw bits of ``a`` as an unsigned array (NaNs compare by pattern)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


def load(path: pathlib.Path) -> tuple[dict, dict]:
  """(metadata, {case: [(dtype name, bits), ...]}) of a golden file."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  with np.load(path) as f:
    meta = json.loads(str(f["meta"]))
    out: dict = {}
    for name in CASES:
      out[name] = [(meta["dtypes"][name][i], f[f"{name}/{i}"])
                   for i in range(len(meta["dtypes"][name]))]
  return meta, out


def main() -> None:
  sys.path.insert(0, str(DATA.parent.parent))
  import xla_flags  # pylint: disable=g-import-not-at-top
  flags = xla_flags.suite_flags()
  os.environ["XLA_FLAGS"] = " ".join(
      filter(None, [os.environ.get("XLA_FLAGS", "")] + flags))
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import jaxfp8  # pylint: disable=g-import-not-at-top
  print("jaxfp8 from", jaxfp8.__file__)
  arrays, dtypes = {}, {}
  for name in CASES:
    leaves = run_case(name)
    dtypes[name] = [str(a.dtype) for a in leaves]
    for i, a in enumerate(leaves):
      arrays[f"{name}/{i}"] = bits(a)
  meta = {"jax": jax.__version__, "xla_flags": flags, "dtypes": dtypes,
          "platform": jax.default_backend(), "isa": host_isa()}
  DATA.mkdir(exist_ok=True)
  path = golden_path(jax.__version__)
  np.savez_compressed(path, meta=np.array(json.dumps(meta)), **arrays)
  print(f"wrote {path} ({path.stat().st_size} bytes, {len(arrays)} arrays)")


if __name__ == "__main__":
  main()
