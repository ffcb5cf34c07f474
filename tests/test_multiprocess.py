"""The multi-process harness (tests/multiprocess.py) fails; it never hangs."""
from __future__ import annotations

import time

import pytest

import multiprocess


def test_processes_join_one_runtime():
  code = r"""
  import numpy as np
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
  from jax.experimental import multihost_utils
  rows = NamedSharding(Mesh(np.array(jax.devices()), ("d",)), P("d"))
  x = jax.make_array_from_callback((4,), rows,
                                   lambda i: np.arange(4.0)[i])
  total = jax.jit(lambda x: x.sum(), out_shardings=NamedSharding(rows.mesh, P()))(x)
  emit({"process": jax.process_index(), "devices": jax.device_count(),
        "local": jax.local_device_count(),
        "total": float(multihost_utils.process_allgather(total, tiled=True))})
  """
  results = multiprocess.run(code)
  assert results == [{"process": i, "devices": 4, "local": 2, "total": 6.0}
                     for i in range(2)]
  assert multiprocess.run_one(code) == {"process": 0, "devices": 4,
                                        "local": 4, "total": 6.0}


def test_a_process_that_dies_fails_the_test_without_a_hang():
  # Process 1 dies before the collective that process 0 then waits in.
  code = r"""
  import numpy as np
  from jax.experimental import multihost_utils
  if jax.process_index() == 1:
    raise RuntimeError("process 1 gives up")
  multihost_utils.sync_global_devices("never reached by process 1")
  emit({})
  """
  start = time.monotonic()
  with pytest.raises(pytest.fail.Exception,
                     match=r"process 1 of 2 exited with code 1(.|\n)*gives up"):
    multiprocess.run(code, timeout=120)
  assert time.monotonic() - start < 60  # the deadline is 120 s


def test_a_deadline_kills_every_process():
  code = r"""
  import time
  time.sleep(600)
  """
  start = time.monotonic()
  with pytest.raises(pytest.fail.Exception,
                     match="2 processes did not finish within 5 s"):
    multiprocess.run(code, timeout=5)
  assert time.monotonic() - start < 15
