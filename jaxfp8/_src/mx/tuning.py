"""How MX conversion is written for XLA CPU, chosen per JAX version.

XLA on CPU vectorizes some forms of the same integer arithmetic into tight
loops and runs others scalar by scalar, and which form it vectorizes changed
between jaxlib 0.10 and 0.11. Each flag below picks between two forms that
give the same bits (the tests run both), for the installed JAX where the
versions want different ones; the other form stays in the code. Every flag
is read when a function is traced, so a test can flip it (and clear the jit
cache).

jaxlib 0.12 wants 0.11's choices: ``python -m jaxfp8 bench mx --tuning``
times each flag both ways in one run (on jaxlib 0.12.0.1 three of the four
favour 0.11's form and the fourth, ``PACK_6BIT_AS_RUNS``, is within the
noise). The timings behind each choice are in the benchmark log
(``docs/benchmarks/log.md``).
"""
from __future__ import annotations

from jaxfp8._src import compat

_AT_LEAST_0_11 = compat.JAX_VERSION[:2] >= (0, 11)

# Where 6-bit codes are packed into one word per group of four: inside the
# quantize branch (:func:`jaxfp8._src.mx.quantize.quantize_blocks`), fused
# with the code arithmetic, which jaxlib 0.10 vectorizes; or in one loop of
# its own after the branch, which jaxlib 0.11 runs faster.
PACK_6BIT_IN_BRANCH = not _AT_LEAST_0_11

# How :func:`jaxfp8._src.mx.pack.pack_bytes` turns those words into bytes:
# as runs of 8 + 4 bytes per four groups, which jaxlib 0.10 copies into place
# in runs; or by cutting the 3 low bytes out of each group's word, which
# costs jaxlib 0.10 index arithmetic per byte but is what jaxlib 0.11
# vectorizes.
PACK_6BIT_AS_RUNS = not _AT_LEAST_0_11

# How :func:`jaxfp8._src.mx.pack.unpack` reads 6-bit codes back: four groups
# from the three 32-bit words of their 12 bytes (jaxlib 0.11 vectorizes it);
# or a zero byte appended to each group of 3 bytes to make a word (the
# faster form on jaxlib 0.10).
UNPACK_6BIT_FROM_WORDS = _AT_LEAST_0_11

# How :func:`jaxfp8._src.mx.scales.block_max` reduces blocks of 16: as the
# maximum of their two rows of 8, then a reduce over 8; or one reduce over
# both axes. Every version now takes the first: NVFP4's blocks arrive as
# tiles (:func:`jaxfp8._src.mx.blockwise.tile_amax`), and from the second
# form jaxlib 0.10 too folds the two axes back into one reduce over the 16
# minor elements, which runs element by element (the second form was 0.10's
# faster one only while NVFP4 reduced its unblocked rows).
MAX_OF_ROW_PAIRS = True
