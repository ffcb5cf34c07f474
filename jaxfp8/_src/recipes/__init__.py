"""Training recipes: how each operand of each GEMM of a step is quantized.

``spec`` (Quantizer, Recipe), ``registry`` (the named recipes),
``operand`` (quantizing one operand), ``core`` (the ``dot_general`` that
runs any recipe), the quantizers of the new recipes (``blockwise``,
``nvfp4``, ``hadamard``) and the Flax integrations (``linen``, ``nnx``).
"""
