"""The ``table`` method: one lookup per sample in a quantile table.

For a resolution of ``2^-k`` (``k = table_bits``, 16 by default, 1 .. 16) the
table has ``2^k`` entries; entry ``j`` is the code of the value whose rounding
interval holds the quantile at ``(j + 1/2) / 2^k``. A sample draws ``k``
random bits (``32 // k`` draws per 32-bit word; fewer when the table is
constant on aligned blocks) and gathers one byte. Its
law is the exact rounded law with the CDF at every rounding boundary rounded
to a multiple of ``2^-k``: each value's probability is off by less than
``2^-k``, and values whose probability is below about ``2^-(k+1)`` may never
appear. The cheapest method; use ``exact``
when the tails matter.
"""
from __future__ import annotations

import functools

import jax
import numpy as np

from jaxfp8._src import codes as codes_lib
from jaxfp8._src import formats
from jaxfp8._src import laws
from jaxfp8._src.random import bits as bits_lib
from jaxfp8._src.random import common

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


@functools.partial(jax.jit, static_argnames=("fmt_name", "shape",
                                             "table_bits"))
def _sample(key, table, *, fmt_name, shape, table_bits):
  fmt = formats.get(fmt_name)
  n, n_pad = bits_lib.padded_size(shape, 4)
  codes = table[bits_lib.packed(key, n_pad, table_bits)]
  return codes_lib.from_codes(codes[:n].reshape(shape), fmt)


@functools.lru_cache(maxsize=256)
def _compact(dist: str, fmt_name: str, params: tuple[tuple[str, float], ...],
             table_bits: int) -> np.ndarray:
  """The table with runs of equal entries merged, as far as that saves words.

  If the table is constant on aligned blocks of ``2^(k - w)`` entries, the
  ``2^w``-entry table of one entry per block has exactly the same law and
  needs ``w`` bits (U[0, 1) in float8_e4m3fn: 10).
  """
  table = plan(dist, fmt_name, params, table_bits)
  width = table_bits
  while width > 1 and np.all(table.reshape(-1, 2)[:, 0]
                             == table.reshape(-1, 2)[:, 1]):
    table, width = table[::2], width - 1
  free = max(w for w in range(width, table_bits + 1)
             if bits_lib.per_word(w) == bits_lib.per_word(width))
  return plan(dist, fmt_name, params, table_bits)[::1 << (table_bits - free)]


def bits_per_sample(dist: str, fmt: formats.Format, params: dict,
                    table_bits: int = DEFAULT_BITS) -> float:
  """Random bits spent per sample (before padding to whole words)."""
  table = _compact(dist, fmt.name, tuple(sorted(params.items())), table_bits)
  return 32 / bits_lib.per_word(len(table).bit_length() - 1)


def sample(key, dist: str, shape: tuple[int, ...], fmt: formats.Format,
           params: dict[str, float], table_bits: int = DEFAULT_BITS):
  """Table samples of ``dist`` (concrete scalar ``params``) in ``fmt``."""
  table = _compact(dist, fmt.name, tuple(sorted(params.items())), table_bits)
  return _sample(key, table, fmt_name=fmt.name, shape=tuple(shape),
                 table_bits=len(table).bit_length() - 1)
