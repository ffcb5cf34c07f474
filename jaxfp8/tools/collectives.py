"""What a compiled program communicates: its collectives' bytes, from its HLO.

:func:`collective_bytes` reads the text of a compiled program (after XLA's
SPMD partitioning: one device's program) and sums, per kind of collective,
the bytes of each collective's result on one device: for an all-gather the
whole gathered array, for an all-reduce the reduced array. Figures are those
of the program, so they are deterministic (no timing) and the same on every
machine that partitions alike; ``bench fsdp`` and ``examples/scale_out.py``
report them.

>>> import jax, jax.numpy as jnp
>>> compiled = jax.jit(lambda x: x * 2).lower(jnp.ones(4)).compile()
>>> collective_bytes(compiled)["all-gather"]
0
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all",
         "collective-permute")

# Bits of an element of each HLO primitive type (sub-byte types as XLA
# packs them in memory on the host: one element per byte).
_BITS = {"pred": 8, "s4": 8, "u4": 8, "s8": 8, "u8": 8, "s16": 16, "u16": 16,
         "s32": 32, "u32": 32, "s64": 64, "u64": 64, "f16": 16, "bf16": 16,
         "f32": 32, "f64": 64, "c64": 64, "c128": 128, "f8e4m3fn": 8,
         "f8e4m3": 8, "f8e5m2": 8, "f8e4m3fnuz": 8, "f8e5m2fnuz": 8,
         "f8e4m3b11fnuz": 8, "f8e3m4": 8, "f8e8m0fnu": 8, "f4e2m1fn": 8,
         "f6e2m3fn": 8, "f6e3m2fn": 8}

# `%name = <type> <kind>(` or `<kind>-start(`: the instruction's result type.
_INSTRUCTION = re.compile(
    r"=\s+(?P<type>\([^=]*?\)|[a-z0-9]+\[[0-9,]*\](?:\{[^}]*\})?)\s+"
    r"(?P<kind>" + "|".join(KINDS) + r")(?P<start>-start)?\(")
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([0-9,]*)\]")


def _array_bytes(dtype: str, dims: str) -> int:
  if dtype not in _BITS:
    raise ValueError(f"`collective_bytes`: unknown HLO element type "
                     f"{dtype!r} in a collective's result")
  n = int(np.prod([int(d) for d in dims.split(",") if d], dtype=np.int64))
  return n * _BITS[dtype] // 8


def collective_bytes(compiled: Any) -> dict[str, int]:
  """Bytes of the results of each kind of collective in a compiled program.

  Args:
    compiled: a ``jax.stages.Compiled`` (``jax.jit(f).lower(...).compile()``)
      or its HLO text (``compiled.as_text()``).

  Returns:
    ``{kind: bytes}`` for each kind of :data:`KINDS` (0 where absent): the
    sum over that kind's instructions of their results' bytes on one
    device. An asynchronous pair (``all-gather-start`` / ``-done``) counts
    once, by the start's output.

  Raises:
    TypeError: for anything but a compiled program or a string.
    ValueError: for a collective of an element type it does not know.
  """
  if isinstance(compiled, str):
    text = compiled
  elif hasattr(compiled, "as_text"):
    text = compiled.as_text()
  else:
    raise TypeError(f"`compiled` argument to `collective_bytes` must be a "
                    f"compiled program or its HLO text, got "
                    f"{type(compiled).__name__}")
  out = dict.fromkeys(KINDS, 0)
  for m in _INSTRUCTION.finditer(text):
    arrays = _ARRAY.findall(m.group("type"))
    if m.group("start") and len(arrays) > 1:
      # (operands..., results...): an async start's tuple; its last half
      # holds the results.
      arrays = arrays[len(arrays) // 2:]
    out[m.group("kind")] += sum(_array_bytes(t, d) for t, d in arrays)
  return out
