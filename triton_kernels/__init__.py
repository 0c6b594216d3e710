"""Triton kernels that run on the real tensor cores, and on the CPU with a GPU's bits inside
``torch_mma_emu.triton.emulate(arch)`` (docs/triton.md).

* :func:`matmul` (gemm.py): the model's chain, ``acc = C``; ``acc = tl.dot(a, b, acc)`` per K
  block; every format (fp16, bf16, tf32, fp32, the fp32 splits, fp8 with
  ``max_num_imprecise_acc``), batches on the grid (docs/gpu.md);
* :func:`bmm` (bmm.py): a batched GEMM with 3-D ``tl.dot`` calls;
* :func:`attention` (attention.py): fused attention forward with an online softmax;
* :func:`scaled_matmul` (scaled_gemm.py): MXFP8 / MXFP4 through ``tl.dot_scaled``;
* :func:`sum_matmul` (sum_gemm.py): fp32, ``tl.sum(a[:, :, None] * b[None, :, :], 1)`` per K
  block, which Triton's compiler turns into tf32 dots;
* :func:`row_sum`, :func:`softmax`, :func:`layer_norm`, :func:`exp2_div` (rowwise.py): the
  bits around the dots: reductions, contracted fmas, approximate functions.

Importing this package needs ``triton``; running a kernel needs a CUDA device, an emulate /
interpret block, or ``TRITON_INTERPRET=1`` (whose ``tl.dot`` is NumPy's, not a GPU's).
"""
from .attention import attention
from .bmm import bmm
from .gemm import FORMATS, block_k_for, matmul, run_k
from .scaled_gemm import scaled_matmul
from .rowwise import exp2_div, layer_norm, row_sum, softmax
from .sum_gemm import sum_matmul

__all__ = ["matmul", "bmm", "attention", "scaled_matmul", "sum_matmul", "row_sum", "softmax",
           "layer_norm", "exp2_div", "FORMATS", "block_k_for", "run_k"]
