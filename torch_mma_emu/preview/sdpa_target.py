"""Which kernel PyTorch would run ``F.scaled_dot_product_attention`` with on the *target* GPU.

The preview must model the GPU's choice, not this machine's: on CPU PyTorch takes its math
path (bf16 / fp16 upcast to fp32, then plain ``bmm``) whenever its one fused kernel cannot
run, e.g. for a mask that requires grad or a value head dim that differs from the query's,
where a GPU runs a fused kernel in the input dtype.  The rules below follow PyTorch's CUDA
selection (``select_sdp_backend`` in ``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``
and the shared checks of ``sdp_utils_cpp.h``); docs/preview.md, "Attention", has the table.
Every fused kernel (flash, memory-efficient, cuDNN) is emulated in the same flash form
(attention.py), so only "a fused kernel" versus "the math path" decides the bits.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..registry import ARCHS, DEFAULT_ARCH

__all__ = ["Choice", "gpu_choice", "SM"]

# compute capability of the registry's NVIDIA archs
SM = {a.name: a.capability for a in ARCHS.values() if a.capability}
# ROCm: PyTorch's AOTriton kernels are built for CDNA2 and later (CDNA1, MI100, has none:
# the math path)
ROCM_FUSED_FROM_CDNA = 2
_HALF = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Choice:
    fused: bool
    kernel: str          # "flash", "efficient", "cudnn" or "math"
    why: str = ""        # why no fused kernel, for the record's note


def _flags():
    b = torch.backends.cuda
    return dict(flash=b.flash_sdp_enabled(), efficient=b.mem_efficient_sdp_enabled(),
                cudnn=getattr(b, "cudnn_sdp_enabled", lambda: False)())


def _heads_ok(q, k, v, gqa: bool, gqa_supported: bool = True) -> bool:
    if not (q.shape[0] == k.shape[0] == v.shape[0]):
        return False
    hq, hk, hv = q.shape[1], k.shape[1], v.shape[1]
    if gqa and gqa_supported:
        return hk == hv and hq % hk == 0
    return hq == hk == hv


def _mask_shape_ok(mask, q, k) -> bool:
    """cuDNN's check_attn_mask_shape."""
    if mask is None:
        return True
    if mask.requires_grad:
        return False
    if mask.shape[-2] not in (q.shape[2], 1) or mask.shape[-1] not in (k.shape[2], 1):
        return False
    if mask.dim() == 2:
        return True
    return mask.dim() == 4 and mask.shape[0] in (1, q.shape[0]) and \
        mask.shape[1] in (1, q.shape[1])


def _nvidia(sm, q, k, v, mask, p, causal, gqa, grad) -> Choice:
    dt = q.dtype
    eq, ek, ev = q.shape[-1], k.shape[-1], v.shape[-1]
    stride1 = all(t.stride(-1) == 1 for t in (q, k, v))
    flags = _flags()
    # flash (FlashAttention-2): sm80 - sm121
    flash = (flags["flash"] and (8, 0) <= sm <= (12, 1) and mask is None and dt in _HALF
             and eq == ek == ev and eq <= 256 and (not causal or q.shape[2] == k.shape[2])
             and _heads_ok(q, k, v, gqa) and (stride1 or eq == 1))
    if flash and grad and sm in ((8, 6), (8, 9), (12, 0)):
        flash = eq <= 192 or (p == 0 and eq > 224)
    if flash:
        return Choice(True, "flash")
    # cuDNN attention: sm80 - sm121, fp16 / bf16
    dlim = 256 if sm[0] in (9, 10) else 128
    cudnn = (flags["cudnn"] and (8, 0) <= sm <= (12, 1) and dt in _HALF
             and not (torch.are_deterministic_algorithms_enabled()
                      and not torch.is_deterministic_algorithms_warn_only_enabled())
             and _mask_shape_ok(mask, q, k) and float(p * 16).is_integer()
             and eq == ek and eq <= dlim and ev <= dlim and eq % 8 == 0 and ev % 8 == 0
             and k.shape[2] != 1 and _heads_ok(q, k, v, gqa) and (stride1 or eq == 1))
    if cudnn:
        return Choice(True, "cudnn")
    # memory-efficient (CUTLASS): sm50 - sm121; fp16 / fp32 (+ bf16 from sm80)
    half = dt in _HALF
    align = (8 if half else 4) if sm[0] >= 8 else (8 if half else 1)
    dts = (torch.float16, torch.float32) + ((torch.bfloat16,) if sm[0] >= 8 else ())
    eff = (flags["efficient"] and dt in dts and eq == ek and eq % align == 0
           and ev % align == 0 and stride1 and _heads_ok(q, k, v, gqa))
    if eff:
        return Choice(True, "efficient")
    return Choice(False, "math", f"no fused kernel on sm{sm[0]}{sm[1]} for these inputs "
                                 f"({dt}, head dims {eq}/{ek}/{ev}, mask "
                                 f"{'none' if mask is None else tuple(mask.shape)})")


def _rocm(arch, q, k, v, mask, p, causal, gqa) -> Choice:
    if ARCHS[arch].cdna < ROCM_FUSED_FROM_CDNA:
        return Choice(False, "math", f"PyTorch has no fused attention kernel for {arch}")
    dt = q.dtype
    eq, ek, ev = q.shape[-1], k.shape[-1], v.shape[-1]
    flags = _flags()
    if (flags["flash"] and mask is None and dt in _HALF and eq == ek == ev and eq <= 512
            and _heads_ok(q, k, v, gqa)):
        return Choice(True, "flash")
    align = 8 if dt in _HALF else 4
    if (flags["efficient"] and dt in _HALF + (torch.float32,) and eq == ek
            and eq % align == 0 and ev % align == 0 and max(eq, ev) <= 512
            and _heads_ok(q, k, v, gqa, gqa_supported=False)
            and (mask is None or mask.dtype in (torch.bool, dt))):
        return Choice(True, "efficient")
    return Choice(False, "math", f"no fused kernel on {arch} for these inputs")


def gpu_choice(arch: str, q, k, v, mask: Optional[torch.Tensor], dropout_p: float,
               is_causal: bool, enable_gqa: bool) -> Choice:
    """The kernel PyTorch picks on ``arch`` (a registry arch name; any other name, e.g. a
    custom spec's, is taken as a GPU of the default arch, ``registry.DEFAULT_ARCH``) for
    these arguments."""
    if not (q.dim() == k.dim() == v.dim() == 4):
        return Choice(False, "math", "every fused kernel takes 4-D query, key and value")
    if q.shape[2] == 0 or k.shape[2] == 0 or not (q.dtype == k.dtype == v.dtype):
        return Choice(False, "math", "empty sequence or mixed dtypes")
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if arch in ARCHS and ARCHS[arch].vendor == "amd":
        return _rocm(arch, q, k, v, mask, dropout_p, is_causal, enable_gqa)
    sm = SM.get(arch, SM[DEFAULT_ARCH])   # a custom spec's own arch name: the default arch
    return _nvidia(sm, q, k, v, mask, dropout_p, is_causal, enable_gqa, grad)
