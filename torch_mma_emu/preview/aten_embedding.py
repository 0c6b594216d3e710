"""Under ``emulate``: ``aten.embedding_dense_backward`` (``nn.Embedding``'s weight gradient)
summed in the order and precision of torch 2.13.0's CUDA kernels
(torch_mma_emu/aten_cuda/embedding.py: the feature kernel for up to 3072 indices, the
sort + segment kernels otherwise or with ``scale_grad_by_freq``), on NVIDIA targets.

Calls the model does not cover run natively and are counted in the summary's "ran
natively" line: AMD targets and Specs without an NVIDIA arch, float64 gradients, tensors
not on the CPU.
"""
from __future__ import annotations

import torch

from ..aten_cuda import embedding as emb
from .aten_math import nvidia_target
from .aten_reductions import warn_version

__all__ = ["handle", "OPS", "KIND", "LABEL", "model"]

KIND = "reduction"
LABEL = f"torch {emb.TORCH_VERSION} CUDA kernel"
OPS = ("embedding_dense_backward",)
_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def _args(args, kwargs):
    names = ("grad_output", "indices", "num_weights", "padding_idx", "scale_grad_by_freq")
    vals = dict(zip(names, args))
    vals.update({k: v for k, v in kwargs.items() if k in names})
    return [vals.get(n) for n in names]


def model(grad: torch.Tensor, indices: torch.Tensor, num_weights: int, padding_idx: int,
          scale_grad_by_freq: bool) -> torch.Tensor:
    """The CUDA kernel's weight gradient (num_weights, D) of CPU tensors ``grad``
    (float32 / float16 / bfloat16, shape ``indices.shape + (D,)``) and ``indices``."""
    return emb.embedding_dense_backward(grad, indices, num_weights, padding_idx,
                                        scale_grad_by_freq)


def _why_native(mode, grad, indices) -> str:
    if not all(isinstance(t, torch.Tensor) and t.device.type == "cpu"
               for t in (grad, indices)):
        return "not a CPU tensor"
    if grad.dtype not in _DTYPES:
        return f"{grad.dtype}: no model"
    if indices.dtype not in (torch.int64, torch.int32):
        return f"{indices.dtype} indices: no model"
    if not nvidia_target(mode):
        return f"{mode.policy.arch_name}: no model of this target's embedding kernel"
    return ""


def handle(mode, func, args, kwargs):
    """``aten.embedding_dense_backward`` (grad_output, indices, num_weights, padding_idx,
    scale_grad_by_freq) and its ``.out`` form."""
    grad, indices, num_weights, padding_idx, scale = _args(args, kwargs)
    why = _why_native(mode, grad, indices)
    if why:
        mode.count_native(func, why)
        return func(*args, **kwargs)
    n = indices.numel()
    if n and (int(indices.min()) < 0 or int(indices.max()) >= int(num_weights)):
        return func(*args, **kwargs)        # torch's own error for an index out of range
    warn_version(mode, emb.version_mismatch())
    res = model(grad, indices, num_weights, padding_idx, bool(scale))
    which = emb.path(n, bool(scale))
    mode.record(func, KIND, LABEL, [grad.shape, indices.shape],
                f"embedding_dense_backward_cuda: {which} path ({n} indices)")
    out = kwargs.get("out")
    if out is not None:
        out.resize_(res.shape)
        return out.copy_(res)
    return res
