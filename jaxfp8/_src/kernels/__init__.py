"""GEMM kernels, a folder per op (Tokamax's layout): ``scaled_matmul/``
(per-tensor fp8), ``mx_matmul/`` (MX block scales), ``blockwise_matmul/``
(fp8 1x128 / 128x128 blocks), each holding its dispatch (``api.py``, with
``implementation=``), its jnp reference (``reference.py``) and one module
per backend (``triton.py``, ``mosaic_gpu.py``). What several ops share sits
here: :mod:`.common` (every backend), :mod:`.triton_common`,
:mod:`.mosaic_gpu_common`, the Mosaic GPU block-scaled kernel both block-scaled
ops run (:mod:`.block_scaled_mosaic_gpu`), and how a dispatch chooses
(:mod:`.implementation`)."""
