"""Every public name (each public module's ``__all__``) still exists, with the
same signature: the list is held in ``public_api.json`` beside this file.

Adding a public name is fine (the test lists what is new only as a hint to
update the file); removing or re-signing one fails. Regenerate the file, after
a deliberate change, with ``python tests/test_public_api.py --write``.
"""
from __future__ import annotations

import importlib
import inspect
import json
import pathlib
import re
import sys
import typing

import pytest

PUBLIC_MODULES = (
    "jaxfp8", "jaxfp8.formats", "jaxfp8.random", "jaxfp8.nn",
    "jaxfp8.nn.initializers", "jaxfp8.policy", "jaxfp8.scaling",
    "jaxfp8.optim", "jaxfp8.mx", "jaxfp8.ops", "jaxfp8.es", "jaxfp8.checkpoint",
    "jaxfp8.recipes",
)
_FILE = pathlib.Path(__file__).with_name("public_api.json")
# Deprecated aliases are public names too: reading them warns by design.
pytestmark = pytest.mark.filterwarnings(
    "ignore:jaxfp8.* is deprecated:DeprecationWarning")


def _describe(obj) -> str:
  """A stable description of a public object: kind and signature."""
  if inspect.ismodule(obj):
    return f"module {obj.__name__}"
  kind = "class" if inspect.isclass(obj) else type(obj).__name__
  if callable(obj):
    try:  # object addresses in reprs of defaults vary between runs
      return re.sub(r" at 0x[0-9a-f]+", "",
                    f"{kind}{_signature(obj)}")
    except (TypeError, ValueError):
      return kind
  return kind


def _signature(obj) -> inspect.Signature:
  """``obj``'s signature with the annotations as written in jaxfp8 (strings
  or forward references: its modules postpone them); evaluated ones, which a class inherits from
  another library (QwixRecipeRule's Qwix fields) and whose text differs
  between Python versions (``Union[a, None]``, ``a | None``), left out."""
  sig = inspect.signature(obj)

  def keep(a, empty):
    if isinstance(a, typing.ForwardRef):  # a NamedTuple's postponed ones
      return a.__forward_arg__
    return a if isinstance(a, str) else empty

  return sig.replace(
      parameters=[p.replace(annotation=keep(p.annotation, p.empty))
                  for p in sig.parameters.values()],
      return_annotation=keep(sig.return_annotation, sig.empty))


def current_api() -> dict[str, dict[str, str]]:
  api = {}
  for name in PUBLIC_MODULES:
    mod = importlib.import_module(name)
    api[name] = {n: _describe(getattr(mod, n)) for n in sorted(mod.__all__)}
  return api


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_public_names_kept(module):
  held = json.loads(_FILE.read_text())[module]
  now = current_api()[module]
  missing = sorted(set(held) - set(now))
  assert not missing, f"{module} lost public names: {missing}"
  changed = {n: (held[n], now[n]) for n in held if held[n] != now[n]}
  assert not changed, f"{module}: signatures changed (held, now): {changed}"


if __name__ == "__main__":
  if sys.argv[1:] == ["--write"]:
    _FILE.write_text(json.dumps(current_api(), indent=1, sort_keys=True) + "\n")
