"""The ``table`` method: the law of a ``2^k``-entry quantile table.

For a resolution of ``2^-k`` (``k = table_bits``, 16 by default, 1 .. 16) the
table has ``2^k`` entries; entry ``j`` is the code of the value whose rounding
interval holds the quantile at ``(j + 1/2) / 2^k``. A sample is one lookup
with ``k`` uniform bits (fewer when the table's law is dyadic at a coarser
resolution; two 16-bit draws to a word, three of 9 or 10 bits). Its law is
the exact rounded law with the CDF at every rounding boundary rounded to a
multiple of ``2^-k``: each value's probability is off by less than ``2^-k``,
and values whose probability is below about ``2^-(k+1)`` may never appear.
Use ``exact`` when the tails matter.

The same law drawn by the DDG tree of :mod:`exact_method` takes fewer bits
(9.9 against 16 for normal in float8_e4m3fn) but measured 3.4x the time on
CPU (15.6 ms against 4.6 ms for 2^22 samples, JAX 0.10.2): its pooled second
byte needs a rank and a gather for every sample. So the table method looks up.
"""
from __future__ import annotations

import functools

import numpy as np

from jaxfp8._src import formats
from jaxfp8._src import laws
from jaxfp8._src.random import common
from jaxfp8._src.random import exact_method

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
                  ) -> exact_method.TreePlan:
  """How the table's law is drawn: one lookup, of the fewest bits that hold
  it (its law is dyadic at ``2^-table_bits`` or coarser), widened to the
  widest lookup that costs the same words (9 bits cost as much as 10).
  """
  fmt = formats.get(fmt_name)
  _, probs = table_law(dist, fmt, table_bits=table_bits, **dict(params))
  q = np.round(probs * 2.0**32).astype(np.int64)
  width = exact_method.free_width(next(
      w for w in range(1, table_bits + 1) if np.all(q % (1 << (32 - w)) == 0)))
  return exact_method.TreePlan(
      "pure", width, np.repeat(common.codes_table(fmt), q >> (32 - width)))


def bits_per_sample(dist: str, fmt: formats.Format, params: dict,
                    table_bits: int = DEFAULT_BITS,
                    n: int = exact_method.REFERENCE_N) -> float:
  """Random bits spent per sample by a call of ``n`` samples (2^22 unless
  given), counting every word drawn."""
  return exact_method.plan_bits(sampling_plan(
      dist, fmt.name, tuple(sorted(params.items())), table_bits), n)


def sample(key, dist: str, shape: tuple[int, ...], fmt: formats.Format,
           params: dict[str, float], table_bits: int = DEFAULT_BITS):
  """Table samples of ``dist`` (concrete scalar ``params``) in ``fmt``."""
  p = sampling_plan(dist, fmt.name, tuple(sorted(params.items())), table_bits)
  return exact_method.sample_plan(key, p, shape, fmt)
