"""Under ``emulate``: ``torch.var`` / ``std`` / ``var_mean`` / ``std_mean`` (the
``aten.<op>.correction`` ops, any dims, ``correction``, ``keepdim``; fp32 / fp16 / bf16 CPU
tensors) with the bits of torch 2.13.0's CUDA ``reduce_kernel`` over ``WelfordOps``
(torch_mma_emu/aten_cuda/moments.py) on the target GPU's SM count.

Recorded as ``CPU order`` with the reason: fp64 and complex tensors, AMD targets and Specs
without an arch, empty tensors and 2^31 or more elements.  The ``out=`` overloads are not
routed (the census names them).
"""
from __future__ import annotations

import torch

from .. import aten_cuda
from ..aten_cuda import moments
from . import aten_reductions
from .records import KERNEL_NATIVE

__all__ = ["handle", "OPS", "KIND"]

KIND = "reduction"
OPS = moments.OPS
_LABEL = f"torch {aten_cuda.TORCH_VERSION} CUDA kernel"


def _args(x, dim=None, *, correction=None, keepdim=False):
    return x, dim, correction, keepdim


def _why_native(mode, x) -> str:
    if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
        return "not a CPU tensor"
    if x.dtype not in moments.FLOATS:
        return f"{x.dtype}: no model"
    if x.numel() == 0 or x.numel() >= 2 ** 31:
        return "size outside the model (empty, or 64-bit indexing)"
    if aten_reductions.target_gpu(mode) is None:
        return f"{mode.policy.arch_name}: no model of this target's reduction kernel"
    return ""


def handle(mode, func, args, kwargs):
    """``aten.var`` / ``std`` / ``var_mean`` / ``std_mean`` ``.correction``."""
    op = func.overloadpacket.__name__
    x, dim, correction, keepdim = _args(*args, **kwargs)
    why = _why_native(mode, x)
    if why:
        mode.record(func, KIND, KERNEL_NATIVE, [x.shape], why)
        return func(*args, **kwargs)
    aten_reductions.warn_version(mode, aten_cuda.version_mismatch())
    gpu = aten_reductions.target_gpu(mode)
    c = 1.0 if correction is None else float(correction)
    out = moments.moments(x.detach(), dim, correction=c, keepdim=bool(keepdim), op=op, gpu=gpu)
    mode.record(func, KIND, _LABEL, [x.shape],
                f"{gpu.name}: " + moments.describe(x, dim, gpu))
    return out
