"""What users read carries no lab notebook; the code's comments no figures.

- README.md and docs/*.md (the benchmark log, docs/benchmarks/, aside) name no
  commit and give no time of day: a page holds one current table with its
  date, machine and versions; the history of runs is the log's.
- No dated paragraph in those pages: a date stands only in a table, a
  heading, or a caption: a paragraph directly above the table or code block
  it dates, holding the date as a label (``2026-12-02, Zen 3:`` or
  ``(2026-12-02, CPU)``, the date followed by a comma or a parenthesis), not
  in a sentence (``On 2026-12-02 we ...``); dated narrative goes to the log.
- No comment or docstring under ``jaxfp8/`` (the bench tools aside) carries a
  date or a millisecond timing: comments say why; measured figures, with their
  date and machine, go to docs/benchmarks/log.md.
"""
from __future__ import annotations

import ast
import io
import pathlib
import re
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
USER_DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
# A commit id: 7 to 40 hex digits holding a digit and a letter.
COMMIT = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
TIME_OF_DAY = re.compile(r"\b([01]?\d|2[0-3]):[0-5]\d(:[0-5]\d)?\b")
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
# A date as a caption's label: "2026-12-02, Zen 3" or "(2026-12-02)".
DATE_LABEL = re.compile(DATE.pattern + r"[,)]")
# A timing: "9.0 ms", "13 ns per word", or the unit alone ("ms at 4096").
TIMING = re.compile(r"\d\s*(ms|ns|us|µs)\b|\bms\b")
SOURCES = sorted(p for p in (ROOT / "jaxfp8").rglob("*.py")
                 if "bench" not in p.relative_to(ROOT / "jaxfp8").parts)


def _notebook_lines(text: str) -> list[str]:
  return [f"line {i}: {line.strip()}"
          for i, line in enumerate(text.splitlines(), 1)
          if COMMIT.search(line) or TIME_OF_DAY.search(line)]


def _figures(source: str) -> list[str]:
  """Comments and docstrings of ``source`` that hold a date or a timing."""
  texts = [(tok.start[0], tok.string) for tok in
           tokenize.generate_tokens(io.StringIO(source).readline)
           if tok.type == tokenize.COMMENT]
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                         ast.AsyncFunctionDef)):
      doc = ast.get_docstring(node, clean=False)
      if doc:
        texts.append((node.body[0].lineno, doc))
  return [f"line {line}: {' '.join(text.split())[:120]}"
          for line, text in sorted(texts)
          if DATE.search(text) or TIMING.search(text)]


def _blocks(text: str) -> list[tuple[str, int, str]]:
  """``(kind, first line, text)`` of a markdown page's blocks: ``"prose"``
  paragraphs, ``"table"`` rows, ``"code"`` fences, ``"heading"`` lines."""
  blocks, prose, start, fence = [], [], 0, False

  def flush():
    if prose:
      blocks.append(("prose", start, " ".join(prose)))
      prose.clear()

  for n, line in enumerate(text.splitlines(), 1):
    stripped = line.strip()
    if stripped.startswith("```"):
      flush()
      if not fence:
        blocks.append(("code", n, line))
      fence = not fence
    elif fence:
      continue
    elif not stripped:
      flush()
    elif stripped.startswith("|") or line.startswith("#"):
      flush()
      blocks.append(("table" if stripped.startswith("|") else "heading", n,
                     line))
    else:
      if not prose:
        start = n
      prose.append(stripped)
  flush()
  return blocks


def _is_caption(blocks, i: int) -> bool:
  """Block ``i`` directly precedes a table or code block and labels it with
  its dates (each followed by a comma or a parenthesis)."""
  body = blocks[i][2]
  return (i + 1 < len(blocks) and blocks[i + 1][0] in ("table", "code")
          and len(DATE.findall(body)) == len(DATE_LABEL.findall(body)))


def _dated_paragraphs(text: str) -> list[str]:
  """Prose paragraphs holding a date that are no caption of a table or
  code block."""
  blocks = _blocks(text)
  return [f"line {line}: {body[:100]}"
          for i, (kind, line, body) in enumerate(blocks)
          if kind == "prose" and DATE.search(body)
          and not _is_caption(blocks, i)]


def test_the_dated_paragraph_check_sees_one():
  page = ("# Speed\n\n2026-12-02, Zen 3:\n\n| a | b |\n|---|---|\n\n"
          "On 2026-12-03 we made it faster.\n\nNo date here.\n\n"
          "Its output (2026-12-04, CPU):\n\n```\nloss=1\n```\n\n"
          "On 2026-12-05 we ran it again:\n\n| a |\n|---|\n\n"
          "## 2026-12-06\n\n| a |\n|---|\n")
  assert _dated_paragraphs(page) == [
      "line 8: On 2026-12-03 we made it faster.",
      "line 18: On 2026-12-05 we ran it again:"]


@pytest.mark.parametrize("path", USER_DOCS, ids=lambda p: p.name)
def test_user_docs_hold_no_dated_paragraph(path):
  bad = _dated_paragraphs(path.read_text(encoding="utf-8"))
  assert not bad, (f"{path.relative_to(ROOT)}: a dated paragraph; keep the "
                   f"date in a table or its caption, or move it to "
                   f"docs/benchmarks/log.md: {bad}")


@pytest.mark.parametrize("path", USER_DOCS, ids=lambda p: p.name)
def test_user_docs_name_no_commit_and_no_time_of_day(path):
  bad = _notebook_lines(path.read_text(encoding="utf-8"))
  assert not bad, f"{path.relative_to(ROOT)}: move to docs/benchmarks/log.md: {bad}"


@pytest.mark.parametrize("path", SOURCES,
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_comments_carry_no_dates_or_timings(path):
  bad = _figures(path.read_text(encoding="utf-8"))
  assert not bad, f"{path.relative_to(ROOT)}: figures belong in the log: {bad}"


def test_the_checks_see_violations():
  """Each scanner finds what it looks for (tests that can fail)."""
  assert _notebook_lines("at 8c626e0, ended 09:31 UTC\n0x7F800000 e4m3fn")
  assert len(_notebook_lines("commit b23f089\nended 09:31\n448 x 2688")) == 2
  assert not _notebook_lines("0x7F800000, float8_e4m3fn, 4096 x 4096, 1:1")[1:]
  source = ('"""Doc 2026-12-02."""\nx = 1  # 9.0 ms against 19.7\n'
            'y = 2  # (ms at 4096 x 4096)\nz = 3  # 13 ns per word\n'
            'def f():\n  """Fine: why XLA needs it."""\n  return "12 ms"\n')
  assert [b.split(":")[0] for b in _figures(source)] == [
      "line 1", "line 2", "line 3", "line 4"]
