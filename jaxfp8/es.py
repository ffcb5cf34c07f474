"""Evolution strategies with fp8 populations: exact, antithetic, shardable.

``EvosaxStrategy`` wraps an evosax strategy (evosax is imported on first use
of that name, so this module imports without it).

>>> import jax, jaxfp8
>>> jaxfp8.es.perturbations(jax.random.key(0), 8, (100,), "e4m3").shape
(8, 100)
"""
from jaxfp8._src.es.narrow_population import evaluate as evaluate
from jaxfp8._src.es.narrow_population import NarrowPopulation as NarrowPopulation
from jaxfp8._src.es.openai_es import centered_rank as centered_rank
from jaxfp8._src.es.openai_es import ESState as ESState
from jaxfp8._src.es.openai_es import OpenAIES as OpenAIES
from jaxfp8._src.es.population import perturbations as perturbations
from jaxfp8._src.es.population import sample_population as sample_population

# Defined in jaxfp8._src.es.evosax_strategy, which imports evosax: loaded on
# first use.
_EVOSAX_NAMES = ("EvosaxStrategy",)


def __getattr__(name: str):
  if name in _EVOSAX_NAMES:
    from jaxfp8._src.es import evosax_strategy  # pylint: disable=g-import-not-at-top
    return getattr(evosax_strategy, name)
  raise AttributeError(f"module 'jaxfp8.es' has no attribute {name!r}")


def __dir__():
  return sorted({*globals(), *_EVOSAX_NAMES})


__all__ = [
    "ESState", "EvosaxStrategy", "NarrowPopulation", "OpenAIES",
    "centered_rank", "evaluate", "perturbations", "sample_population",
]
