"""The ``table`` method: the law of a ``2^k``-entry quantile table.

For a resolution of ``2^-k`` (``k = table_bits``, 16 by default, 1 .. 16) the
table has ``2^k`` entries; entry ``j`` is the code of the value whose rounding
interval holds the quantile at ``(j + 1/2) / 2^k``, and a sample is a
uniform entry. Its law is the exact rounded law with the CDF at every
rounding boundary rounded to a multiple of ``2^-k``: each value's
probability is off by less than ``2^-k``, and values whose probability is
below about ``2^-(k+1)`` may never appear. Use ``exact`` when the tails
matter.

The table's law is drawn exactly by the plan of :mod:`tree_plan` that takes
the fewest random bits: a lookup of ``k`` bits when ``k <= 8`` (or when
the law is dyadic that coarsely), else the DDG tree of the table's masses
(two levels: 9.9 bits per sample for normal in float8_e4m3fn at ``k = 16``,
fewer than the exact method's 9.97; a 16-bit lookup took 16).
"""
from __future__ import annotations

import functools

import numpy as np

from jaxfp8._src.numerics import formats
from jaxfp8._src.random import common
from jaxfp8._src.random import exact_method
from jaxfp8._src.random import laws
from jaxfp8._src.random import tree_plan

DEFAULT_BITS = 16


def check_bits(table_bits, fn: str) -> int:
  """``table_bits`` as an int in 1 .. 16, else a ValueError naming it."""
  if (not isinstance(table_bits, (int, np.integer))
      or isinstance(table_bits, bool) or not 1 <= table_bits <= 16):
    raise ValueError(f"`table_bits` argument to `{fn}` must be an integer in "
                     f"1 .. 16, got {table_bits!r}")
  return int(table_bits)


@functools.lru_cache(maxsize=256)
def plan(dist: str, fmt_name: str, params: tuple[tuple[str, float], ...],
         table_bits: int) -> np.ndarray:
  """The ``2^table_bits``-entry table of codes (uint8)."""
  fmt = formats.get(fmt_name)
  _, probs = laws.rounded_law(dist, fmt, **dict(params))
  cdf = np.cumsum(probs)[:-1]  # at the boundaries between values
  mid = (np.arange(1 << table_bits) + 0.5) / (1 << table_bits)
  index = np.searchsorted(cdf, mid, side="right")
  return common.codes_table(fmt)[index]


def table_law(dist: str, fmt: formats.FormatLike, *, table_bits: int = 16,
              **params: float) -> tuple[np.ndarray, np.ndarray]:
  """``(values, probs)``: the law the table method samples (its own
  quantized law), over the same values as :func:`laws.rounded_law`."""
  fmt = formats.get(fmt)
  table_bits = check_bits(table_bits, "table_law")
  table = plan(dist, fmt.name, tuple(sorted(params.items())), table_bits)
  code_to_index = {int(c): i for i, c in enumerate(common.codes_table(fmt))}
  index = np.array([code_to_index[int(c)] for c in table])
  counts = np.bincount(index, minlength=len(fmt.values))
  return fmt.values, counts / float(1 << table_bits)


@functools.lru_cache(maxsize=256)
def sampling_plan(dist: str, fmt_name: str,
                  params: tuple[tuple[str, float], ...], table_bits: int
                  ) -> tree_plan.TreePlan:
  """How the table's law is drawn: the exact plan of its masses (multiples of
  ``2^-table_bits``) in the fewest bits (:func:`tree_plan.plan_for_masses`).
  """
  fmt = formats.get(fmt_name)
  _, probs = table_law(dist, fmt, table_bits=table_bits, **dict(params))
  q = np.round(probs * 2.0**32).astype(np.int64)
  return tree_plan.plan_for_masses(q, common.codes_table(fmt))


def bits_per_sample(dist: str, fmt: formats.Format, params: dict,
                    table_bits: int = DEFAULT_BITS,
                    n: int = tree_plan.REFERENCE_N) -> float:
  """Random bits spent per sample by a call of ``n`` samples (2^22 unless
  given), counting every word drawn."""
  return tree_plan.plan_bits(sampling_plan(
      dist, fmt.name, tuple(sorted(params.items())), table_bits), n)


def sample(key, dist: str, shape: tuple[int, ...], fmt: formats.Format,
           params: dict[str, float], table_bits: int = DEFAULT_BITS):
  """Table samples of ``dist`` (concrete scalar ``params``) in ``fmt``."""
  p = sampling_plan(dist, fmt.name, tuple(sorted(params.items())), table_bits)
  return exact_method.sample_plan(key, p, shape, fmt)
