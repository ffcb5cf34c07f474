"""Docs pages generated from the registry (``python -m jaxfp8 docs``).

The test suite checks that the committed pages equal what this module writes,
so they can't drift from the code.
"""
from __future__ import annotations

import os

from jaxfp8._src.numerics import formats


def _num(v: float) -> str:
  return f"{v:.6g}"


def formats_markdown() -> str:
  """The formats reference page, one row per registered format."""
  head = ("| format | aliases | bits | exp | mant | bias | max | min normal "
          "| min subnormal | Inf | NaN codes | -0 | finite values |")
  lines = [
      "# Formats reference",
      "",
      "Generated from the registry by `python -m jaxfp8 docs`; do not edit.",
      "`jaxfp8.formats.get(name)` accepts the name, any alias, or the dtype.",
      "Whether the installed JAX can hold a format is found at run time",
      "(`Format.native`); float6 is stored as uint8 codes (`jaxfp8.CodeArray`)",
      "on every XLA today.",
      "",
      head,
      "|" + "|".join("---" for _ in range(head.count("|") - 1)) + "|",
  ]
  for f in formats.all_formats(narrow=True):
    nan = ", ".join(f"0x{c:02X}" for c in f.nan_codes) or "none"
    if len(f.nan_codes) > 4:
      nan = f"{len(f.nan_codes)} codes"
    lines.append(
        f"| `{f.name}` | {', '.join(f'`{a}`' for a in f.aliases)} | {f.bits} "
        f"| {f.exponent_bits} | {f.mantissa_bits} | {f.bias} | {_num(f.max)} "
        f"| {_num(f.min_normal)} | {_num(f.min_subnormal)} "
        f"| {'yes' if f.has_inf else 'no'} | {nan} "
        f"| {'yes' if f.has_negative_zero else 'no'} | {len(f.values)} |")
  lines += ["", "Wide formats: " + ", ".join(
      f"`{f.name}` ({', '.join(f.aliases)})"
      for f in formats.all_formats(narrow=False)) + "."]
  lines += [
      "", "## Rules every cast follows", "",
      "- Rounding modes: `nearest` (ties to even; E8M0, having no mantissa "
      "bit, sends ties up), `stochastic`, `down`, `up`, `toward_zero`.",
      "- `saturate=True` (default): finite overflow and +-Inf become +-max.",
      "- `saturate=False`: overflow gives Inf where the format has it, else "
      "NaN; formats with neither (float6, float4) saturate anyway.",
      "- NaN stays NaN; formats without NaN take NaN to -0 (as ml_dtypes).",
      "- E8M0 is unsigned and has no zero: 0, negatives and NaN give NaN "
      "(0xFF); values below 2^-127 give 2^-127.",
      ""]
  return "\n".join(lines)


PAGES = {"formats.md": formats_markdown}


def write_all(out_dir: str) -> list[str]:
  os.makedirs(out_dir, exist_ok=True)
  paths = []
  for name, make in PAGES.items():
    path = os.path.join(out_dir, name)
    with open(path, "w", encoding="utf-8") as fh:
      fh.write(make())
    paths.append(path)
  return paths
