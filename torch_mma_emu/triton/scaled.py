"""``tl.dot_scaled`` computed by the emulator (Triton 3.6's interpreter has no
``create_dot_scaled`` at all).

Native on Blackwell (sm100 ``tcgen05.mma`` block_scale, sm120 ``mma.sync`` block_scale): the
arch's MX / NVFP4 row with the scales, one chain step per dot.  Elsewhere on NVIDIA Triton
decomposes the op (DecomposeScaledBlocked, read from its TTGIR): each operand converted to
bf16 (fp16 when the other side is fp16), multiplied in bf16 by the scale built as
``bitcast<bf16>(s << 7)`` (so ``s = 0`` gives 0, not 2**-127), NaN where ``s = 0xFF`` (unless
fast_math), then a bf16 ``tl.dot``.  AMD is not modelled (raises).
"""
from __future__ import annotations

import numpy as np
import torch

from ..formats import value_table
from ..ops import emulated_mm
from .dot import to_torch

ELEM = {"E4M3": "fp8_e4m3", "E5M2": "fp8_e5m2", "E2M1": "fp4_e2m1", "BF16": "bf16",
        "FP16": "fp16"}


def elem_format(fmt_enum) -> str:
    name = getattr(fmt_enum, "name", str(fmt_enum)).split(".")[-1].upper()
    if name not in ELEM:
        raise NotImplementedError(f"torch_mma_emu.triton: tl.dot_scaled with {name} operands "
                                  f"is not modelled (modelled: {', '.join(ELEM)})")
    return ELEM[name]


def _unpack_fp4(codes: torch.Tensor, axis: int) -> torch.Tensor:
    """Two e2m1 codes per byte, the low nibble first, along ``axis``."""
    lo, hi = codes & 0xF, codes >> 4
    return torch.stack((lo, hi), dim=axis + 1).flatten(axis, axis + 1)


def _operand(h, fmt, k_pack, is_lhs):
    if fmt != "fp4_e2m1":
        return to_torch(h.data, fmt)
    t = torch.from_numpy(np.ascontiguousarray(h.data)).view(torch.uint8)
    axis = (t.dim() - 1 if is_lhs else t.dim() - 2) if k_pack else \
        (t.dim() - 2 if is_lhs else t.dim() - 1)
    return _unpack_fp4(t, axis)


def _scales(h, rows: int, nblk: int, other):
    """Scales as a tensor (rows, nblk): E8M0 codes (uint8) or UE4M3 (float8_e4m3fn);
    a missing scale is 1.0 in the format of the other side's."""
    if h is not None:
        if getattr(h.dtype, "name", "") == "fp8e4nv":
            return to_torch(h.data, "fp8_e4m3")
        return torch.from_numpy(h.data.copy()).view(torch.uint8)
    if other is not None and getattr(other.dtype, "name", "") == "fp8e4nv":
        return torch.full((rows, nblk), 1.0).to(torch.float8_e4m3fn)
    return torch.full((rows, nblk), 127, dtype=torch.uint8)


def native(arch, lhs, lhs_scale, fa, rhs, rhs_scale, fb, lhs_k_pack, rhs_k_pack, acc):
    A = _operand(lhs, fa, lhs_k_pack, True)
    B = _operand(rhs, fb, rhs_k_pack, False)
    C = to_torch(acc.data, "fp32")
    M, K, N = A.shape[-2], A.shape[-1], B.shape[-1]
    ref = lhs_scale if lhs_scale is not None else rhs_scale
    bs = 16 if ref is not None and getattr(ref.dtype, "name", "") == "fp8e4nv" else 32
    nblk = -(-K // bs)
    sa = _scales(lhs_scale, M, nblk, rhs_scale)
    sb = _scales(rhs_scale, N, nblk, lhs_scale).transpose(-1, -2)
    return emulated_mm(A, B, C, arch=arch, in_format=f"{fa},{fb}", scale_a=sa, scale_b=sb)


def _dequant_bf16(t: torch.Tensor, fmt: str, scale, to, fast_math: bool) -> torch.Tensor:
    """Triton's decomposition of one operand (``scale`` (rows, K/32) E8M0 codes along the
    operand's K, or None)."""
    vals = value_table("fp4_e2m1")[t.long()].float() if fmt == "fp4_e2m1" else t.float()
    if scale is None:
        return vals.to(to)
    s = scale.to(torch.int32).repeat_interleave(32, dim=-1)[..., :vals.shape[-1]]
    mult = torch.where(s == 0, torch.zeros((), dtype=torch.float32),
                       torch.exp2((s - 127).float())).to(to)
    out = (vals.to(to).float() * mult.float()).to(to)      # exact product, one rounding
    if not fast_math:
        out = torch.where(s == 0xFF, torch.full((), float("nan"), dtype=to), out)
    return out


def decomposed(single_dot, lhs, lhs_scale, fa, rhs, rhs_scale, fb, fast_math, lhs_k_pack,
               rhs_k_pack, acc):
    if (lhs_scale is not None and getattr(lhs_scale.dtype, "name", "") == "fp8e4nv") or \
            (rhs_scale is not None and getattr(rhs_scale.dtype, "name", "") == "fp8e4nv"):
        raise NotImplementedError("torch_mma_emu.triton: NVFP4 (UE4M3 scales) tl.dot_scaled "
                                  "is modelled on Blackwell only")
    A = _operand(lhs, fa, lhs_k_pack, True)
    B = _operand(rhs, fb, rhs_k_pack, False)
    C = to_torch(acc.data, "fp32")
    to = torch.float16 if "fp16" in (fa, fb) else torch.bfloat16
    sa = None if lhs_scale is None else torch.from_numpy(lhs_scale.data.copy()).view(torch.uint8)
    sb = None if rhs_scale is None else torch.from_numpy(rhs_scale.data.copy()).view(torch.uint8)
    Ad = _dequant_bf16(A, fa, sa, to, fast_math)
    Bd = _dequant_bf16(B.transpose(-1, -2), fb, sb, to, fast_math).transpose(-1, -2)
    f = "fp16" if to == torch.float16 else "bf16"
    return single_dot(Ad.contiguous(), Bd.contiguous(), C, f, f, "fp32", "ieee", 0)
