"""How a dispatch picks its implementation (``kernels/implementation.py``):
the candidates None tries, a named one that can't run, the log of what None
passed over."""
from __future__ import annotations

import logging

import pytest

from jaxfp8._src.kernels import implementation

ALL = implementation.IMPLEMENTATIONS
LOG = logging.getLogger("test_implementation")


@pytest.mark.parametrize("interpret,available,want", [
    (None, ALL, ("mosaic_gpu", "xla")),
    (True, ALL, ("mosaic_gpu", "triton", "xla")),
    (False, ALL, ("mosaic_gpu", "triton")),
    (True, ("xla", "mosaic_gpu"), ("mosaic_gpu", "xla")),
    (False, ("xla", "mosaic_gpu"), ("mosaic_gpu",)),
])
def test_candidates(interpret, available, want):
  assert implementation.candidates(interpret, available) == want


def test_choose_named_runs_or_raises_with_the_reason():
  def why_not(i):
    return "no GPU here" if i != "xla" else None
  kw = dict(interpret=None, available=ALL, fn="f", log=LOG)
  assert implementation.choose("xla", why_not, **kw) == "xla"
  with pytest.raises(NotImplementedError,
                     match="`f` with implementation='triton'.*no GPU here"):
    implementation.choose("triton", why_not, **kw)
  with pytest.raises(NotImplementedError, match="has no triton implementation"):
    implementation.choose("triton", why_not, interpret=None,
                          available=("xla",), fn="f", log=LOG)


def test_choose_none_logs_each_fallback(caplog):
  reasons = {"mosaic_gpu": "not Hopper", "triton": "not mxfp8"}
  with caplog.at_level(logging.DEBUG, logger=LOG.name):
    got = implementation.choose(None, reasons.get, interpret=True,
                                available=ALL, fn="f", log=LOG)
  assert got == "xla"
  assert [r.getMessage() for r in caplog.records] == [
      "`f`: not mosaic_gpu: not Hopper", "`f`: not triton: not mxfp8"]
  with pytest.raises(NotImplementedError, match="interpret=False has no "
                     "implementation.*mosaic_gpu: not Hopper; triton: not"):
    implementation.choose(None, reasons.get, interpret=False, available=ALL,
                          fn="f", log=LOG)


def test_check_and_mode_reason():
  with pytest.raises(ValueError, match="`implementation` argument to `f`"):
    implementation.check("cuda", None, "f")
  with pytest.raises(TypeError, match="`interpret` argument to `f`"):
    implementation.check(None, 1, "f")
  assert implementation.mode_reason(lambda: "compiled", "x") is None
  assert "compiles for a GPU only" in implementation.mode_reason(
      lambda: "reference", "a GPU")

  def raises():
    raise NotImplementedError("needs JAX >= 0.11")
  assert implementation.mode_reason(raises, "x") == "needs JAX >= 0.11"
