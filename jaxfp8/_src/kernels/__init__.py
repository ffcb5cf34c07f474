"""Pallas kernels: one module per op (kernel, jitted wrapper, jnp reference);
the Triton ones here, the Mosaic GPU ones in :mod:`.mosaic`, the choice
between them and XLA in :mod:`.dispatch`."""
