"""fp8, MXFP8 and fp8 blockwise matrix-product kernels, and their jnp references.

Each op has one dispatch taking ``implementation=`` (``"xla"``,
``"triton"``, ``"mosaic_gpu"``, or None for the best that can run the case):
``scaled_matmul_dispatch``, ``mx_matmul_dispatch``,
``blockwise_matmul_dispatch``. The Mosaic GPU kernels (``*_mgpu``,
``blockwise_matmul``) are the ones it picks on Hopper (compute capability
9.x); the Triton kernels (``scaled_matmul``, ``mx_matmul``) are kept,
selectable, while JAX keeps Pallas' Triton backend. Off a GPU, every kernel
runs its jnp reference, or in Pallas' interpreters with ``interpret=True``.

>>> import jax.numpy as jnp, jaxfp8
>>> a = jnp.ones((2, 32), jnp.float8_e4m3fn)
>>> jaxfp8.ops.scaled_matmul(a, a, 2.0, 0.5, out_dtype=jnp.float32)
Array([[32., 32.],
       [32., 32.]], dtype=float32)
"""
from jaxfp8._src.kernels.blockwise_matmul.api import blockwise_matmul_dispatch as blockwise_matmul_dispatch
from jaxfp8._src.kernels.blockwise_matmul.mosaic_gpu import blockwise_matmul as blockwise_matmul
from jaxfp8._src.kernels.blockwise_matmul.reference import blockwise_matmul_reference as blockwise_matmul_reference
from jaxfp8._src.kernels.mx_matmul.api import mx_matmul_dispatch as mx_matmul_dispatch
from jaxfp8._src.kernels.mx_matmul.mosaic_gpu import mx_matmul_mgpu as mx_matmul_mgpu
from jaxfp8._src.kernels.mx_matmul.reference import mx_matmul_reference as mx_matmul_reference
from jaxfp8._src.kernels.mx_matmul.reference import MXFP8_FORMATS as MXFP8_FORMATS
from jaxfp8._src.kernels.mx_matmul.triton import mx_matmul as mx_matmul
from jaxfp8._src.kernels.scaled_matmul.api import dot_general as dot_general
from jaxfp8._src.kernels.scaled_matmul.api import scaled_matmul_dispatch as scaled_matmul_dispatch
from jaxfp8._src.kernels.scaled_matmul.mosaic_gpu import scaled_matmul_mgpu as scaled_matmul_mgpu
from jaxfp8._src.kernels.scaled_matmul.reference import scaled_matmul_reference as scaled_matmul_reference
from jaxfp8._src.kernels.scaled_matmul.triton import scaled_matmul as scaled_matmul

__all__ = [
    "MXFP8_FORMATS", "blockwise_matmul", "blockwise_matmul_dispatch",
    "blockwise_matmul_reference", "dot_general", "mx_matmul", "mx_matmul_dispatch",
    "mx_matmul_mgpu", "mx_matmul_reference", "scaled_matmul", "scaled_matmul_dispatch",
    "scaled_matmul_mgpu", "scaled_matmul_reference",
]
