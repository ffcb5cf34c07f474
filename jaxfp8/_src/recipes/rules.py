"""Rules: which recipe each layer of a model trains with.

Rules are ``(regex, recipe)`` pairs, matched in order with ``re.search``
against a layer's module path joined by ``/`` (``"Dense_0"``,
``"block/attn/query"``). The first match decides; a recipe of None keeps the
layer in high precision (its own ``dot_general``, untouched), and a path no
rule matches stays as it is too. One recipe alone (a name or a recipe
object) stands for ``[(".*", recipe)]``: every layer.

This is the one place that reads rules, for every kind of recipe: the
callers pass the function that reads one recipe (the core's
:func:`~jaxfp8._src.recipes.registry.get_recipe`, or MX's
:func:`~jaxfp8._src.recipes.mx_recipe.get_recipe`) and the recipe that None means
for the whole rule set. The Flax integrations
(:mod:`jaxfp8._src.faces.linen`, :mod:`jaxfp8._src.faces.nnx` and the MX
ones built on them) apply them.
"""
from __future__ import annotations

import re
from typing import Any, Callable

Rules = list[tuple[re.Pattern, Any]]


def check_rules(rules: Any, *, fn: str, get: Callable[[Any], Any],
                default: Any) -> Rules:
  """Rules as compiled ``(pattern, recipe or None)`` pairs.

  Args:
    rules: ``(regex, recipe)`` pairs (a list or tuple of them), one recipe
      for every layer, or None for ``default`` everywhere.
    fn: the public function, for error messages.
    get: reads one recipe (a name, an object) into the recipe type the
      caller multiplies with; its errors pass through.
    default: the recipe for ``rules=None``.

  Returns:
    The rules, each recipe read by ``get``; None stays None.

  Raises:
    ValueError: for an entry that is not a ``(regex, recipe)`` pair or a bad
      regex (and whatever ``get`` raises for a bad recipe).

  >>> rules = check_rules([("head", None), (".*", "x")], fn="f",
  ...                     get=str.upper, default="y")
  >>> [(p.pattern, r) for p, r in rules]
  [('head', None), ('.*', 'X')]
  >>> [(p.pattern, r) for p, r in check_rules(None, fn="f", get=str.upper,
  ...                                          default="y")]
  [('.*', 'Y')]
  """
  if rules is None:
    rules = default
  if not isinstance(rules, (list, tuple)):
    rules = [(".*", rules)]
  out = []
  for rule in rules:
    if not (isinstance(rule, (list, tuple)) and len(rule) == 2
            and isinstance(rule[0], (str, re.Pattern))):
      raise ValueError(f"`rules` argument to `{fn}` must be (regex, recipe) "
                       f"pairs or one recipe, got the entry {rule!r}")
    pattern, recipe = rule
    try:
      pattern = re.compile(pattern)
    except re.error as e:
      raise ValueError(f"`rules` argument to `{fn}`: bad regex "
                       f"{pattern!r}: {e}") from e
    out.append((pattern, None if recipe is None else get(recipe)))
  return out


def layer_recipe(rules: Rules, path: str) -> Any:
  """The recipe of the layer at ``path``: the first matching rule's, or None
  (no rule matches, or the rule says high precision).

  Args:
    rules: from :func:`check_rules`.
    path: the layer's module path, joined by ``/``.

  >>> import re
  >>> rules = [(re.compile("head"), None), (re.compile("Dense"), "fp8")]
  >>> layer_recipe(rules, "Dense_0"), layer_recipe(rules, "Dense_head")
  ('fp8', None)
  >>> layer_recipe(rules, "Einsum_0") is None
  True
  """
  for pattern, recipe in rules:
    if pattern.search(path):
      return recipe
  return None
