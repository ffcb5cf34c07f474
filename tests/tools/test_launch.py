"""``jaxfp8.tools.launch``: local processes started together, never a hang."""
from __future__ import annotations

import sys
import time

import pytest

from jaxfp8.tools import launch

_PY = sys.executable


def test_all_succeed_and_their_outputs_come_back_in_order():
  done = launch.launch([[_PY, "-c", f"print({i})"] for i in range(3)],
                       timeout=60)
  assert done.ok and done.returncodes == (0, 0, 0)
  assert [o.strip() for o in done.outputs] == ["0", "1", "2"]


def test_a_failing_process_stops_the_others_at_once():
  t0 = time.monotonic()
  done = launch.launch(
      [[_PY, "-c", "import time; time.sleep(120)"],
       [_PY, "-c", "import sys; print('bad'); sys.exit(3)"]], timeout=100)
  assert time.monotonic() - t0 < 60  # not the sleeper's 120 s
  assert done.failed == 1 and not done.timed_out and not done.ok
  assert done.returncodes[1] == 3 and done.returncodes[0] != 0  # killed
  assert done.outputs[1].strip() == "bad"


def test_the_deadline_kills_every_process():
  done = launch.launch([[_PY, "-c", "import time; time.sleep(120)"]] * 2,
                       timeout=1)
  assert done.timed_out and done.failed is None
  assert all(code != 0 for code in done.returncodes)


def test_envs_reach_their_processes_and_must_match_the_commands():
  code = "import os; print(os.environ['JAX_PLATFORMS'], os.environ['X'])"
  done = launch.launch([[_PY, "-c", code]] * 2,
                       [launch.cpu_env(2, X=str(i)) for i in range(2)],
                       timeout=60)
  assert [o.split() for o in done.outputs] == [["cpu", "0"], ["cpu", "1"]]
  with pytest.raises(ValueError, match="one entry per command"):
    launch.launch([[_PY, "-c", ""]], [{}, {}], timeout=5)


def test_free_port_can_be_bound():
  import socket  # pylint: disable=g-import-not-at-top
  with socket.socket() as s:
    s.bind(("127.0.0.1", launch.free_port()))
