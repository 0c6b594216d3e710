"""What was read from torch 2.13.0 (its CUDA 13.0 wheel; issue 39): the template arguments
of the reduction kernels.  ``gpu_reduce_kernel<scalar_t, out_t, vt0, input_vec_size>``:
sum of 16-bit floats ``<4, 8>`` (float accumulator), every other sum and every mean the
defaults ``<4, 4>`` (``input_vec_size = vt0``)."""
from __future__ import annotations

import torch

TORCH_VERSION = "2.13.0"
CUDA_VERSION = "13.0"

_16BIT = (torch.float16, torch.bfloat16)


def kernel_params(op: str, dtype: torch.dtype) -> dict:
    """``{"vt0", "input_vec_size"}`` of ``op``'s reduce kernel for input ``dtype``."""
    if op == "sum" and dtype in _16BIT:
        return {"vt0": 4, "input_vec_size": 8}
    return {"vt0": 4, "input_vec_size": 4}


def version_mismatch() -> str | None:
    """A sentence when the running torch is not the version the models were read from."""
    v = torch.__version__.split("+")[0]
    if v == TORCH_VERSION:
        return None
    return (f"the CUDA kernel models were read from torch {TORCH_VERSION} (CUDA "
            f"{CUDA_VERSION}); this is torch {torch.__version__}, whose kernels may sum in "
            f"another order")
