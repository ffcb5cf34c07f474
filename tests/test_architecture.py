"""The package's layout rules, checked on the source (AST), not by convention.

- No module of ``jaxfp8`` uses another module's ``_private`` name (an import
  of it, or ``module._name`` on an imported jaxfp8 module).
- No import cycle among jaxfp8's modules (every import counts, also those
  inside functions).
- ``jaxfp8/_src`` imports neither the public modules nor the tools; the
  library never imports ``jaxfp8.tools``.
- Every module of ``jaxfp8/_src`` has at most 500 lines.
- Flax, Haiku, Equinox, orbax, evosax, gymnax and spyx are imported only by
  integration modules.
- No folder of ``jaxfp8`` holds three or more modules sharing a name prefix
  (``mx_quantize``, ``mx_pack``, ``mx_train`` want a folder ``mx/``).
- The domains of ``jaxfp8/_src`` (its folders, and its top-level modules)
  stand in one declared order, :data:`DOMAIN_ORDER`: a module imports its
  own domain and domains of lower levels only, so no two domains import each
  other and a wrapper placed in a folder below what it wraps fails here.
"""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jaxfp8"
MAX_LINES = 500
# Modules that may import a framework (each integrates jaxfp8 with one).
INTEGRATIONS = {
    "jaxfp8._src.checkpoint", "jaxfp8._src.compat", "jaxfp8._src.es.evosax_strategy",
    "jaxfp8._src.deprecated.fp8_flax",
    "jaxfp8._src.install.api", "jaxfp8._src.deprecated.mx_flax", "jaxfp8._src.deprecated.mx_flax",
    "jaxfp8._src.faces.linen", "jaxfp8._src.faces.nnx",
}
FRAMEWORKS = ("flax", "haiku", "equinox", "orbax", "evosax", "gymnax", "spyx")

# The domains of jaxfp8/_src, lowest first: a domain imports only its own
# modules and those of lower levels (domains on one level are independent).
DOMAIN_ORDER: tuple[tuple[str, ...], ...] = (
    ("compat", "deprecation"),      # JAX-version shims; the alias helper
    ("numerics",),                  # formats, rounding, casts, codes
    ("random", "mx", "fp8"),        # samplers; block formats and quantizers;
                                    # per-tensor scaling, policies, optax
    ("nn", "kernels"),              # initializers; GEMM kernels by op
    ("recipes", "install"),         # the training core; install()
    ("faces",),                     # the Flax faces of the recipes
    ("es", "checkpoint", "deprecated"),  # applications; old names
)
LEVEL = {d: i for i, level in enumerate(DOMAIN_ORDER) for d in level}


def _module_name(path: pathlib.Path) -> str:
  parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


SOURCES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
TREES = {name: ast.parse(p.read_text(), str(p)) for name, p in SOURCES.items()}


def _resolve(module: str, node: ast.ImportFrom) -> str:
  if not node.level:
    return node.module or ""
  base = module.split(".")
  if not SOURCES[module].name == "__init__.py":
    base = base[:-1]
  base = base[:len(base) - node.level + 1]
  return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str) -> list[tuple[str, int]]:
  """(imported jaxfp8 module, line) for every import in ``module``."""
  out = []
  for node in ast.walk(TREES[module]):
    if isinstance(node, ast.Import):
      out += [(a.name, node.lineno) for a in node.names
              if a.name.split(".")[0] == "jaxfp8"]
    elif isinstance(node, ast.ImportFrom):
      target = _resolve(module, node)
      if target.split(".")[0] != "jaxfp8":
        continue
      for a in node.names:
        sub = f"{target}.{a.name}"
        out.append((sub if sub in SOURCES else target, node.lineno))
  return out


def _domain(module: str) -> str | None:
  """The domain of a module of jaxfp8/_src (its folder, or for a top-level
  module its name), None outside jaxfp8/_src."""
  parts = module.split(".")
  if parts[:2] != ["jaxfp8", "_src"] or len(parts) < 3:
    return None
  return parts[2]


def _layer_violations(module: str) -> list[str]:
  """Imports of ``module`` that reach a domain not below its own."""
  own = _domain(module)
  if own is None:
    return []
  bad = []
  for target, line in _imports(module):
    other = _domain(target)
    if other is None or other == own:
      continue
    if LEVEL[other] >= LEVEL[own]:
      bad.append(f"line {line}: {target} ({other}, level {LEVEL[other]}; "
                 f"{own} is level {LEVEL[own]})")
  return bad


def _private_uses(module: str) -> list[str]:
  found = []
  aliases = {}  # local name -> jaxfp8 module it is bound to
  for node in ast.walk(TREES[module]):
    if isinstance(node, ast.ImportFrom):
      target = _resolve(module, node)
      if target.split(".")[0] != "jaxfp8":
        continue
      for a in node.names:
        if a.name.startswith("_") and not a.name.startswith("__"):
          found.append(f"line {node.lineno}: from {target} import {a.name}")
        if f"{target}.{a.name}" in SOURCES:
          aliases[a.asname or a.name] = f"{target}.{a.name}"
    elif isinstance(node, ast.Import):
      for a in node.names:
        if a.name.split(".")[0] == "jaxfp8" and a.asname:
          aliases[a.asname] = a.name
  def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")

  def dotted(node) -> str | None:
    """``a.b.c`` of a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
      parts.append(node.attr)
      node = node.value
    if not isinstance(node, ast.Name):
      return None
    return ".".join([node.id, *reversed(parts)])

  for node in ast.walk(TREES[module]):
    if isinstance(node, ast.Attribute) and private(node.attr):
      owner = dotted(node.value)
      full = f"{owner}.{node.attr}"
      if any(m == full or m.startswith(full + ".") for m in SOURCES):
        continue  # a module path (jaxfp8._src...), not a private name
      if owner in aliases:
        found.append(f"line {node.lineno}: {owner}.{node.attr} "
                     f"({aliases[owner]})")
      elif owner and owner.split(".")[0] == "jaxfp8" and owner in SOURCES:
        found.append(f"line {node.lineno}: {owner}.{node.attr}")
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id == "getattr" and len(node.args) >= 2
          and isinstance(node.args[1], ast.Constant)
          and isinstance(node.args[1].value, str)
          and private(node.args[1].value)):
      owner = dotted(node.args[0])
      if owner in aliases or (owner or "").split(".")[0] == "jaxfp8":
        found.append(f"line {node.lineno}: getattr({owner}, "
                     f"{node.args[1].value!r})")
  return found


@pytest.mark.parametrize("module", sorted(SOURCES))
def test_no_private_names_of_other_modules(module):
  assert not _private_uses(module), _private_uses(module)


def test_no_import_cycle():
  graph = {m: {t for t, _ in _imports(m) if t in SOURCES and t != m}
           for m in SOURCES}
  state, stack, cycles = {}, [], []

  def visit(m):
    state[m] = 1
    stack.append(m)
    for t in sorted(graph[m]):
      if state.get(t) == 1:
        cycles.append(stack[stack.index(t):] + [t])
      elif t not in state:
        visit(t)
    stack.pop()
    state[m] = 2

  for m in sorted(graph):
    if m not in state:
      visit(m)
  assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("module", sorted(m for m in SOURCES
                                          if m.startswith("jaxfp8._src")))
def test_src_imports_only_src(module):
  bad = [f"line {line}: {t}" for t, line in _imports(module)
         if not t.startswith("jaxfp8._src")]
  assert not bad, f"{module} imports public modules or tools: {bad}"


def test_every_domain_is_declared():
  domains = {_domain(m) for m in SOURCES} - {None, "__init__"}
  assert domains == set(LEVEL), (
      f"undeclared: {sorted(domains - set(LEVEL))}; declared but absent: "
      f"{sorted(set(LEVEL) - domains)}")


@pytest.mark.parametrize("module", sorted(m for m in SOURCES
                                          if m.startswith("jaxfp8._src.")))
def test_domains_import_only_lower_ones(module):
  bad = _layer_violations(module)
  assert not bad, f"{module} imports a domain not below its own: {bad}"


@pytest.mark.parametrize("domain, source, bad", [
    # An MX module wrapping the recipe core, as mx/train.py once did.
    ("mx", "from jaxfp8._src.recipes import core\n", 1),
    ("kernels", "import jaxfp8._src.faces.linen\n", 1),
    # fp8 and mx share a level: independent, so an import between them fails.
    ("mx", "from jaxfp8._src.fp8.scaling import amax\n", 1),
    # Its own domain and lower ones are fine.
    ("mx", "from jaxfp8._src.mx import bits\nfrom jaxfp8._src import compat\n"
     "from jaxfp8._src.numerics import cast\n", 0),
])
def test_the_order_check_sees_an_upward_import(domain, source, bad):
  """The domain check fails a module that imports upward: a probe module fed
  to the checker, as a wrapper placed in a folder too low would be."""
  name = f"jaxfp8._src.{domain}.__probe__"
  TREES[name] = ast.parse(source)
  SOURCES[name] = ROOT / "_src" / domain / "probe.py"
  try:
    assert len(_layer_violations(name)) == bad, _layer_violations(name)
  finally:
    del TREES[name], SOURCES[name]


@pytest.mark.parametrize("module", sorted(m for m in SOURCES
                                          if not m.startswith("jaxfp8.tools")))
def test_library_never_imports_tools(module):
  bad = [f"line {line}: {t}" for t, line in _imports(module)
         if t.startswith("jaxfp8.tools")]
  if module == "jaxfp8.__main__":  # `python -m jaxfp8` is the command
    bad = [b for b in bad if not b.endswith("jaxfp8.tools.cli")]
  assert not bad, bad


@pytest.mark.parametrize("module", sorted(m for m in SOURCES
                                          if m.startswith("jaxfp8._src")))
def test_module_size(module):
  n = len(SOURCES[module].read_text().splitlines())
  assert n <= MAX_LINES, f"{module} has {n} lines (at most {MAX_LINES})"


@pytest.mark.parametrize("module", sorted(m for m in SOURCES
                                          if m.startswith("jaxfp8._src")))
def test_frameworks_only_in_integration_modules(module):
  if module in INTEGRATIONS:
    return
  bad = []
  for node in ast.walk(TREES[module]):
    names = ([a.name for a in node.names] if isinstance(node, ast.Import)
             else [node.module or ""] if isinstance(node, ast.ImportFrom)
             and not node.level else [])
    bad += [f"line {node.lineno}: {n}" for n in names
            if n.split(".")[0] in FRAMEWORKS]
  assert not bad, f"{module} imports a framework: {bad}"


def _shared_prefixes(stems) -> dict[str, list[str]]:
  """prefix -> modules, for prefixes (the name up to its first ``_``) that
  three or more of ``stems`` share."""
  groups: dict[str, list[str]] = {}
  for stem in sorted(stems):
    if stem != "__init__":
      groups.setdefault(stem.split("_")[0], []).append(stem)
  return {k: v for k, v in groups.items() if len(v) >= 3}


FOLDERS = sorted({p.parent for p in SOURCES.values()})


@pytest.mark.parametrize("folder", FOLDERS,
                         ids=lambda f: str(f.relative_to(ROOT.parent)))
def test_no_folder_holds_a_prefix_family(folder):
  shared = _shared_prefixes(p.stem for p in folder.glob("*.py"))
  assert not shared, f"{folder.relative_to(ROOT.parent)}: make a folder of {shared}"


def test_the_checks_see_violations():
  """The scanners find what they look for (a test that can fail)."""
  tree = ast.parse("from jaxfp8._src.numerics import cast as c\nc._x\n"
                   "from jaxfp8._src.numerics.cast import _y\n"
                   "getattr(c, '_z')\nimport jaxfp8._src.numerics.cast\n"
                   "jaxfp8._src.numerics.cast._w\n")
  TREES["jaxfp8._src.__probe__"] = tree
  SOURCES["jaxfp8._src.__probe__"] = ROOT / "_src" / "probe.py"
  try:
    assert len(_private_uses("jaxfp8._src.__probe__")) == 4
  finally:
    del TREES["jaxfp8._src.__probe__"], SOURCES["jaxfp8._src.__probe__"]
  assert _shared_prefixes(["mx", "mx_pack", "mx_train", "fp8_dot",
                           "fp8_flax", "__init__"]) == {
                               "mx": ["mx", "mx_pack", "mx_train"]}
