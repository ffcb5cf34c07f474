"""Pallas kernels: one module per op (kernel, jitted wrapper, jnp reference)."""
