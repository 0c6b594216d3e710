"""Float conversions inside an emulate block, as the GPU rounds them.

Triton's interpreter converts fp32 to bf16 by truncation and to fp8 with a round-half-up that
ignores ties and the carry into the exponent; the GPU rounds to nearest even.  What the
compiled kernel does (read from the PTX Triton 3.6 emits for sm89, sm90, sm100):

* to bf16: ``cvt.rn.bf16.f32``: nearest even;
* fp32 -> fp8 (e4m3 / e5m2): ``cvt.rn.satfinite``: nearest even, finite values beyond the
  format's range (and infinities) saturate to the largest finite value, NaN stays NaN;
  on sm89 through fp16 first with ``cvt.rz.f16.f32`` (toward zero), then as above;
* explicit ``fp_downcast_rounding="rtz"``: toward zero;
* widening conversions are exact;
* AMD (gfx908 / gfx90a / gfx942) to fp8: the rules of ``target_rules.fp8_cast``, read from
  the LLVM IR Triton 3.6 emits (software conversions with saturation, NaN codes 0x7F / 0x7E,
  fnuz through ``v_cvt_pk_fp8_f32`` on CDNA3 or through fp16 on CDNA1 / CDNA2).
"""
from __future__ import annotations

from typing import Optional

import torch

from ..formats import FLOAT_DTYPES, INT_OF_SIZE
from .dot import format_of, to_numpy, to_torch
from .target_rules import Fp8Cast, fp8_cast

_FP8 = ("fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz", "fp8_e5m2fnuz")


def toward_zero(x: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    """``x`` rounded toward zero to ``dt`` (nearest even, then one code down in magnitude
    where that overshot)."""
    y = x.to(dt)
    over = y.double().abs() > x.double().abs()
    if not bool(over.any()):
        return y
    bits = y.view(INT_OF_SIZE[y.element_size()])
    return torch.where(over, bits - 1, bits).view(dt)   # same sign, magnitude one code less


def satfinite(x: torch.Tensor, dt: torch.dtype) -> torch.Tensor:
    big = torch.finfo(dt).max
    return x.clamp(-big, big).to(dt)        # clamp keeps NaN; RNE is monotone


def to_fp8(x: torch.Tensor, dt: torch.dtype, rule: Fp8Cast) -> torch.Tensor:
    """``x`` (a float tensor) converted to the fp8 ``dt`` as ``rule`` says."""
    if rule.through_f16 == "rz":
        x = toward_zero(x, torch.float16)
    elif rule.through_f16 == "rn":
        x = x.to(torch.float16)
    x = x.float()
    y = satfinite(x, dt)
    code = y.view(torch.uint8)
    sign = torch.where(torch.signbit(x), 0x80, 0).to(torch.uint8)
    if rule.nan_above is not None:       # rounded past the largest finite: the next code
        big = torch.finfo(dt).max
        below = torch.tensor(big).to(dt).view(torch.uint8) - 1
        mid = big + (big - below.view(dt).float().item()) / 2   # halfway to the next code
        hit = (x.abs() > mid) & (x.abs() <= rule.nan_above)
        code = torch.where(hit, sign | (code & 0x7F) + 1, code)
    if rule.inf_nan or rule.nan_code is not None:
        nan_code = rule.nan_code if rule.nan_code is not None else 0x7F
        nan = torch.isnan(x) | (torch.isinf(x) & rule.inf_nan)
        nan_bits = torch.full_like(code, nan_code) if nan_code == 0x80 else sign | nan_code
        code = torch.where(nan, nan_bits, code)
    return code.view(dt)


def convert(arch: Optional[str], vendor: Optional[str], data, src_ty, dst_ty,
            rtz: bool = False):
    """The converted NumPy array, or None where the interpreter's own conversion is right
    (or the case is not modelled)."""
    fs, fd = format_of(src_ty), format_of(dst_ty)
    if fs is None or fd is None or fs == fd:
        return None
    widen = torch.finfo(FLOAT_DTYPES[fd]).bits > torch.finfo(FLOAT_DTYPES[fs]).bits
    if fd not in _FP8 and fd != "bf16" and fs not in _FP8 and fs != "bf16" and not rtz:
        return None                          # NumPy's fp16 / fp32 / fp64 casts are RNE
    x = to_torch(data, fs)
    dt = FLOAT_DTYPES[fd]
    if widen:
        y = x.to(dt)
    elif rtz:
        y = toward_zero(x, dt)
    elif fd in _FP8:
        y = to_fp8(x, dt, fp8_cast(arch, fs, fd))
    else:
        y = x.to(dt)
    if y.element_size() == 1:
        return y.view(torch.uint8).numpy()
    if y.dtype == torch.bfloat16:
        return y.view(torch.int16).numpy().view("uint16")
    return to_numpy(y)
