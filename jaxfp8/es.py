"""Evolution strategies with fp8 populations: exact, antithetic, shardable.

>>> import jax, jaxfp8
>>> jaxfp8.es.perturbations(jax.random.key(0), 8, (100,), "e4m3").shape
(8, 100)
"""
from jaxfp8._src.es.openai_es import centered_rank as centered_rank
from jaxfp8._src.es.openai_es import ESState as ESState
from jaxfp8._src.es.openai_es import OpenAIES as OpenAIES
from jaxfp8._src.es.population import perturbations as perturbations
from jaxfp8._src.es.population import sample_population as sample_population

__all__ = [
    "ESState", "OpenAIES", "centered_rank", "perturbations",
    "sample_population",
]
