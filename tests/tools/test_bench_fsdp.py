"""``python -m jaxfp8 bench fsdp``: the bytes an FSDP step gathers."""
from __future__ import annotations

import pytest

from jaxfp8.tools import cli


def test_bench_fsdp_quick_reports_each_recipe_against_float32(capfd):
  # One simulated process of 4 devices (the suite's has 1): it runs itself
  # again in a subprocess, whose table reaches the file descriptors.
  assert cli.main(["bench", "fsdp", "--quick"]) == 0
  out = capfd.readouterr().out
  rows = {line.split("|")[1].strip(): [c.strip() for c in
                                       line.split("|")[2:-1]]
          for line in out.splitlines()
          if line.startswith("| ") and not line.startswith("| recipe")}
  assert list(rows) == ["float32", "fp8_current", "nvfp4"], out
  assert rows["float32"][2] == "1.00" and float(rows["float32"][0]) > 0
  for name, target in (("fp8_current", "0.27"), ("nvfp4", "0.16")):
    ratio = float(rows[name][2])
    assert 0 < ratio <= 1.0, out
    assert rows[name][3].startswith(f"<= {target}"), out
    assert rows[name][3].endswith("met"), out


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
