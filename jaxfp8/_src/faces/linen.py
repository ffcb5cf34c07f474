"""Flax linen around the recipe core: a module and one-call conversion.

* :class:`RecipeDotGeneral`: the core ``dot_general``
  (:func:`jaxfp8._src.recipes.core.dot_general`) as a linen module, for
  ``nn.Dense(dot_general_cls=functools.partial(RecipeDotGeneral,
  recipe=...))``; any recipe of :mod:`jaxfp8._src.recipes.registry`.
* :func:`linen_recipe`: a context manager (``nn.intercept_methods``) under
  which an unchanged model's ``Dense`` / ``DenseGeneral`` / ``Einsum``
  layers whose module path matches the rules
  (:mod:`jaxfp8._src.recipes.rules`) multiply with the core and their
  rule's recipe (``Einsum`` through ``jnp.einsum``'s dot_general hook, see
  :func:`jaxfp8._src.compat.einsum`); a layer whose kernel is packed
  (:mod:`jaxfp8._src.mx.serving`) multiplies it as packed.

Where a layer keeps what its recipe needs:

* Delayed scaling: the amax histories and scales of the input, kernel and
  output gradient are variables of the ``_overwrite_with_gradient``
  collection (Flax's names: ``input_amax_history``, ``input_scale``,
  ``kernel_...``, ``output_grad_...``), in the scope of the
  :class:`RecipeDotGeneral` module, or of the layer itself under
  :func:`linen_recipe`. ``flax.training.train_state.TrainState`` replaces
  them with their gradient, the next state; for a hand-written step see
  :func:`jaxfp8.recipes.split_overwrite_with_gradient`. A layer called twice
  in one step (tied weights) gets the sum of two next states: give each
  call its own layer.
* Stochastic rounding and random Hadamard transforms: a fresh key per call
  from the ``"recipe"`` rng stream (:data:`RNG_STREAM`):
  ``model.apply(variables, x, rngs={"recipe": key})``; without it apply
  raises (``init`` may fall back to the ``"params"`` stream).

:func:`intercept_layers` is the interception itself, shared with
the deprecated ``linen_mx`` (:mod:`jaxfp8._src.deprecated.mx_flax`). An
integration module: it imports
Flax, and ``jaxfp8.recipes`` loads it on first use of one of these names.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

from flax import linen as nn
import jax
import jax.numpy as jnp

from jaxfp8._src import compat
from jaxfp8._src.recipes.layer_state import OVERWRITE_WITH_GRADIENT
from jaxfp8._src.mx import serving
from jaxfp8._src.recipes import core
from jaxfp8._src.recipes import gather
from jaxfp8._src.recipes import groups
from jaxfp8._src.recipes import ragged
from jaxfp8._src.recipes import state as recipe_state
from jaxfp8._src.recipes import layer_state
from jaxfp8._src.recipes import registry
from jaxfp8._src.recipes import rules as rules_lib

# The rng stream the keys of stochastic rounding and RHT come from.
RNG_STREAM = "recipe"


def layer_dot(module: nn.Module, recipe: Any, *, fn: str,
              history_length: int = 16, reduction: str = "max",
              rhs_sharding: Any = None) -> Callable[..., Any]:
  """The core ``dot_general`` with ``recipe``, bound to what ``module``
  keeps for it: its delayed-scaling state (variables of
  ``_overwrite_with_gradient`` in ``module``'s scope, made on first use)
  and a fresh key from the ``"recipe"`` rng stream when the recipe needs
  one.

  Call it where ``module`` may make variables (a compact method, or an
  interceptor of one), outside any JAX transform the module did not see.
  ``history_length`` and ``reduction``: of a fresh state
  (:func:`~jaxfp8._src.recipes.state.init_state`); ``rhs_sharding``: the
  core ``dot_general``'s option (the kernel's gathered sharding).

  Raises:
    ValueError: the recipe needs a key and ``apply`` got no ``"recipe"``
      rng.
  """
  fresh = recipe_state.init_state(recipe, history_length=history_length,
                                  reduction=reduction)
  state, key = _state_and_key(module, recipe, fresh, fn=fn)
  return functools.partial(core.dot_general, recipe=recipe, key=key,
                           state=state, rhs_sharding=rhs_sharding)


def _state_and_key(module: nn.Module, recipe: Any, fresh: Any, *, fn: str,
                   prefix: str = "") -> tuple[Any, Any]:
  """(the state ``fresh`` initializes, kept as ``prefix``-named variables
  of ``_overwrite_with_gradient`` in ``module``'s scope, or None; a fresh
  key of the ``"recipe"`` stream where ``recipe`` needs one, or None)."""
  state = None
  if fresh is not None:
    values = [module.variable(OVERWRITE_WITH_GRADIENT, prefix + name,
                              lambda v=v: v).value
              for name, v in layer_state.named_leaves(fresh)]
    state = layer_state.rebuild(jax.tree.structure(fresh), values)
  key = None
  if recipe.needs_key:
    if not module.has_rng(RNG_STREAM) and not module.is_initializing():
      raise ValueError(
          f"`{fn}`: the recipe {recipe.name!r} of {_module_path(module)!r} "
          f"rounds stochastically or applies a random Hadamard transform "
          f"and needs a key per call; pass rngs={{{RNG_STREAM!r}: key}} to "
          f"apply")
    key = module.make_rng(RNG_STREAM)
  return state, key


class RecipeDotGeneral(nn.Module):
  """The core ``dot_general`` as a linen module: ``nn.Dense(dot_general_cls=
  functools.partial(RecipeDotGeneral, recipe="fp8_delayed"))``.

  Delayed scaling keeps its state in the ``_overwrite_with_gradient``
  collection; stochastic rounding and RHT draw their key from the
  ``"recipe"`` rng stream (see the module docstring).

  Attributes:
    recipe: a :class:`~jaxfp8._src.recipes.spec.Recipe`, a registry name
      (``"fp8_current"``, ``"fp8_delayed"``, ``"mxfp8"``,
      ``"fp8_blockwise"``, ``"nvfp4"``...) or an MX recipe.
    history_length, reduction: delayed-scaling settings
      (:func:`~jaxfp8._src.recipes.state.init_state`).
    rhs_sharding: the sharding the kernel is gathered to under FSDP
      (``jax.sharding.PartitionSpec()`` for whole): its codes and scales
      are gathered instead of float32 (the core ``dot_general``'s option).

  >>> import functools, jax, jax.numpy as jnp, flax.linen as nn
  >>> model = nn.Dense(4, dot_general_cls=functools.partial(
  ...     RecipeDotGeneral, recipe="fp8_delayed"))
  >>> variables = model.init(jax.random.key(0), jnp.ones((2, 32)))
  >>> sorted(variables[OVERWRITE_WITH_GRADIENT]["RecipeDotGeneral_0"])[:2]
  ['input_amax_history', 'input_scale']
  """
  recipe: Any = "fp8_current"
  history_length: int = 16
  reduction: str = "max"
  rhs_sharding: Any = None

  def __post_init__(self):
    # A bad recipe or sharding fails where the module is built, not at init.
    registry.get_recipe(self.recipe)
    gather.check_sharding(self.rhs_sharding, None, fn=type(self).__name__)
    super().__post_init__()

  @nn.compact
  def __call__(self, lhs, rhs, dimension_numbers, precision=None,
               preferred_element_type=None, **kwargs):
    dot = layer_dot(self, registry.get_recipe(self.recipe),
                    fn=type(self).__name__,
                    history_length=self.history_length,
                    reduction=self.reduction, rhs_sharding=self.rhs_sharding)
    return dot(lhs, rhs, dimension_numbers, precision,
               preferred_element_type, **kwargs)


def _module_path(module: nn.Module) -> str:
  return "/".join(str(p) for p in module.path)


def _packed_kernel(module: nn.Module) -> Any:
  """The layer's kernel if the params it applies from hold it packed."""
  if module.scope is None or not module.has_variable("params", "kernel"):
    return None
  kernel = module.get_variable("params", "kernel")
  return kernel if serving.is_packed(kernel) else None


def _axes(x: Any) -> tuple[int, ...]:
  return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _serve_dense(module: nn.Module, kernel: Any, dot, inputs):
  """``Dense`` / ``DenseGeneral.__call__`` with a packed kernel: the same
  dims and bias, the kernel read as stored (no shape check of the packed
  leaves against an unpacked init)."""
  inputs = jnp.asarray(inputs)
  bias = (module.get_variable("params", "bias")
          if module.use_bias else None)
  inputs, bias = module.promote_dtype(inputs, bias, dtype=module.dtype)
  if isinstance(module, nn.Dense):
    y = dot(inputs, kernel, (((inputs.ndim - 1,), (0,)), ((), ())))
    return y if bias is None else y + jnp.reshape(
        bias, (1,) * (y.ndim - 1) + (-1,))
  ndim = inputs.ndim
  axis = tuple(a % ndim for a in _axes(module.axis))
  batch = tuple(a % ndim for a in _axes(module.batch_dims))
  features = _axes(module.features)
  contract = tuple(range(len(batch), len(batch) + len(axis)))
  y = dot(inputs, kernel, ((axis, contract), (batch, tuple(range(len(
      batch))))))
  if bias is None:
    return y
  expanded = tuple(inputs.shape[a] if a in batch else 1
                   for a in range(ndim) if a not in axis)
  return y + jnp.reshape(bias, expanded + features)


def _linen_einsum(module: nn.Einsum, dot, inputs, einsum_str=None, *,
                  kernel=None):
  """linen ``Einsum.__call__`` with its contraction through ``dot`` (linen's
  calls ``jnp.einsum`` with no dot_general hook); ``kernel``: a packed
  kernel, dequantized (``jnp.einsum`` takes arrays only)."""
  einsum_str = nn.merge_param("einsum_str", module.einsum_str,
                              einsum_str).replace(" ", "")
  if kernel is None:
    kernel = module.param("kernel", module.kernel_init, module.shape,
                          module.param_dtype)
  else:
    kernel = kernel.dequantize()
  bias = None
  if module.use_bias:
    bias_shape, broadcast = compat.linen_einsum_bias_shape(
        module, einsum_str, inputs, kernel)
    bias = module.param("bias", module.bias_init, bias_shape,
                        module.param_dtype)
  inputs, kernel, bias = module.promote_dtype(inputs, kernel, bias,
                                              dtype=module.dtype)
  y = compat.einsum(einsum_str, inputs, kernel, dot_general=dot,
                    precision=module.precision,
                    preferred_element_type=module.preferred_element_type)
  return y if bias is None else y + jnp.reshape(bias, broadcast)


LAYERS = (nn.Dense, nn.DenseGeneral, nn.Einsum)

# lax's grouped GEMM as JAX defines it: what a module whose rule is None
# (or that no rule matches) calls under the interception.
_LAX_RAGGED_DOT = groups.LAX_RAGGED_DOT


def ragged_layer_dot(module: nn.Module, recipe: Any, *, fn: str,
                     calls: list) -> Callable[..., Any]:
  """A ``lax.ragged_dot`` stand-in for ``module``'s grouped GEMMs under
  ``recipe`` (:func:`jaxfp8.recipes.ragged_dot`): its ``i``-th call in one
  call of the module keeps its per-expert delayed state as variables
  ``ragged_dot_{i}_input_amax_history``... of ``_overwrite_with_gradient``
  in the module's scope and draws a fresh key from the ``"recipe"`` stream.
  ``calls``: the module's call counter (one int in a list)."""

  def call(lhs, rhs, group_sizes, precision=None,
           preferred_element_type=None, group_offset=None, **kwargs):
    del kwargs  # lax's out_sharding: the result follows the operands
    i = calls[0]
    calls[0] += 1
    fresh = (recipe_state.init_state(recipe, experts=jnp.shape(rhs)[0])
             if recipe.state_roles else None)
    state, key = _state_and_key(module, recipe, fresh, fn=fn,
                                prefix=f"ragged_dot_{i}_")
    return ragged.ragged_dot(lhs, rhs, group_sizes, precision,
                             preferred_element_type, group_offset,
                             recipe=recipe, key=key, state=state)

  return call


@contextlib.contextmanager
def _lax_ragged_dot_as(fn: Callable[..., Any]) -> Iterator[None]:
  """``jax.lax.ragged_dot`` is ``fn`` within (calls that look it up on
  ``jax.lax`` at call time, as ``lax.ragged_dot(...)`` does)."""
  saved = jax.lax.ragged_dot
  jax.lax.ragged_dot = fn
  try:
    yield
  finally:
    jax.lax.ragged_dot = saved

# A packed kernel under a rule of None (or none): the activations as given.
WEIGHT_ONLY = registry.get_recipe(None)

# dot_for(layer, path, packed kernel or None) -> the layer's dot_general, or
# None to leave the layer as it is.
DotFor = Callable[[nn.Module, str, Any], Any]
# ragged_for(module, path, calls) -> the module's lax.ragged_dot, or None
# for lax's own.
RaggedFor = Callable[[nn.Module, str, list], Any]


@contextlib.contextmanager
def intercept_layers(dot_for: DotFor,
                     ragged_for: RaggedFor | None = None) -> Iterator[None]:
  """Runs each linen ``Dense`` / ``DenseGeneral`` / ``Einsum`` call with the
  ``dot_general`` that ``dot_for`` gives it (None: as it is), and every
  other module's methods with ``jax.lax.ragged_dot`` as ``ragged_for``
  gives it (None: lax's own; the innermost running module's applies).

  ``dot_for`` runs inside the layer's call, before it multiplies, so it may
  make variables and draw keys in the layer's scope. A packed kernel
  (an MXArray in the applied params) is passed to it and then multiplied as
  stored (``Dense``) or dequantized (``Einsum``).
  """
  calls: dict[int, list] = {}  # module id -> [ragged calls, open methods]

  def grouped(next_fun, args, kwargs, module):
    entry = calls.setdefault(id(module), [0, 0])
    entry[1] += 1
    try:
      fn = ragged_for(module, _module_path(module), entry)
      with _lax_ragged_dot_as(_LAX_RAGGED_DOT if fn is None else fn):
        return next_fun(*args, **kwargs)
    finally:
      entry[1] -= 1
      if not entry[1]:
        del calls[id(module)]

  def interceptor(next_fun, args, kwargs, context):
    module = context.module
    if ragged_for is not None and not isinstance(module, LAYERS):
      return grouped(next_fun, args, kwargs, module)
    if context.method_name != "__call__" or not isinstance(module, LAYERS):
      return next_fun(*args, **kwargs)
    packed = _packed_kernel(module)
    dot = dot_for(module, _module_path(module), packed)
    if dot is None:
      return next_fun(*args, **kwargs)
    if isinstance(module, nn.Einsum):
      return _linen_einsum(module, dot, *args, kernel=packed, **kwargs)
    if packed is not None:
      return _serve_dense(module, packed, dot, *args, **kwargs)
    saved = (module.dot_general, module.dot_general_cls)
    # Frozen dataclass fields, restored at once: only this call sees them.
    object.__setattr__(module, "dot_general_cls", None)
    object.__setattr__(module, "dot_general", dot)
    try:
      return next_fun(*args, **kwargs)
    finally:
      object.__setattr__(module, "dot_general", saved[0])
      object.__setattr__(module, "dot_general_cls", saved[1])

  with nn.intercept_methods(interceptor):
    yield


@contextlib.contextmanager
def linen_recipe(rules: Any = None, *,
                 rhs_sharding: Any = None) -> Iterator[None]:
  """Trains linen ``Dense`` / ``DenseGeneral`` / ``Einsum`` layers chosen by
  rules with their rule's recipe.

  Use around ``model.init`` / ``model.apply`` (also inside a jitted step):
  the model code is unchanged; a matching layer multiplies with the core
  ``dot_general`` and its rule's recipe, keeping delayed-scaling state and
  drawing keys in its own scope (see the module docstring). A layer whose
  kernel in the applied params is an MXArray (from
  :func:`~jaxfp8._src.mx.serving.quantize_params`) multiplies it as packed,
  with its rule's MX recipe quantizing the activations or, under a rule of
  None or no rule, with the activations as they are (weight-only).

  Args:
    rules: ``(regex, recipe)`` pairs matched against module paths (see
      :mod:`jaxfp8._src.recipes.rules`; None keeps a layer in high
      precision), one recipe for every layer, or None for ``"fp8_current"``
      everywhere. A recipe is anything
      :func:`~jaxfp8._src.recipes.registry.get_recipe` reads.
    rhs_sharding: under FSDP, the sharding every matching layer's kernel
      is gathered to (``PartitionSpec()``: whole); its codes and scales
      are gathered instead of float32 values (see the core
      ``dot_general``). None: XLA gathers what the GEMMs read.

  Grouped GEMMs (mixture of experts): a module whose path matches a rule
  and that calls ``jax.lax.ragged_dot`` / ``lax.ragged_dot`` in a compact
  method multiplies with :func:`jaxfp8.recipes.ragged_dot` and that
  rule's recipe instead (its ``i``-th call keeps a per-expert delayed
  state as ``ragged_dot_{i}_...`` variables in the module's scope). The
  name is looked up on ``jax.lax`` for the time of the module's call, in
  the calling thread's trace: a ``from jax.lax import ragged_dot`` made
  before is not seen, and two threads tracing at once would share it.

  Raises:
    ValueError: bad rules or recipe names (here); a recipe needing keys
      applied without the ``"recipe"`` rng stream (at apply).

  >>> import jax, jax.numpy as jnp
  >>> from flax import linen as nn
  >>> model = nn.Dense(4)
  >>> x = jnp.ones((2, 32))
  >>> with linen_recipe("fp8_delayed"):  # every layer
  ...   variables = model.init(jax.random.key(0), x)
  ...   y = model.apply(variables, x)
  >>> sorted(variables), y.shape
  (['_overwrite_with_gradient', 'params'], (2, 4))
  """
  fn = "linen_recipe"
  rules = rules_lib.check_rules(rules, fn=fn, get=registry.get_recipe,
                                default="fp8_current")
  rhs_sharding = gather.check_sharding(rhs_sharding, None, fn=fn)

  def dot_for(module, path, packed):
    recipe = rules_lib.layer_recipe(rules, path)
    if recipe is None:
      if packed is None:
        return None
      recipe = WEIGHT_ONLY
    return layer_dot(module, recipe, fn=fn, rhs_sharding=rhs_sharding)

  def ragged_for(module, path, entry):
    recipe = rules_lib.layer_recipe(rules, path)
    if recipe is None:
      return None
    # entry[0] counts the module's grouped GEMMs within its outermost call.
    return ragged_layer_dot(module, recipe, fn=fn, calls=entry)

  with intercept_layers(dot_for, ragged_for):
    yield
