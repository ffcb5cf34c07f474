"""Mosaic GPU kernels for Hopper: one module per op (kernel, jitted wrapper,
jnp reference) over a shared pipeline (:mod:`.common`)."""
