"""Random numbers in FP8, FP6 and FP4, under jax.random's signatures.

Each sampler takes jax.random's arguments; a narrow ``dtype`` gives samples of
the real-valued law rounded to nearest into that format, by one of three
methods (keyword-only ``method``): ``"exact"`` (the rounded law to within
2^-32 per value, from integer arithmetic on few random bits), ``"table"`` (one
lookup, resolution 2^-16) or ``"cast"`` (float32 draw, then round).
``rounded_law`` gives the exact law of a narrow sample, ``table_law`` the law
of the table method. See ``docs/random.md``.

>>> import jax, jax.numpy as jnp, jaxfp8
>>> x = jaxfp8.random.normal(jax.random.key(0), (1024,), jnp.float8_e4m3fn)
>>> x.dtype
dtype(float8_e4m3fn)
"""
from jaxfp8._src.random.config import default_method as default_method
from jaxfp8._src.random.config import get_default_method as get_default_method
from jaxfp8._src.random.config import METHODS as METHODS
from jaxfp8._src.random.config import set_default_method as set_default_method
from jaxfp8._src.random.continuous import beta as beta
from jaxfp8._src.random.continuous import cauchy as cauchy
from jaxfp8._src.random.continuous import chisquare as chisquare
from jaxfp8._src.random.continuous import double_sided_maxwell as double_sided_maxwell
from jaxfp8._src.random.continuous import exponential as exponential
from jaxfp8._src.random.continuous import f as f
from jaxfp8._src.random.continuous import gamma as gamma
from jaxfp8._src.random.continuous import generalized_normal as generalized_normal
from jaxfp8._src.random.continuous import gumbel as gumbel
from jaxfp8._src.random.continuous import laplace as laplace
from jaxfp8._src.random.continuous import loggamma as loggamma
from jaxfp8._src.random.continuous import logistic as logistic
from jaxfp8._src.random.continuous import lognormal as lognormal
from jaxfp8._src.random.continuous import maxwell as maxwell
from jaxfp8._src.random.continuous import normal as normal
from jaxfp8._src.random.continuous import pareto as pareto
from jaxfp8._src.random.continuous import rayleigh as rayleigh
from jaxfp8._src.random.continuous import t as t
from jaxfp8._src.random.continuous import triangular as triangular
from jaxfp8._src.random.continuous import truncated_normal as truncated_normal
from jaxfp8._src.random.continuous import uniform as uniform
from jaxfp8._src.random.continuous import wald as wald
from jaxfp8._src.random.continuous import weibull_min as weibull_min
from jaxfp8._src.random.discrete import bernoulli as bernoulli
from jaxfp8._src.random.discrete import binomial as binomial
from jaxfp8._src.random.discrete import categorical as categorical
from jaxfp8._src.random.discrete import multinomial as multinomial
from jaxfp8._src.random.discrete import rademacher as rademacher
from jaxfp8._src.random.laws import rounded_law as rounded_law
from jaxfp8._src.random.multivariate import ball as ball
from jaxfp8._src.random.multivariate import dirichlet as dirichlet
from jaxfp8._src.random.multivariate import multivariate_normal as multivariate_normal
from jaxfp8._src.random.multivariate import orthogonal as orthogonal
from jaxfp8._src.random.table_method import table_law as table_law

__all__ = [
    "METHODS", "ball", "bernoulli", "beta", "binomial", "categorical",
    "cauchy", "chisquare", "default_method", "dirichlet",
    "double_sided_maxwell", "exponential", "f", "gamma", "generalized_normal", "get_default_method",
    "gumbel", "laplace", "loggamma", "logistic", "lognormal", "maxwell",
    "multinomial", "multivariate_normal", "normal", "orthogonal", "pareto", "rademacher",
    "rayleigh", "rounded_law", "set_default_method", "t", "table_law",
    "triangular", "truncated_normal", "uniform", "wald", "weibull_min",
]
