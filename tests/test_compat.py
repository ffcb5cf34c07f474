"""The JAX and Flax internals jaxfp8._src.compat relies on.

Each test checks one fact compat.py writes down (its layout, its place), so
that an upgrade that moves it fails here by name, instead of the constant
guard or a version shim silently doing nothing. What install() relies on is
checked in tests/install/test_routing.py and test_references.py.
"""
import functools
import inspect

import jax
import numpy as np
import pytest

import jaxfp8  # noqa: F401  (importing it guards the constant handlers)
from jaxfp8._src import compat


# --- the constant handlers (constant_guard) ----------------------------------


def test_constant_handlers_exist_and_are_guarded():
  from jax._src.interpreters import mlir  # pylint: disable=g-import-not-at-top
  assert callable(mlir.get_constant_handler)
  types_ = compat.ndarray_constant_types()
  from jax._src import literals  # pylint: disable=g-import-not-at-top
  assert types_ == (np.ndarray, literals.TypedNdArray)
  for t in types_:
    handler = compat.get_constant_handler(t)
    assert handler is not None, t
    assert getattr(handler, "jaxfp8_guard", False), t  # import jaxfp8 did it
  assert compat.get_constant_handler(type("NotAnArray", (), {})) is None


def test_tracer_is_jax_tracer():
  seen = []
  jax.jit(lambda x: seen.append(isinstance(x, compat.Tracer)) or x)(1.0)
  assert seen == [True]



def test_staged_tracers_are_told_from_transformation_tracers():
  # decode_grad.source_children keeps a straight-through source across
  # boundaries by this distinction.
  seen = {}

  def probe(name):
    def record(x):
      seen[name] = compat.is_staged(x)
      return x * 1.0
    return record

  jax.jit(probe("jit"))(1.0)
  jax.lax.scan(lambda c, _: (probe("scan")(c), None), 1.0, None, length=1)
  jax.checkpoint(probe("checkpoint"))(1.0)
  jax.grad(probe("grad"))(1.0)
  jax.jvp(probe("jvp"), (1.0,), (1.0,))
  jax.vmap(probe("vmap"))(np.ones(2))
  assert seen == {"jit": True, "scan": True, "checkpoint": True,
                  "grad": False, "jvp": False, "vmap": False}
  assert not compat.is_staged(np.ones(2))

# --- lowering for a GPU -------------------------------------------------------


def test_gpu_lowering_target_lowers_for_cuda_without_a_gpu():
  """JAX 0.11 refuses to lower for CUDA without a GPU unless an abstract
  device is in scope (0.10.2 and 0.12.0.1 lower as is); the context must
  provide one (or JAX must need none)."""
  if jax.default_backend() == "cpu":
    assert hasattr(jax.sharding, "AbstractDevice")
    assert hasattr(jax.sharding, "use_abstract_mesh")
  with compat.gpu_lowering_target():
    text = jax.jit(lambda x: x * 2).trace(
        jax.ShapeDtypeStruct((8,), jax.numpy.float32)).lower(
            lowering_platforms=("cuda",)).as_text()
  assert "multiply" in text


# --- Mosaic GPU -----------------------------------------------------------------


def test_mosaic_gpu_interpreter_ships_from_jax_0_11():
  params = compat.mosaic_gpu_interpret_params()
  assert (params is not None) == (compat.JAX_VERSION >= (0, 11, 0))


def test_mosaic_gpu_kernel_takes_the_keywords_the_shim_passes():
  from jax.experimental.pallas import mosaic_gpu as plgpu  # pylint: disable=g-import-not-at-top
  params = inspect.signature(plgpu.kernel).parameters
  assert "out_type" in params or "out_shape" in params
  assert "scratch_types" in params or "scratch_shapes" in params
  assert {"grid", "grid_names", "interpret"} <= set(params)


def test_mosaic_gpu_mixed_fp8_is_what_wgmma_takes():
  """The mixed e4m3 x e5m2 kernel lowers for CUDA exactly where the shim
  says wgmma takes the pair."""
  from jaxfp8._src.kernels import mosaic_gpu_common as common  # pylint: disable=g-import-not-at-top
  from jaxfp8._src.kernels.scaled_matmul import mosaic_gpu as scaled_matmul  # pylint: disable=g-import-not-at-top
  jnp = jax.numpy
  s = jax.ShapeDtypeStruct
  f = functools.partial(scaled_matmul._scaled_matmul,
                        out_dtype=np.dtype(jnp.float32), mode="compiled",
                        tiles=common.choose_tiles(64, 64, 128, fn="t"))
  try:
    with compat.gpu_lowering_target():
      jax.jit(f).trace(s((64, 128), jnp.float8_e4m3fn),
                       s((64, 128), jnp.float8_e5m2), s((), jnp.float32),
                       s((), jnp.float32)).lower(lowering_platforms=("cuda",))
    lowered = True
  except ValueError as e:
    assert "Mixed input dtypes" in str(e)
    lowered = False
  assert lowered == compat.mosaic_gpu_mixed_fp8()


def test_the_qwix_hooks_the_provider_relies_on_are_where_pinned():
  """Each hook of compat.QWIX_HOOKS by name: a Qwix release that moves one
  fails here, naming it."""
  pytest.importorskip("qwix")
  import importlib  # pylint: disable=g-import-not-at-top
  for path in compat.QWIX_HOOKS:
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
      try:
        obj = importlib.import_module(".".join(parts[:cut]))
      except ImportError:
        continue
      for attr in parts[cut:]:
        obj = getattr(obj, attr, None)
      assert callable(obj), f"Qwix no longer has {path}"
      break
    else:
      pytest.fail(f"Qwix no longer has {path}")
