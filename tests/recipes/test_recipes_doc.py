"""docs/recipes.md's table of GEMMs is the registry's: one row per recipe."""
from __future__ import annotations

import pathlib

from jaxfp8._src.recipes import registry

_PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "recipes.md"


def _operand(q) -> str:
  """One operand as the page writes it: format, scaling, blocks, SR, RHT."""
  if q is None:
    return "hp"
  text = q.format
  if q.kind == "tensor":
    text += " delayed" if q.delayed else " current"
  if q.kind in ("block", "nvfp4"):
    text += f" {q.block[0]}x{q.block[1]}"
  if q.rounding == "stochastic":
    text += " SR"
  if q.transform:
    text += f" {q.transform.upper()}"
  return text


def _row(name: str) -> str:
  recipe = registry.get_recipe(name)
  cells = [" . ".join(_operand(q) for q in getattr(recipe, g))
           for g in ("fwd", "dgrad", "wgrad")]
  return f"| `{name}` | " + " | ".join(cells) + " |"


def test_every_named_recipe_has_its_row():
  lines = _PAGE.read_text(encoding="utf-8").splitlines()
  table = [line for line in lines if line.startswith("| `")
           and line.count("|") == 5]
  assert table == [_row(n) for n in registry.RECIPES], (
      "docs/recipes.md: the GEMM table differs from the registry; rows "
      "expected:\n" + "\n".join(_row(n) for n in registry.RECIPES))
