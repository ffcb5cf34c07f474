"""How an op's dispatch picks its implementation, in one place for every op.

Each op folder's ``api.py`` takes ``implementation=``, as Tokamax's ops do:
``"xla"`` (the jnp / lax path, which runs every case the op takes),
``"triton"`` or ``"mosaic_gpu"`` (a Pallas kernel), or None for the best one
that can run the case. The op says, per implementation, why it can't run a
case (a format it doesn't read, a block size, no GPU it compiles for, no
interpreter in this JAX); :func:`choose` turns those reasons into the choice:
a named implementation that can't run raises ``NotImplementedError`` with the
reason, and None passes over each candidate that can't, logging why at DEBUG
level on the op's logger, so that a slow fallback can be traced
(``logging.getLogger("jaxfp8").setLevel(logging.DEBUG)``).

The order None tries is :func:`candidates`: the Mosaic GPU kernel first
(compiled on Hopper, or in its interpreter with ``interpret=True``), the
Triton kernel only where a kernel is asked for (``interpret`` True or False:
on its own it is not the best choice anywhere the Mosaic GPU kernel or XLA's
own GEMM runs), XLA last, except with ``interpret=False``, which asks for a
compiled kernel and so never falls back to XLA.
"""
from __future__ import annotations

import logging
from typing import Callable, Literal, Optional, Sequence

import numpy as np

Implementation = Literal["xla", "triton", "mosaic_gpu"]
IMPLEMENTATIONS: tuple[str, ...] = ("xla", "triton", "mosaic_gpu")


def check(implementation: Optional[str], interpret: Optional[bool],
          fn: str) -> None:
  """Raises TypeError / ValueError for a malformed ``implementation`` or
  ``interpret`` argument to ``fn``."""
  if implementation is not None and implementation not in IMPLEMENTATIONS:
    raise ValueError(f"`implementation` argument to `{fn}` must be None or "
                     f"one of {', '.join(map(repr, IMPLEMENTATIONS))}, got "
                     f"{implementation!r}")
  if interpret is not None and not isinstance(interpret, (bool, np.bool_)):
    raise TypeError(f"`interpret` argument to `{fn}` must be None, True or "
                    f"False, got {interpret!r}")


def candidates(interpret: Optional[bool], available: Sequence[str]
               ) -> tuple[str, ...]:
  """The implementations None tries, best first, among an op's ``available``.

  >>> candidates(None, IMPLEMENTATIONS)
  ('mosaic_gpu', 'xla')
  >>> candidates(True, IMPLEMENTATIONS)
  ('mosaic_gpu', 'triton', 'xla')
  >>> candidates(False, ("xla", "mosaic_gpu"))
  ('mosaic_gpu',)
  """
  order = ["mosaic_gpu"]
  if interpret is not None:
    order.append("triton")
  if interpret is not False:
    order.append("xla")
  return tuple(i for i in order if i in available)


def choose(implementation: Optional[str], why_not: Callable[[str], Optional[str]],
           *, interpret: Optional[bool], available: Sequence[str], fn: str,
           log: logging.Logger) -> str:
  """The implementation that runs: ``implementation`` itself, or for None
  the first of :func:`candidates` that can.

  Args:
    implementation: None or one of :data:`IMPLEMENTATIONS`.
    why_not: the op's reason an implementation can't run this case, or None
      where it can.
    interpret: the caller's ``interpret`` (it orders the candidates).
    available: the op's implementations (an op may have no Triton kernel).
    fn: the public function to name in errors.
    log: the op's logger; a candidate passed over is logged at DEBUG level.

  Returns:
    One of ``available``.

  Raises:
    NotImplementedError: the named implementation, or for None every
      candidate, can't run the case; the message names ``fn``, the
      implementation and the reason.

  >>> choose(None, lambda i: "no GPU" if i == "mosaic_gpu" else None,
  ...        interpret=None, available=IMPLEMENTATIONS, fn="f",
  ...        log=logging.getLogger("doctest"))
  'xla'
  """
  if implementation is not None:
    why = (f"`{fn}` has no {implementation} implementation (it has "
           f"{', '.join(available)})" if implementation not in available
           else why_not(implementation))
    if why is not None:
      raise NotImplementedError(
          f"`{fn}` with implementation={implementation!r} can't run this "
          f"case: {why}. Use implementation=None for the best one that can.")
    return implementation
  reasons = []
  for name in candidates(interpret, available):
    why = why_not(name)
    if why is None:
      return name
    log.debug("`%s`: not %s: %s", fn, name, why)
    reasons.append(f"{name}: {why}")
  raise NotImplementedError(
      f"`{fn}` with implementation=None and interpret={interpret!r} has no "
      f"implementation that runs this case ({'; '.join(reasons)})")


def mode_reason(resolve: Callable[[], str], where: str) -> Optional[str]:
  """Why a kernel whose run mode ``resolve`` gives can't run, or None.

  ``resolve`` is a backend's ``resolve_mode`` bound to the call's arguments:
  its NotImplementedError is the reason, and its ``"reference"`` (no
  hardware the kernel compiles for, and ``interpret`` not True) is one too,
  since the kernel would not run at all: ``where`` says what it needs.
  """
  try:
    mode = resolve()
  except NotImplementedError as e:
    return str(e)
  if mode == "reference":
    return (f"the kernel compiles for {where} only, and interpret=None runs "
            "no kernel elsewhere (interpret=True runs it in Pallas' "
            "interpreter)")
  return None
