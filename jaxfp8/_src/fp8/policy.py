"""Mixed-precision policies that know every narrow format.

A :class:`Policy` is jmp's policy (``param_dtype``, ``compute_dtype``,
``output_dtype`` and the three ``cast_to_*`` methods), with dtype names parsed
through the format registry, so ``"p=f32,c=e4m3,o=bf16"`` works, and with
saturating casts into narrow formats, so an overflow gives +-max instead of
NaN. Haiku's ``hk.mixed_precision.set_policy`` reads exactly these attributes,
so a :class:`Policy` can be used wherever a ``jmp.Policy`` is expected.
"""
from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxfp8._src.numerics import formats
from jaxfp8._src.numerics.cast import cast
from jaxfp8._src.numerics.codes import CodeArray
from jaxfp8._src.numerics.codes import decode
from jaxfp8._src.numerics.codes import encode_numpy

T = TypeVar("T")

_KEYS = {"p": "param_dtype", "params": "param_dtype",
         "c": "compute_dtype", "compute": "compute_dtype",
         "o": "output_dtype", "output": "output_dtype"}
_ROLES = {"param_dtype": "params", "compute_dtype": "compute",
          "output_dtype": "output"}


def _valid_names() -> str:
  return ", ".join((*formats.all_names(), "float64", "f64"))


def _parse_dtype(value: Any, *, arg: str, fn: str) -> np.dtype:
  """A policy dtype: :func:`formats.get_dtype`'s rule (registry names and
  aliases, jmp's ``full``/``half``/``float``, dtypes, Formats, Python
  ``float`` and float64); an unknown name lists the valid ones."""
  try:
    return formats.get_dtype(value, arg=arg, fn=fn)
  except (TypeError, ValueError) as e:
    if isinstance(value, str):
      raise ValueError(
          f"Unknown dtype {value!r} for `{arg}` of `{fn}`; valid names: "
          f"{_valid_names()}") from e
    raise


def _dtype_name(dtype: np.dtype) -> str:
  return "float64" if dtype == np.float64 else formats.get(dtype).name


def _is_floating_leaf(x: Any) -> bool:
  if isinstance(x, CodeArray):
    return True
  if not isinstance(x, (np.ndarray, jax.Array, np.generic)):
    return False
  return jnp.issubdtype(x.dtype, jnp.floating)


def _cast_leaf(x: Any, dtype: np.dtype, role: str):
  fmt = formats.get(dtype) if formats.is_narrow(dtype) else None
  if fmt is not None:
    if not fmt.signed:
      raise TypeError(
          f"Policy {role} dtype {fmt.name} holds only positive powers of two "
          f"(it is a scale format): zero and negative data would become NaN")
    if not fmt.native and role != "param":
      raise TypeError(
          f"Policy {role} dtype {fmt.name} is not a type the installed "
          f"JAX/XLA backend can compute with (it has no {fmt.name}); use it as "
          f"the param dtype (stored as jaxfp8.CodeArray codes) and compute "
          f"in a native format")
  if isinstance(x, np.ndarray) and formats.is_narrow(x.dtype) and (
      not formats.get(x.dtype).native):
    x = encode_numpy(x)
  if isinstance(x, CodeArray):
    if x.dtype == dtype:
      return x
    x = decode(x, jnp.float32)
  if x.dtype == dtype:
    return x
  if fmt is not None:
    return cast(x, fmt)
  if formats.is_narrow(x.dtype):
    return decode(x, dtype)
  return x.astype(dtype)


def _cast_floating_to(tree: T, dtype: np.dtype, role: str) -> T:
  return jax.tree_util.tree_map(
      lambda x: _cast_leaf(x, dtype, role) if _is_floating_leaf(x) else x,
      tree, is_leaf=lambda x: isinstance(x, CodeArray))


@dataclasses.dataclass(frozen=True)
class Policy:
  """Which dtype parameters are stored in, computed in and returned in.

  Any registered format (``jaxfp8.formats.names()``) or float64 can fill each
  role. Arguments may be names, aliases, dtypes or Formats; they are stored
  as NumPy dtypes, so policies compare and hash by value.

  Casts touch floating leaves only (integers, booleans and PRNG keys pass
  through). Casts into narrow formats saturate (``jaxfp8.cast``): finite inputs
  never become NaN. Casts between wide formats are ``astype`` (float32 to
  float16 overflows to Inf, as in jmp). Formats the backend can't hold
  (float6) may be the param dtype (leaves become ``jaxfp8.CodeArray``) but
  casting to them as compute or output dtype raises ``TypeError``, and so
  does any cast to float8_e8m0fnu (a scale format without zero or sign).
  Arithmetic that JAX then does in a narrow compute dtype (a layer's matmul
  under Haiku, say) is XLA's and is not saturating: keep activations in range
  or train with a recipe (:func:`jaxfp8.recipes.dot_general`), which scales.

  Attributes:
    param_dtype: dtype parameters are created and stored in.
    compute_dtype: dtype of the inputs and parameters of the computation.
    output_dtype: dtype of the results.

  >>> import jax.numpy as jnp
  >>> p = Policy("f32", "e4m3", "bf16")
  >>> str(p)
  'params=float32,compute=float8_e4m3fn,output=bfloat16'
  >>> p.cast_to_compute({"w": jnp.array([1.0, 1000.0]), "n": jnp.arange(2)})
  {'n': Array([0, 1], dtype=int32), 'w': Array([1, 448], dtype=float8_e4m3fn)}
  >>> get_policy(str(p)) == p
  True
  """

  param_dtype: Any
  compute_dtype: Any
  output_dtype: Any

  def __post_init__(self):
    for field in ("param_dtype", "compute_dtype", "output_dtype"):
      dtype = _parse_dtype(getattr(self, field), arg=field, fn="Policy")
      object.__setattr__(self, field, dtype)

  def cast_to_param(self, x: T) -> T:
    """Casts the floating leaves of ``x`` to the param dtype."""
    return _cast_floating_to(x, self.param_dtype, "param")

  def cast_to_compute(self, x: T) -> T:
    """Casts the floating leaves of ``x`` to the compute dtype."""
    return _cast_floating_to(x, self.compute_dtype, "compute")

  def cast_to_output(self, x: T) -> T:
    """Casts the floating leaves of ``x`` to the output dtype."""
    return _cast_floating_to(x, self.output_dtype, "output")

  def with_output_dtype(self, output_dtype: Any) -> Policy:
    """The same policy with another output dtype."""
    return dataclasses.replace(self, output_dtype=output_dtype)

  def __str__(self) -> str:
    return (f"params={_dtype_name(self.param_dtype)},"
            f"compute={_dtype_name(self.compute_dtype)},"
            f"output={_dtype_name(self.output_dtype)}")

  def to_jmp(self):
    """The equivalent ``jmp.Policy`` (its casts are plain ``astype``).

    jmp's casts do not saturate: a jmp policy computing in fp8 turns values
    beyond the format's max into NaN. Use this only to hand a policy to code
    that checks its type.
    """
    import jmp  # pylint: disable=g-import-not-at-top
    as_jnp = lambda d: getattr(jnp, np.dtype(d).name)
    return jmp.Policy(param_dtype=as_jnp(self.param_dtype),
                      compute_dtype=as_jnp(self.compute_dtype),
                      output_dtype=as_jnp(self.output_dtype))

  @classmethod
  def from_jmp(cls, policy: Any) -> Policy:
    """A :class:`Policy` with the dtypes of a ``jmp.Policy`` (or any object
    with ``param_dtype``, ``compute_dtype`` and ``output_dtype``)."""
    try:
      dtypes = (policy.param_dtype, policy.compute_dtype, policy.output_dtype)
    except AttributeError as e:
      raise TypeError(f"`policy` argument to `Policy.from_jmp` must be a "
                      f"jmp.Policy, got {type(policy).__name__}") from e
    return cls(*dtypes)


def get_policy(policy_name: str) -> Policy:
  """Parses a policy from jmp's string syntax, with every registered format.

  ``"params=float32,compute=float8_e4m3fn,output=float32"``, the short keys
  ``p=``/``c=``/``o=``, or one dtype alone for all three. As in jmp, an absent
  param dtype is float32, compute follows params and output follows compute.
  Names are the registry's names and aliases (``e4m3``, ``e5m2``, ``bf16``,
  ``f32``, ``full``, ``half``...) and ``float64``/``f64``. Note that ``half``
  is float16 here on every backend (jmp picks bfloat16 on TPU).

  Args:
    policy_name: the policy string.

  Returns:
    The :class:`Policy`.

  Raises:
    TypeError: if ``policy_name`` is not a string.
    ValueError: for an unknown key or dtype name (the message quotes it and
      lists the valid ones).

  >>> get_policy("p=f32,c=e4m3,o=f32")
  Policy(param_dtype=dtype('float32'), compute_dtype=dtype(float8_e4m3fn), output_dtype=dtype('float32'))
  >>> str(get_policy("c=bf16"))
  'params=float32,compute=bfloat16,output=bfloat16'
  >>> get_policy("c=e4m2")
  Traceback (most recent call last):
  ...
  ValueError: Unknown dtype 'e4m2' for `compute` of `get_policy`; valid names: ...
  """
  if not isinstance(policy_name, str):
    raise TypeError(f"`policy_name` argument to `get_policy` must be a string, "
                    f"got {type(policy_name).__name__}")
  if "=" not in policy_name:
    dtype = _parse_dtype(policy_name, arg="policy_name", fn="get_policy")
    return Policy(dtype, dtype, dtype)
  found: dict[str, np.dtype] = {}
  for part in policy_name.split(","):
    key, sep, value = part.partition("=")
    key = key.strip().lower()
    if not sep or key not in _KEYS:
      raise ValueError(
          f"Unknown key {key!r} in policy {policy_name!r} for `get_policy`; "
          f"valid keys: {', '.join(_KEYS)}")
    name = _KEYS[key]
    found[name] = _parse_dtype(value, arg=_ROLES[name], fn="get_policy")
  param = found.get("param_dtype", np.dtype(np.float32))
  compute = found.get("compute_dtype", param)
  output = found.get("output_dtype", compute)
  return Policy(param, compute, output)
