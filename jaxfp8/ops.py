"""Pallas kernels for fp8 and MX matrix products, and their jnp references."""
from jaxfp8._src.kernels.scaled_matmul import scaled_matmul as scaled_matmul
from jaxfp8._src.kernels.scaled_matmul import scaled_matmul_reference as scaled_matmul_reference

__all__ = ["scaled_matmul", "scaled_matmul_reference"]
