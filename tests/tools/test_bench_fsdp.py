"""``python -m jaxfp8 bench fsdp``: the bytes an FSDP step gathers."""
from __future__ import annotations

import pytest

from jaxfp8.tools import cli


def test_bench_fsdp_quick_reports_each_recipe_against_float32(capfd):
  # One simulated process of 4 devices (the suite's has 1): it runs itself
  # again in a subprocess, whose table reaches the file descriptors.
  assert cli.main(["bench", "fsdp", "--quick"]) == 0
  out = capfd.readouterr().out
  rows = {tuple(c.strip() for c in line.split("|")[1:3]):
          [c.strip() for c in line.split("|")[3:-1]]
          for line in out.splitlines()
          if line.startswith("| ") and not line.startswith("| recipe")}
  assert list(rows) == [("float32", "XLA"), ("fp8_current", "XLA"),
                        ("fp8_current", "narrow"), ("nvfp4", "XLA"),
                        ("nvfp4", "narrow")], out
  assert rows["float32", "XLA"][2] == "1.00"
  assert float(rows["float32", "XLA"][0]) > 0
  for name, target in (("fp8_current", "0.27"), ("nvfp4", "0.16")):
    # As XLA gathers by itself: the float32 weight, then quantized.
    assert rows[name, "XLA"][2] == "1.00" and rows[name, "XLA"][3] == "-"
    ratio = float(rows[name, "narrow"][2])
    assert 0 < ratio <= float(target), out
    assert rows[name, "narrow"][3] == f"<= {target} met", out


@pytest.mark.parametrize("argv,option,reason", [
    (["--recipes", "nope"], "--recipes", "nope"),
    (["--width", "48"], "--width", "multiple of 16 x --devices = 64"),
    (["--batch", "8"], "--batch", ">= 16"),
    (["--devices", "1"], "--devices", ">= 2"),
])
def test_bad_bench_fsdp_option_is_a_usage_error(argv, option, reason,
                                                 capsys):
  with pytest.raises(SystemExit) as info:
    cli.main(["bench", "fsdp", *argv])
  assert info.value.code == 2
  message = capsys.readouterr().err.strip().splitlines()[-1]
  assert message.startswith("jaxfp8 bench fsdp: error:"), message
  assert option in message and reason in message, message
