"""What was read from torch 2.13.0 (its CUDA 13.0 wheel; issue 39): the template arguments
of the reduction kernels, ``gpu_reduce_kernel<scalar_t, out_t, vt0, input_vec_size>``:
sums and means of 16-bit floats ``<4, 8>`` (float accumulator), of fp32 and fp64 the
defaults ``<4, 4>`` (``input_vec_size = vt0``).

The evidence is the wheel's sm_90 SASS, read by ``scripts/regen_aten_cuda_facts.py`` into
``sass_facts.json`` (next to this file; tests/test_aten_cuda_facts.py checks the models'
constants against it).  It settles the question later ATen sources raised (fp32 sums and
means whose reduced size is a multiple of 1024 run with ``<8, 8>``): torch 2.13.0 has no
such instantiation.  Its fp32 ``sum_functor`` and ``MeanOps`` ``reduce_kernel`` exist only
as ``ReduceOp<float, ..., 4, 4>``, so ``FP32_VT0_8_AT_1024`` stays off (the model still
takes both settings, for a later torch).

var / std (``WelfordOps``) kernels exist only as ``<2, 2>`` (aten_cuda/moments.py's
``VT0``); the softmax backward's persistent kernel covers rows up to 2^10 and its block
kernels have ILP 16 bytes / element (aten_cuda/softmax_backward.py).

``SHUFFLES``: the warp shuffle each modelled kernel's SASS uses (``SHFL.DOWN``: a halving
where lane ``l`` adds lane ``l + d``; ``SHFL.BFLY``: an XOR butterfly).
"""
from __future__ import annotations

import torch

TORCH_VERSION = "2.13.0"
CUDA_VERSION = "13.0"
FP32_VT0_8_AT_1024 = False        # sass_facts.json: no fp32 <8, 8> reduce_kernel in 2.13.0
SHUFFLES = {"reduce_kernel": "DOWN", "softmax_warp_forward": "BFLY",
            "vectorized_layer_norm_kernel": "DOWN"}

_16BIT = (torch.float16, torch.bfloat16)


def kernel_params(op: str, dtype: torch.dtype, reduce_size: int = 0) -> dict:
    """``{"vt0", "input_vec_size"}`` of ``op``'s ("sum" / "mean") reduce kernel for input
    ``dtype`` and ``reduce_size`` inputs per output."""
    if dtype in _16BIT:
        return {"vt0": 4, "input_vec_size": 8}
    if FP32_VT0_8_AT_1024 and dtype == torch.float32 and reduce_size % 1024 == 0:
        return {"vt0": 8, "input_vec_size": 8}
    return {"vt0": 4, "input_vec_size": 4}


def version_mismatch() -> str | None:
    """A sentence when the running torch is not the version the models were read from."""
    v = torch.__version__.split("+")[0]
    if v == TORCH_VERSION:
        return None
    return (f"the CUDA kernel models were read from torch {TORCH_VERSION} (CUDA "
            f"{CUDA_VERSION}); this is torch {torch.__version__}, whose kernels may sum in "
            f"another order")
