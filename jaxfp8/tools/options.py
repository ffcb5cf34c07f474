"""Option parsing shared by the tools' command lines."""
from __future__ import annotations

import argparse
from typing import Callable


def int_at_least(low: int) -> Callable[[str], int]:
  """An argparse ``type`` accepting integers ``>= low``.

  argparse prefixes its message with the option, so the error reads
  ``argument --repeats: must be an integer >= 1, got '0'``.

  >>> int_at_least(1)("3")
  3
  >>> int_at_least(1)("0")
  Traceback (most recent call last):
  ...
  argparse.ArgumentTypeError: must be an integer >= 1, got '0'
  """
  def parse(text: str) -> int:
    try:
      value = int(text)
    except ValueError:
      value = None
    if value is None or value < low:
      raise argparse.ArgumentTypeError(
          f"must be an integer >= {low}, got {text!r}")
    return value
  parse.__name__ = f"integer >= {low}"  # argparse names the type with it
  return parse
