"""The JAX and Flax internals jaxfp8._src.compat relies on.

Each test checks one fact compat.py writes down (its layout, its place), so
that an upgrade that moves it fails here by name, instead of the constant
guard or a version shim silently doing nothing. What install() relies on is
checked in tests/install/test_routing.py and test_references.py.
"""
import jax
import numpy as np

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
