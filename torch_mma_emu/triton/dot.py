"""One ``tl.dot`` of the interpreter computed by the emulator: operands from the
interpreter's NumPy arrays (bit patterns: bf16 and fp8 arrive as unsigned integers) to
tensors, the plan of :mod:`.target_rules`, ``emulated_mm`` with the accumulator as C (one
chain step per dot: the dot's K consumed in the instruction's chunks, in order), and Triton's
splits of fp32 operands (tf32x3, bf16x3, bf16x6) as the sequence of dots its F32DotTC pass
emits."""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import torch

from ..formats import FLOAT_DTYPES
from ..ops import emulated_mm
from ..schedule import Schedule
from ..schedule_partials import f32dottc_tf32x3
from ..tf32 import tf32x3_split
from .target_rules import TL_FORMATS, DotPlan

_NP_CONTAINER = {1: np.uint8, 2: np.int16, 4: np.float32, 8: np.float64}


def format_of(tl_dtype) -> Optional[str]:
    """Project format name of a Triton scalar type (None: integers and others)."""
    return TL_FORMATS.get(getattr(tl_dtype, "name", ""))


def to_torch(data: np.ndarray, fmt: str) -> torch.Tensor:
    """The interpreter's array as a tensor of ``fmt`` (bits unchanged)."""
    dt = FLOAT_DTYPES[fmt]
    arr = np.ascontiguousarray(data)
    if arr.dtype.kind == "f":
        t = torch.from_numpy(arr)
    else:
        size = torch.empty((), dtype=dt).element_size()
        if arr.dtype.itemsize != size:
            raise TypeError(f"torch_mma_emu.triton: a {fmt} operand arrived as {arr.dtype}")
        t = torch.from_numpy(arr.view(_NP_CONTAINER[size])).view(dt)
    if t.dtype != dt:
        raise TypeError(f"torch_mma_emu.triton: a {fmt} operand arrived as {arr.dtype}")
    return t


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().numpy()


def nan_to_zero(x: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isnan(x), torch.zeros_like(x), x)


def run_plan(plan: DotPlan, arch, A, B, C, variant: Optional[str] = None) -> torch.Tensor:
    """``C + A @ B`` as the plan says, with ``emulated_mm`` on ``arch``."""
    if plan.convert:
        A, B = A.to(FLOAT_DTYPES[plan.convert]), B.to(FLOAT_DTYPES[plan.convert])
    out = FLOAT_DTYPES[plan.out]
    Cin = C.to(out)
    fmt = plan.in_format
    in_format = fmt if ("fp32" in fmt or "tf32" in fmt or "xf32" in fmt) else None
    sched = Schedule(promote_every=plan.promote_every) if plan.promote_every else None
    D = emulated_mm(A, B, Cin, arch=arch, in_format=in_format, out_dtype=out,
                    instruction=variant or plan.instruction or plan.row, schedule=sched)
    return D.to(FLOAT_DTYPES[plan.round_result]) if plan.round_result else D


def split_fp32(A, B, C, precision: str, dot: Callable) -> torch.Tensor:
    """Triton's F32DotTC decompositions of an fp32 dot (``dot(a, b, acc, fmt)`` runs one
    sub-dot): the small products first from +0, NaNs of the partial sum replaced by 0, the
    big product last, then C added with one fp32 addition."""
    zero = torch.zeros(C.shape, dtype=torch.float32)
    if precision == "tf32x3":
        (ah, al), (bh, bl) = tf32x3_split(A), tf32x3_split(B)
        return f32dottc_tf32x3(ah, bh, al, bl, C, lambda x, y, c: dot(x, y, c, "tf32"), zero)
    n = {"bf16x3": 2, "bf16x6": 3}[precision]

    def parts(x):
        out = []
        for i in range(n):
            h = x.to(torch.bfloat16)                              # arith.truncf: nearest even
            if i != n - 1:
                x = x - h.float()
            out.append(h)
        return out
    a, b = parts(A), parts(B)
    hi, mid, lo = 0, 1, 2
    r = zero
    if n == 3:
        r = dot(a[mid], b[mid], r, "bf16")
        r = dot(a[lo], b[hi], r, "bf16")
        r = dot(a[hi], b[lo], r, "bf16")
    r = dot(a[mid], b[hi], r, "bf16")
    r = nan_to_zero(dot(a[hi], b[mid], r, "bf16"))
    r = dot(a[hi], b[hi], r, "bf16")
    return r + C
