"""examples/moe_lm.py --quick: the mixture-of-experts model trains under
every recipe asked for, its grouped GEMMs through the recipes."""
from __future__ import annotations

import math
import os
import re
import sys

from example_testing import named_values as _losses
from example_testing import ROOT as _ROOT
from example_testing import run_example

_NAMES = ("bf16", "fp8_delayed", "nvfp4")  # --quick's: stateless, state, keys


def test_quick_run_trains_every_recipe(tmp_path):
  proc = run_example("moe_lm.py", "--quick", cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = proc.stdout.strip().splitlines()
  final = _losses(lines[-2], "final_loss")
  held = _losses(lines[-1], "heldout_loss")
  ratio = _losses(lines[-3], "ratio_to_bf16")
  assert tuple(final) == tuple(held) == tuple(ratio) == _NAMES, lines[-3:]
  assert all(math.isfinite(v) for v in (*final.values(), *held.values()))
  first = {m.group(1): float(m.group(2)) for m in re.finditer(
      r"^\[(\w+)\] step 1/\d+ loss (\S+)$", proc.stdout, re.M)}
  assert tuple(first) == _NAMES, proc.stdout
  assert final["bf16"] < math.log(256) - 1.0, final
  for name in _NAMES:
    assert final[name] < first[name] - 1.0, (name, first, final)
  # The runs differ (each recipe's GEMMs are its own), and stay close.
  assert len(set(final.values())) == len(_NAMES), final
  assert all(abs(r - 1) < 0.1 for r in ratio.values()), ratio
  assert "8 experts (top 2)" in proc.stdout


def test_rules_give_the_experts_the_recipe_and_keep_routers_wide():
  sys.path.insert(0, os.path.join(_ROOT, "examples"))
  try:
    import moe_lm  # pylint: disable=g-import-not-at-top
  finally:
    sys.path.pop(0)
  from flax import nnx  # pylint: disable=g-import-not-at-top
  from jax import lax  # pylint: disable=g-import-not-at-top
  from jaxfp8 import recipes  # pylint: disable=g-import-not-at-top
  model = moe_lm.MoELM(width=16, layers=2, heads=2, seq=8, experts=4,
                       top_k=2, rngs=nnx.Rngs(0))
  recipes.nnx_recipe(model, moe_lm.rules("nvfp4", 2),
                     rngs=nnx.Rngs(recipe=1), experts=4)
  first, last = model.blocks[0].moe, model.blocks[1].moe
  assert isinstance(first.up, recipes.NnxRecipeRaggedDot)
  assert first.down.recipe.name == "nvfp4"
  assert last.up is lax.ragged_dot  # NVFP4's last block: high precision
  assert first.router.dot_general is lax.dot_general
  assert model.head.dot_general is lax.dot_general
