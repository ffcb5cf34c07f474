"""Neural-network helpers for narrow formats (see :mod:`jaxfp8.nn.initializers`)."""
from jaxfp8.nn import initializers as initializers

__all__ = ["initializers"]
