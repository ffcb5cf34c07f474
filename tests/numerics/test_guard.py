"""The constant-lowering guard: a float6 constant under jit is an error, not an abort."""
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxfp8
from jaxfp8._src import compat
from jaxfp8._src.numerics import constant_guard
from jaxfp8._src.numerics import formats

SCRIPT = textwrap.dedent("""
    import sys
    import jax, jax.numpy as jnp, ml_dtypes, numpy as np
    if sys.argv[1] == "guarded":
        import jaxfp8
    c = np.ones(3, ml_dtypes.float6_e2m3fn)
    try:
        jax.jit(lambda: jnp.asarray(c))()
    except TypeError as e:
        print("TypeError:", e)
        sys.exit(3)
    print("no error")
""")


def _run(mode):
  return subprocess.run([sys.executable, "-c", SCRIPT, mode],
                        capture_output=True, text=True, timeout=120)


def test_guard_turns_abort_into_type_error():
  res = _run("guarded")
  assert res.returncode == 3, res.stderr[-2000:]
  assert "float6_e2m3fn" in res.stdout and "jaxfp8.encode" in res.stdout


def test_without_guard_jax_aborts():
  """Documents why the guard exists; if JAX fixes this, the test says so."""
  res = _run("bare")
  if res.returncode == 0 or res.returncode == 1:
    pytest.skip(f"this JAX no longer aborts (exit {res.returncode})")
  assert res.returncode < 0 or res.returncode == 134, res.returncode


def test_supported_formats_lower_unchanged():
  c8 = np.array([1.5, -2.0], ml_dtypes.float8_e4m3fn)
  c4 = np.array([1.5, -2.0], ml_dtypes.float4_e2m1fn)
  out = jax.jit(lambda: (jnp.asarray(c8), jnp.asarray(c4)))()
  assert out[0].dtype == jnp.float8_e4m3fn and out[1].dtype == jnp.float4_e2m1fn
  np.testing.assert_array_equal(out[0].astype(jnp.float32), [1.5, -2.0])
  np.testing.assert_array_equal(jax.jit(lambda x: x + np.float32(1))(
      jnp.ones(2)), [2.0, 2.0])


HELD_NOT_COMPUTED = [f.name for f in formats.all_formats(narrow=True)
                     if f.bits in compat.HELD_BUT_NOT_COMPUTED_BITS]


@pytest.mark.parametrize("name", HELD_NOT_COMPUTED)
def test_held_but_not_computed_formats_are_refused(name):
  """The guard's formats come from compat's one list of widths the backend
  holds but can't compute with (the handler raises before lowering)."""
  handler = compat.get_constant_handler(np.ndarray)
  with pytest.raises(TypeError, match=name):
    handler(np.ones(3, formats.get(name).dtype))


def test_guard_is_installed_and_idempotent():
  assert constant_guard.constants_guarded()
  constant_guard.guard_constants()
  assert constant_guard.constants_guarded()


def test_unguard_restores_jax_handlers_and_guard_again():
  types = compat.ndarray_constant_types()
  guarded = {t: compat.get_constant_handler(t) for t in types}
  constant_guard.unguard_constants()
  try:
    assert not constant_guard.constants_guarded()
    for t in types:
      handler = compat.get_constant_handler(t)
      assert handler is not guarded[t]
      assert not getattr(handler, "jaxfp8_guard", False)
  finally:
    constant_guard.guard_constants()
  assert constant_guard.constants_guarded()


def test_float6_via_codes_works_under_jit():
  y = jaxfp8.encode(np.array([0.5, 7.0], np.float32), "e2m3")
  z = jax.jit(lambda c: jaxfp8.decode(c) * 2)(y)
  np.testing.assert_array_equal(z, [1.0, 14.0])
