"""Generated docs pages are up to date with the code."""
import os

from jaxfp8.tools import docgen

DOCS = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "docs")


def test_generated_pages_are_current():
  for name, make in docgen.PAGES.items():
    with open(os.path.join(DOCS, name), encoding="utf-8") as fh:
      assert fh.read() == make(), (
          f"docs/{name} is stale: run `python -m jaxfp8 docs`")
