"""``python -m jaxfp8 bench train``: it runs; bad options are usage errors."""
from __future__ import annotations

import pytest

from jaxfp8.tools import cli


def test_bench_train_quick_times_each_recipe_against_bf16(capsys):
  assert cli.main(["bench", "train", "--quick", "--recipes",
                   "fp8_delayed,nvfp4"]) == 0
  out = capsys.readouterr().out
  rows = [line.split("|")[1].strip() for line in out.splitlines()
          if line.startswith("| ") and not line.startswith("| recipe")]
  assert rows == ["float32", "bf16", "fp8_delayed", "nvfp4"], out
  assert "| bf16 |" in out and "| 1.00x |" in out


def test_bench_train_moe_times_the_grouped_step(capsys):
  assert cli.main(["bench", "train", "--quick", "--moe", "--experts", "4",
                   "--recipes", "fp8_delayed,mxfp8"]) == 0
  out = capsys.readouterr().out
  assert "2 grouped layers of 4 experts 64 x 64 (rows per expert [" in out
  rows = [line.split("|")[1].strip() for line in out.splitlines()
          if line.startswith("| ") and not line.startswith("| recipe")]
  assert rows == ["float32", "bf16", "fp8_delayed", "mxfp8"], out


@pytest.mark.parametrize("argv,option,reason", [
    (["--recipes", "nope"], "--recipes", "nope"),
    (["--recipes", ","], "--recipes", "recipe names"),
    (["--width", "40"], "--width", "multiple of 16"),
    (["--batch", "8"], "--batch", ">= 16"),
    (["--repeats", "0"], "--repeats", ">= 1"),
    (["--moe", "--experts", "0"], "--experts", ">= 1"),
])
def test_bad_bench_train_option_is_a_usage_error(argv, option, reason,
                                                  capsys):
  with pytest.raises(SystemExit) as info:
    cli.main(["bench", "train", *argv])
  assert info.value.code == 2
  message = capsys.readouterr().err.strip().splitlines()[-1]
  assert message.startswith("jaxfp8 bench train: error:"), message
  assert option in message and reason in message, message
