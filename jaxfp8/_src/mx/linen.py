"""Flax linen around the MX ``dot_general``: a module and one-call conversion.

* :class:`MXDotGeneral`: the MX ``dot_general`` as a linen module, for
  ``nn.Dense(dot_general_cls=...)``.
* :func:`linen_mx`: a context manager (``nn.intercept_methods``) under which
  an unchanged model's ``Dense`` / ``DenseGeneral`` / ``Einsum`` layers whose
  module path matches the rules (:mod:`jaxfp8._src.mx.recipes`) multiply
  with :func:`~jaxfp8._src.mx.train.dot_general` (``Einsum`` through
  ``jnp.einsum``'s dot_general hook, see :func:`jaxfp8._src.compat.einsum`),
  and layers whose kernel is packed (:mod:`jaxfp8._src.mx.serving`)
  multiply it as packed: the interception of
  :func:`jaxfp8._src.recipes.linen.intercept_layers` with MX recipes
  (:func:`jaxfp8._src.recipes.linen.linen_recipe` takes any recipe).

An integration module: it imports Flax, and ``jaxfp8.mx`` loads it on first
use of one of these names.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

from flax import linen as nn

from jaxfp8._src.mx import recipes
from jaxfp8._src.mx import train as mx_train
from jaxfp8._src.recipes import linen as recipe_linen


class MXDotGeneral(nn.Module):
  """The MX ``dot_general`` as a linen module: ``nn.Dense(dot_general_cls=
  functools.partial(MXDotGeneral, recipe=...))``.

  Stochastic rounding of gradients draws its key from the ``"mx"`` rng
  stream (``model.apply(..., rngs={"mx": key})``).

  Attributes:
    recipe: an :class:`~jaxfp8._src.mx.recipes.MXRecipe` or its string form.
  """
  recipe: Any = "mxfp8"

  @nn.compact
  def __call__(self, lhs, rhs, dimension_numbers, precision=None,
               preferred_element_type=None, **kwargs):
    recipe = recipes.get_recipe(self.recipe)
    key = self.make_rng("mx") if recipe.stochastic_grad else None
    return mx_train.dot_general(lhs, rhs, dimension_numbers, precision,
                                preferred_element_type, recipe=recipe,
                                key=key, **kwargs)


@contextlib.contextmanager
def linen_mx(rules: Any = None) -> Iterator[None]:
  """Runs linen ``Dense`` / ``DenseGeneral`` / ``Einsum`` layers chosen by
  rules in MX, and applies a model from packed weights.

  Use around ``model.init`` / ``model.apply`` (also inside a jitted step):
  the model code is unchanged; matching layers call
  :func:`~jaxfp8._src.mx.train.dot_general` with their rule's recipe. A
  layer whose kernel in the applied params is an MXArray (from
  :func:`~jaxfp8._src.mx.serving.quantize_params`) multiplies it as packed,
  with its rule's recipe quantizing the activations (dynamic MX activations)
  or, under a rule of None or no rule, with the activations as they are
  (weight-only).

  Args:
    rules: ``(regex, recipe)`` pairs (see :mod:`jaxfp8._src.mx.recipes`),
      one recipe for every layer, or None for ``"mxfp8"`` everywhere.

  >>> import jax, jax.numpy as jnp
  >>> from flax import linen as nn
  >>> model = nn.Dense(4)
  >>> params = model.init(jax.random.key(0), jnp.ones((2, 32)))
  >>> with linen_mx([("Dense", "mxfp4")]):
  ...   y = model.apply(params, jnp.ones((2, 32)))
  >>> y.shape
  (2, 4)
  """
  rules = recipes.check_rules(rules, fn="linen_mx")

  def dot_for(module, path, packed):
    del module
    recipe = recipes.layer_recipe(rules, path, packed=packed is not None)
    if recipe is None:
      return None
    return functools.partial(mx_train.dot_general, recipe=recipe)

  with recipe_linen.intercept_layers(dot_for):
    yield
