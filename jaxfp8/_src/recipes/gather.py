"""Narrow gathers: a sharded weight quantized where it lives, gathered as codes.

Under FSDP a weight is stored sharded and gathered whole (or to its
tensor-parallel shards) for its GEMMs. XLA's partitioner puts that gather at
the GEMM's operand, which in an emulated recipe is the dequantized float32
weight: the recipe would move 4 bytes per element where its format holds 1
(fp8) or half of one (NVFP4). With a gathered sharding given
(``dot_general(..., rhs_sharding=...)``), the core instead quantizes the
weight in its stored sharding (each device its shard; per-tensor amaxes are
all-reduced scalars), constrains the *codes and scales* to the gathered
sharding, and decodes them after the gather. The values are exactly those
the GEMM would have quantized (the quantizers' ``values`` forms are
``dequantize(*quantize(x))`` bit for bit), so numbers don't change; only
what crosses the interconnect does.

What moves, per weight element (float32 moves 4 bytes):

* ``"cast"`` / ``"tensor"``: the codes in the weight's own layout (1 byte
  for fp8, 2 for bfloat16), and no scale array (the per-tensor scale is
  computed from an all-reduced amax on every device).
* ``"block"`` (fp8 blockwise): 1-byte codes and one float32 scale per tile.
* ``"mx"``: the MX storage (elements packed as :class:`~jaxfp8.mx.MXArray`
  packs them, E8M0 scale codes).
* ``"nvfp4"``: e2m1 codes packed two to a byte, e4m3 block scales, and the
  tensor scale (a scalar from the all-reduced amax).

Block kinds are quantized and gathered in the GEMM's view of the weight
(:func:`jaxfp8._src.recipes.operand.view`); the gathered sharding is
carried into that layout by :func:`view_spec`. Where it can't be (a merged
group of dims sharded on a dim other than its first), or the quantizer
draws random bits or transforms the weight, the weight is left to XLA
(float32 gathered), as without the option.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec

from jaxfp8._src.mx import blockwise
from jaxfp8._src.mx import elements
from jaxfp8._src.mx import nvfp4
from jaxfp8._src.mx import pack as mx_pack
from jaxfp8._src.mx import quantize as mx_quantize
from jaxfp8._src.mx.formats import get_format as get_mx_format
from jaxfp8._src.recipes import gemm
from jaxfp8._src.recipes import operand
from jaxfp8._src.recipes.spec import Quantizer

_NVFP4 = get_mx_format("nvfp4")


def check_sharding(sharding: Any, ndim: Optional[int], *, fn: str) -> Any:
  """``sharding`` as given (None, a ``NamedSharding`` or a
  ``PartitionSpec`` of at most ``ndim`` entries; any length for ``ndim``
  None), or TypeError/ValueError."""
  if sharding is None:
    return None
  if isinstance(sharding, NamedSharding):
    spec = sharding.spec
  elif isinstance(sharding, PartitionSpec):
    spec = sharding
  else:
    raise TypeError(f"`rhs_sharding` argument to `{fn}` must be None, a "
                    f"jax.sharding.NamedSharding or a PartitionSpec, got "
                    f"{type(sharding).__name__}")
  if ndim is not None and len(spec) > ndim:
    raise ValueError(f"`rhs_sharding` argument to `{fn}` has {len(spec)} "
                     f"entries for an rhs with {ndim} dims: {spec}")
  return sharding


def _spec(sharding: Any) -> PartitionSpec:
  return sharding.spec if isinstance(sharding, NamedSharding) else sharding


def _like(sharding: Any, spec: PartitionSpec) -> Any:
  """``spec`` on ``sharding``'s mesh (a bare spec stays a spec: the mesh in
  context resolves it)."""
  if isinstance(sharding, NamedSharding):
    return NamedSharding(sharding.mesh, spec)
  return spec


def view_spec(spec: PartitionSpec, ndim: int, batch: Sequence[int],
              contract: Sequence[int]) -> Optional[PartitionSpec]:
  """The spec of :func:`~jaxfp8._src.recipes.operand.view`'s layout
  (batch..., free, contracting) of an array of ``ndim`` dims with ``spec``,
  or None where it can't be written: a merged group is sharded only where
  the sharding is on the group's first dim (its blocks are then contiguous
  in the merged dim).

  >>> from jax.sharding import PartitionSpec as P
  >>> view_spec(P("data", None), 2, (), (0,)) == P(None, "data")  # (N, K)
  True
  >>> view_spec(P(None, None, "model"), 3, (), (0,)) is None
  True
  """
  entries = list(spec) + [None] * (ndim - len(spec))
  free = operand.free_dims(ndim, contract, batch)
  out = [entries[d] for d in batch]
  for group in (free, tuple(contract)):
    sharded = [i for i, d in enumerate(group) if entries[d] is not None]
    if not sharded:
      out.append(None)
    elif sharded == [0]:
      out.append(entries[group[0]])
    else:
      return None
  return PartitionSpec(*out)


def narrow(q: Optional[Quantizer]) -> bool:
  """Whether ``q``'s quantization of a weight can be gathered as codes:
  every kind but those drawing random bits or transforming it."""
  return q is not None and not q.stochastic and q.transform is None


def prepare(w32: jax.Array, q: Optional[Quantizer], state: Any, sharding: Any,
            batch: Sequence[int], contract: Sequence[int]):
  """``(op, kept)``: the weight as the GEMM's second operand quantized by
  ``q``, its quantization gathered to ``sharding`` as codes; ``kept`` the
  gathered form a backward GEMM that shares the quantization decodes again
  (:class:`Gathered`, or None where ``op`` itself holds the codes or where
  nothing narrow was gathered).

  Without a sharding, or where the quantization can't move narrow (see the
  module docstring), this is :func:`gemm.prepare` (and XLA gathers what
  the GEMM reads).
  """
  if sharding is None or not narrow(q):
    return gemm.prepare(w32, q, state), None
  if gemm.elementwise(q):
    op = gemm.prepare(w32, q, state)
    return dataclasses.replace(op, codes=constrain(op.codes, sharding)), None
  vspec = view_spec(_spec(sharding), w32.ndim, batch, contract)
  if vspec is None:
    return gemm.prepare(w32, q, state), None
  kept = Gathered.of(w32, q, tuple(batch), tuple(contract),
                     _like(sharding, vspec))
  return gemm.Op(kept.values(), q, quantized=True), kept


def constrain(a: Any, sharding: Any) -> Any:
  """``a`` (an array or a pytree of them) gathered to ``sharding``, as the
  bits it holds.

  Two things stand in the way, measured with JAX 0.10.2 on CPU: Shardy
  propagates a constraint backwards through elementwise ops, so the gather
  lands before the encoding, on the float32 weight (an optimization
  barrier in front of the constraint stops it there); and XLA widens fp8
  to f16 for a collective (narrow floats travel bitcast to unsigned
  integers of their width).
  """
  def one(x):
    dtype = jnp.dtype(x.dtype)
    if jnp.issubdtype(dtype, jnp.floating) and dtype.itemsize < 4:
      bits = jnp.dtype(f"uint{8 * dtype.itemsize}")
      return lax.bitcast_convert_type(one(lax.bitcast_convert_type(x, bits)),
                                      dtype)
    return lax.with_sharding_constraint(lax.optimization_barrier(x), sharding)
  return jax.tree_util.tree_map(one, a)


@jax.tree_util.register_pytree_node_class
@dataclasses.dataclass(frozen=True)
class Gathered:
  """A weight's quantization in a GEMM's view, gathered: ``data`` (codes,
  packed where they are narrower than a byte), ``scales`` (per block) and
  ``tensor_scale`` (NVFP4's, else None); static: the quantizer, the weight's
  shape and its batch and contracting dims."""
  data: Any
  scales: Any
  tensor_scale: Any
  q: Quantizer
  shape: tuple[int, ...]
  batch: tuple[int, ...]
  contract: tuple[int, ...]

  def tree_flatten(self):
    return ((self.data, self.scales, self.tensor_scale),
            (self.q, self.shape, self.batch, self.contract))

  @classmethod
  def tree_unflatten(cls, aux, children):
    return cls(*children, *aux)

  @classmethod
  def of(cls, w32: jax.Array, q: Quantizer, batch, contract,
         sharding: Any) -> "Gathered":
    """``w32`` quantized by ``q`` in its view, codes and scales constrained
    to ``sharding`` (a spec of the view's layout)."""
    v = operand.view(w32, batch, contract)
    tensor_scale = None
    if q.kind == "block":
      data, scales = blockwise.quantize(v, block=q.block, fmt=q.format,
                                        scale=q.scale)
    elif q.kind == "nvfp4":
      # uint8 e2m1 codes (a float4 <-> uint4 bitcast miscompiles under
      # XLA's elemental IR emitter, jaxlib 0.10.2).
      codes, scales, tensor_scale = nvfp4.quantize_tiles(
          v, None, q.block, tensor_scale=q.scale, scale_mode="floor",
          rounding="nearest")
      data = blockwise.untiles(codes, v.shape)
      scales = lax.bitcast_convert_type(scales, jnp.float8_e4m3fn)
      if data.shape[-1] % 2 == 0:
        data = mx_pack.pack(data, 4)
    else:  # "mx"
      fmt = get_mx_format(q.format)
      data, scales, tensor_scale = mx_quantize.quantize_blocks(
          v, fmt, block_size=q.block_size or fmt.block_size, axis=-1,
          scale_mode=q.scale, rounding="nearest")
    return cls(constrain(data, sharding), constrain(scales, sharding),
               tensor_scale, q, tuple(w32.shape), batch, contract)

  def values(self) -> jax.Array:
    """The quantized values in the weight's own layout, float32: those
    :func:`~jaxfp8._src.recipes.operand.quantize_view` gives, bit for
    bit."""
    q = self.q
    if q.kind == "block":
      v = blockwise.dequantize(self.data, self.scales, block=q.block)
    elif q.kind == "nvfp4":
      codes = self.data
      if codes.shape[-1] != self._k():
        codes = mx_pack.unpack(codes, 4)
      v = nvfp4.dequantize(elements.element_values(codes, _NVFP4),
                           self.scales, self.tensor_scale, block=q.block)
    else:
      fmt = get_mx_format(q.format)
      v = mx_quantize.dequantize_blocks(
          self.data, self.scales, self.tensor_scale, fmt, axis=-1,
          length=self._k(), block_size=q.block_size or fmt.block_size)
    return operand.unview_operand(v, self.shape, self.batch, self.contract)

  def _k(self) -> int:
    """The view's contracting length."""
    n = 1
    for d in self.contract:
      n *= self.shape[d]
    return n
