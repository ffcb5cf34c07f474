"""fp8 training over 4 simulated CPU devices: the same as on one device.

The device count must be set before JAX starts, so the checks run in
subprocesses with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``:

* ``examples/mlp_fp8.py --devices 4`` trains fp8 parameters (FSDP-sharded
  float8_e4m3fn kernels, batch-sharded data, delayed scaling, stochastic
  rounding) and the same on one device; the kernels part only by a
  stochastic rounding of a last-bit difference, the losses agree, and the
  compiled step keeps every kernel split four ways;
* the amax of a sharded tensor is the global one, and the scales and amax
  histories of ``CurrentScaling`` / ``DelayedScaling`` (and the delayed
  state the fp8 ``dot_general`` returns as its gradient) are bit for bit
  those of the unsharded computation, wherever the largest magnitude sits.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import xla_flags

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_EXAMPLE = _ROOT / "examples" / "mlp_fp8.py"
_ENV = dict(os.environ, JAX_PLATFORMS="cpu",
            XLA_FLAGS=os.environ.get("XLA_FLAGS", "")
            + " --xla_force_host_platform_device_count=4")

_CHILD = textwrap.dedent(r"""
    import json
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    import jaxfp8.policy as policy
    import jaxfp8.recipes

    assert jax.device_count() == 4, jax.devices()
    mesh = jax.make_mesh((4,), ("data",),
                         axis_types=(jax.sharding.AxisType.Auto,))
    rows = NamedSharding(mesh, P("data", None))
    one = jax.devices()[0]
    ROWS, COLS = 64, 48

    def bits(x):
      # Every leaf as its raw bytes: equal means equal bit for bit.
      return [np.asarray(l).reshape(-1).view(np.uint8).tolist()
              for l in jax.tree_util.tree_leaves(x)]

    def current(x):
      return [policy.CurrentScaling("e4m3").scale_for(x),
              policy.CurrentScaling("e5m2", margin=1,
                                    power_of_two=True).scale_for(x),
              policy.CurrentScaling("e4m3").quantize(x)]

    def delayed(*tensors):
      s = [policy.DelayedScaling.create("e4m3", history_length=4),
           policy.DelayedScaling.create("e5m2", history_length=4,
                                        reduction="most_recent")]
      for t in tensors:
        s = [d.update(policy.amax(t)) for d in s]
      return s

    W = np.random.default_rng(99).standard_normal((COLS, 16), np.float32)

    def dot_state(x, cot):
      # The fp8 dot's delayed state is its "gradient": the input amax
      # recorded forward, the output gradient's backward.
      states = [policy.DelayedScaling.create(f, history_length=4)
                for f in ("e4m3", "e4m3", "e5m2")]
      def loss(states):
        out = jaxfp8.recipes.dot_general(
            x.astype(jnp.float32), W, (((1,), (0,)), ((), ())),
            recipe="fp8_delayed", state=dict(zip(("x", "w", "dy"), states)))
        return jnp.sum(out * cot)
      return jax.grad(loss)(states)

    def all_finite(x):
      return policy.all_finite({"g": x})

    JITTED = {f: jax.jit(f) for f in (policy.amax, current, delayed,
                                      dot_state, all_finite)}

    def both(fn, *args):
      # fn under jit on 4-way row-sharded args and on one device.
      sharded = [jax.device_put(a, rows) for a in args]
      single = [jax.device_put(a, one) for a in args]
      assert len(sharded[0].sharding.device_set) == 4
      return JITTED[fn](*sharded), JITTED[fn](*single)

    def tensor(seed, row, value, dtype):
      # Standard normal, and the largest magnitude at ``row`` (shard
      # row // 16 of the four).
      x = np.random.default_rng(seed).standard_normal((ROWS, COLS))
      x[row, 5] = value
      return np.array(jnp.asarray(x.astype(np.float32), dtype))

    out = {}
    for dtype in ["float32", "bfloat16", "float8_e4m3fn"]:
      for shard in range(4):
        for sign in (1, -1):
          name = f"{dtype}/shard{shard}/{'+-'[sign < 0]}"
          x = tensor(shard, 16 * shard + 7, sign * 36.0, dtype)
          want = float(np.max(np.abs(x.astype(np.float32))))
          a_s, a_1 = both(policy.amax, x)
          c_s, c_1 = both(current, x)
          # Three updates, the largest amax in the middle one, each from
          # another shard.
          first = tensor(shard + 20, 16 * ((shard + 1) % 4), 8.0, dtype)
          middle = tensor(shard + 10, 16 * ((shard + 2) % 4), -384.0, dtype)
          d_s, d_1 = both(delayed, first, middle, x)
          cot = np.random.default_rng(98).standard_normal((ROWS, 16))
          g_s, g_1 = both(dot_state, x, (sign * cot).astype(np.float32))
          out[name] = {
              "amax": [float(a_s), float(a_1), want],
              "amax_bits": bits(a_s) == bits(a_1),
              "current": bits(c_s) == bits(c_1),
              "delayed": bits(d_s) == bits(d_1),
              "delayed_history": np.asarray(d_s[0].amax_history).tolist(),
              "delayed_scale": float(d_s[0].scale),
              "dot_state": bits(g_s) == bits(g_1),
              "dot_input_amax": float(g_s[0].amax_history[0]),
          }

    # NaN on a shard other than the first: amax is NaN (documented), and
    # all_finite (what guards a training step) says False.
    x = tensor(0, 0, 1.0, "float32")
    x[40, 3] = np.nan
    a_s, a_1 = both(policy.amax, x)
    f_s, f_1 = both(all_finite, x)
    out["nan"] = {"amax": [str(float(a_s)), str(float(a_1))],
                  "all_finite": [bool(f_s), bool(f_1)]}
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def scaling_results():
  return xla_flags.child_result(_CHILD, _ENV, timeout=600)


@pytest.fixture(scope="module")
def example_output():
  proc = subprocess.run(
      [sys.executable, str(_EXAMPLE), "--devices", "4", "--steps", "40"],
      env=_ENV, capture_output=True, text=True, timeout=600, cwd=_ROOT)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return proc.stdout.strip().splitlines()


CASES = [f"{dtype}/shard{shard}/{sign}"
         for dtype in ["float32", "bfloat16", "float8_e4m3fn"]
         for shard in range(4) for sign in "+-"]


def test_sharded_training_matches_one_device(example_output):
  last = example_output[-1]
  assert last.startswith("final_loss devices=4 "), example_output
  values = dict(part.split("=") for part in last.split()[1:])
  sharded, one = float(values["sharded"]), float(values["one_device"])
  # Both learned (the targets' variance is about 1.3) ...
  assert sharded < 0.5 and one < 0.5, (sharded, one)
  # ... and the same way. The runs share keys, data and rounding bits, and
  # differ only in the order of float32 sums over the batch: a last bit of
  # some gradients. Stochastic rounding makes that another fp8 value when
  # its threshold falls in between (about 2^-20 of roundings), at a step
  # that depends on the JAX version and the CPU; the runs then follow two
  # trajectories of the same training, as two stochastic-rounding keys
  # would, and their losses part by a few 1e-3 at most in 40 steps.
  assert abs(sharded - one) <= 1e-2 * one, (sharded, one)
  # What would show a layout bug (other random bits, scales or data): many
  # kernel values parting at once. A rounding flip is one or two values.
  first = next(l for l in example_output if l.startswith("first_difference"))
  if first != "first_difference none":
    step, values = (int(p.split("=")[1]) for p in first.split()[1:])
    assert step >= 1 and values <= 2, first


def test_compiled_step_keeps_kernels_sharded(example_output):
  # The example's check of the compiled program: each fp8 kernel enters and
  # leaves as a quarter, and each device holds only its shards.
  assert "sharded_params ok" in example_output, example_output


@pytest.mark.parametrize("case", CASES)
def test_amax_is_global(scaling_results, case):
  r = scaling_results[case]
  sharded, single, numpy_max = r["amax"]
  assert sharded == single == numpy_max == 36.0, r
  assert r["amax_bits"], r


@pytest.mark.parametrize("case", CASES)
def test_current_scaling_is_unchanged_by_sharding(scaling_results, case):
  assert scaling_results[case]["current"], scaling_results[case]


@pytest.mark.parametrize("case", CASES)
def test_delayed_scaling_is_unchanged_by_sharding(scaling_results, case):
  r = scaling_results[case]
  assert r["delayed"], r
  assert r["delayed_history"] == [36.0, 384.0, 8.0, 0.0], r
  assert r["delayed_scale"] == pytest.approx(384.0 / 448.0, rel=1e-6), r


@pytest.mark.parametrize("case", CASES)
def test_fp8_dot_state_is_unchanged_by_sharding(scaling_results, case):
  r = scaling_results[case]
  assert r["dot_state"], r
  assert r["dot_input_amax"] == 36.0, r


def test_all_finite_sees_nan_on_any_shard(scaling_results):
  assert scaling_results["nan"]["all_finite"] == [False, False]


def test_amax_of_sharded_nan_is_nan(scaling_results):
  """XLA's CPU all-reduce with `maximum` drops NaN across devices; amax
  tests for NaN in a reduction of its own."""
  assert scaling_results["nan"]["amax"] == ["nan", "nan"]
