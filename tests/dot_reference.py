"""float64 references of ``lax.dot_general`` for the GEMM tests: the einsum
subscripts of a dot_general's dimension numbers."""
from __future__ import annotations

import string


def subscripts(lhs_nd: int, rhs_nd: int, dims) -> tuple[str, str, str]:
  """einsum subscripts (lhs, rhs, out) of a dot_general."""
  (lc, rc), (lb, rb) = dims
  letters = iter(string.ascii_letters)
  ls, rs = [None] * lhs_nd, [None] * rhs_nd
  for a, b in zip(lb, rb):
    ls[a] = rs[b] = next(letters)
  for a, b in zip(lc, rc):
    ls[a] = rs[b] = next(letters)
  for i in range(lhs_nd):
    ls[i] = ls[i] or next(letters)
  for i in range(rhs_nd):
    rs[i] = rs[i] or next(letters)
  out = ([ls[a] for a in lb] + [ls[i] for i in range(lhs_nd)
                                if i not in lc and i not in lb]
         + [rs[i] for i in range(rhs_nd) if i not in rc and i not in rb])
  return "".join(ls), "".join(rs), "".join(out)
