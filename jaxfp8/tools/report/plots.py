"""Pictures for ``jaxfp8 report``: exact law against native JAX and jaxfp8.

One PNG per distribution family, one panel per format. The x axis is the
rank of each representable value (every value of the format gets the same
width, so the fine grid near zero is as visible as the coarse one far out);
the y axis is the probability, logarithmic, down to one sample in ``n``.
matplotlib is an optional extra (``pip install jaxfp8[plot]``).
"""
from __future__ import annotations

import dataclasses

import numpy as np


def available() -> bool:
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    return False
  return True


@dataclasses.dataclass
class Panel:
  """One format's panel: the exact law and the two samples' frequencies.

  ``native`` / ``jaxfp8`` are ``(counts, n, nan, label)`` or None when that
  side produced no sample (the label then says why, in the legend).
  """
  fmt_name: str
  values: np.ndarray
  probs: np.ndarray
  p_nan: float
  native: tuple[list, int, int, str] | None
  jaxfp8: tuple[list, int, int, str] | None
  native_note: str = ""
  jaxfp8_note: str = ""


def _frequencies(values: np.ndarray, counts: list, n: int, nan: int):
  """Frequencies on the value grid, NaN last; off-grid values are dropped."""
  index = {float(v): i for i, v in enumerate(values)}
  freq = np.zeros(len(values) + 1)
  for v, c in counts:
    i = index.get(float(v))
    if i is not None:
      freq[i] += c / n
  freq[-1] = nan / n
  return freq


def plot_family(path: str, family: str, panels: list[Panel], n: int) -> str:
  """Writes one PNG with a panel per format; returns ``path``."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg", force=False)
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  cols = len(panels)
  fig, axes = plt.subplots(1, cols, figsize=(4.2 * cols, 4.2), squeeze=False)
  floor = 0.5 / n
  for ax, panel in zip(axes[0], panels):
    exact = np.append(panel.probs, panel.p_nan)
    sides = [(panel.native, "native JAX", "tab:red", "x"),
             (panel.jaxfp8, "jaxfp8", "tab:blue", ".")]
    freqs = [None if s is None else _frequencies(panel.values, s[0], s[1],
                                                 s[2]) for s, *_ in sides]
    shown = exact > floor / 8
    for f in freqs:
      if f is not None:
        shown |= f > 0
    idx = np.flatnonzero(shown[:-1])
    lo, hi = (int(idx.min()), int(idx.max())) if idx.size else (0, 0)
    x = np.arange(lo, hi + 1)
    has_nan = bool(shown[-1])
    # One filled step patch, not a bar per value: drawing stays cheap.
    heights = np.maximum(exact[lo:hi + 1], floor / 4)
    ax.stairs(heights, np.arange(lo, hi + 2) - 0.5, baseline=floor / 4,
              fill=True, color="0.82", label="exact law")
    nan_x = hi + 2 + (hi - lo) // 12  # apart from the last value's label
    if has_nan:
      ax.stairs([max(exact[-1], floor / 4)], [nan_x - 0.5, nan_x + 0.5],
                baseline=floor / 4, fill=True, color="0.82")
    for f, (side, label, color, marker) in zip(freqs, sides):
      if f is None:
        ax.plot([], [], marker, color=color, label=f"{label}: {side_note(panel, label)}")
        continue
      keep = f[lo:hi + 1] > 0
      ax.plot(x[keep], f[lo:hi + 1][keep], marker, color=color, ms=4,
              label=f"{label} ({side[3]})")
      if has_nan and f[-1] > 0:
        ax.plot([nan_x], [f[-1]], marker, color=color, ms=6)
    ax.set_yscale("log")
    ax.set_ylim(floor, 1.5)
    ticks = np.unique(np.linspace(lo, hi, min(7, hi - lo + 1)).astype(int))
    labels = [f"{panel.values[t]:.3g}" for t in ticks]
    if has_nan:
      ticks, labels = np.append(ticks, nan_x), labels + ["NaN"]
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, fontsize=7, rotation=30)
    ax.set_title(panel.fmt_name, fontsize=9)
    ax.set_xlabel("representable value (one slot each)", fontsize=7)
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.3),
              ncol=1, frameon=False)
  axes[0][0].set_ylabel(f"probability ({n} samples)", fontsize=8)
  fig.suptitle(f"{family}: exact rounded law vs samples", fontsize=10)
  fig.subplots_adjust(left=0.06 if cols > 2 else 0.1, right=0.98, top=0.86,
                      bottom=0.36, wspace=0.18)
  fig.savefig(path, dpi=90)
  plt.close(fig)
  return path


def side_note(panel: Panel, label: str) -> str:
  note = panel.native_note if label.startswith("native") else panel.jaxfp8_note
  return note or "no sample"


def png_size(path: str) -> tuple[int, int]:
  """(width, height) from a PNG's IHDR chunk; ValueError if not a PNG."""
  with open(path, "rb") as fh:
    head = fh.read(24)
  if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
    raise ValueError(f"{path} is not a PNG file")
  return (int.from_bytes(head[16:20], "big"),
          int.from_bytes(head[20:24], "big"))

