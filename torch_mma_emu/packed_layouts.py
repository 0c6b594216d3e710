"""What ``tme.emulated_mm`` does with the layouts of torchao, cuBLAS and ``torch._scaled_mm``
(``MXTensor`` / ``NVFP4Tensor``'s ``qdata`` and ``scale``), which differ from its own:

* packed fp4, ``torch.float4_e2m1fn_x2`` (two E2M1 codes per byte, the even-indexed element
  in the low nibble): accepted directly, A packed along K (its last dim, ``(M, K/2)``), B
  along K too (``(K/2, N)``, as ``torch._scaled_mm`` takes it); unpacked to one uint8 code
  per element with ``in_format="fp4_e2m1"``.  torchao keeps the packed bytes as uint8
  (``qdata``): uint8 operands whose scales cover twice their K get an error saying to pass
  ``qdata.view(torch.float4_e2m1fn_x2)``;
* swizzled block scales (cuBLAS's 128x4 tiles: ``is_swizzled_scales=True`` in torchao,
  what ``torch._scaled_mm`` reads): a shape error that says to unswizzle them with
  ``torch_mma_emu.preview.scaled.unswizzle(scale, rows, K // block)`` (a plain ``(M, K/32)``
  tensor with M a multiple of 128 and K/32 of 4 has the same size, so this cannot be guessed);
* B's scales as cuBLAS and torchao hold them, ``(N, K/block)`` (those of B^T): a shape error
  that says to pass ``scale_b.t()``;
* NVFP4's per-tensor (global) fp32 scale: ``emulated_mm`` takes block scales only; the global
  scales multiply the result (``D * (global_a * global_b)``, cuBLAS's alpha), or run
  ``torch._scaled_mm`` under ``emulate()``, which does it.

``emulated_mm``'s own forms stay as documented (README, "The API").
"""
from __future__ import annotations

from typing import Optional

import torch

__all__ = ["adapt", "ceil_div", "swizzled_numel", "unswizzle", "unpack_fp4"]

_FP4 = getattr(torch, "float4_e2m1fn_x2", None)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def swizzled_numel(rows: int, cols: int) -> int:
    """Elements of a scale matrix (rows, cols) in cuBLAS's 128x4 tile layout (padded)."""
    return ceil_div(rows, 128) * 128 * ceil_div(cols, 4) * 4


def unswizzle(scale: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """(rows, cols) scales from cuBLAS's block-scaling-factor layout: 128x4 tiles, row-major
    over the tiles, each tile stored as 32 x (4 x 4): element (r, c) of a tile at
    ``(r % 32) * 16 + (r // 32) * 4 + c`` (cuBLAS docs, "1D block scaling factors layout";
    what ``to_blocked`` in PyTorch's tests writes).  The tensor is read in memory order."""
    nr, nc = ceil_div(rows, 128), ceil_div(cols, 4)
    flat = scale.contiguous().view(torch.uint8).reshape(-1)
    t = flat.view(nr, nc, 32, 4, 4).permute(0, 3, 2, 1, 4).reshape(nr * 128, nc * 4)
    return t[:rows, :cols].contiguous().view(scale.dtype)


def unpack_fp4(t: torch.Tensor, dim: int) -> torch.Tensor:
    """One uint8 E2M1 code per element from ``float4_e2m1fn_x2`` packed along ``dim``: the
    low nibble holds the element of even index, the high nibble the next one."""
    u = t.view(torch.uint8)
    lo, hi = u & 0xF, u >> 4
    d = dim % u.dim()
    out = torch.stack((lo, hi), dim=d + 1)
    shape = list(u.shape)
    shape[d] *= 2
    return out.reshape(shape)


def adapt(A, B, scale_a, scale_b, in_format: Optional[str], arch: str = ""):
    """``(A, B, in_format)`` with packed fp4 operands unpacked; raises a ``ValueError`` /
    ``TypeError`` saying what to pass for the other foreign layouts."""
    packed = [t is not None and _FP4 is not None and t.dtype == _FP4 for t in (A, B)]
    if any(packed):
        if in_format not in (None, "fp4_e2m1", "fp4_e2m1,fp4_e2m1"):
            raise TypeError(f"emulated_mm: in_format={in_format!r} with packed "
                            "float4_e2m1fn_x2 operands; leave it out (they are fp4_e2m1)")
        fa = "fp4_e2m1" if packed[0] else _dtype_format(A)
        fb = "fp4_e2m1" if packed[1] else _dtype_format(B)
        if fa is None or fb is None:
            raise TypeError("emulated_mm: one operand is packed float4_e2m1fn_x2 and the other "
                            "holds uint8 codes; give both as uint8 codes with in_format="
                            "'fmtA,fmtB' (torch_mma_emu.preview.scaled.unpack_fp4 unpacks)")
        A = unpack_fp4(A, -1) if packed[0] else A
        B = unpack_fp4(B, -2) if packed[1] else B
        in_format = fa if fa == fb else f"{fa},{fb}"
    bs = 16 if scale_a is not None and scale_a.dtype == torch.float8_e4m3fn else 32
    # uint8 codes without in_format and a named arch cannot run (no format): if the scales
    # cover twice their K, they are most likely packed bytes
    if (in_format is None and not arch.startswith("spec:") and scale_a is not None
            and A.dtype == torch.uint8 and A.dim() >= 1
            and scale_a.dim() >= 1 and scale_a.shape[-1] == ceil_div(2 * A.shape[-1], bs)
            and scale_a.shape[-1] != ceil_div(A.shape[-1], bs)):
        raise TypeError(
            f"emulated_mm: A is uint8 with K = {A.shape[-1]}, but its scales cover "
            f"{2 * A.shape[-1]} elements: packed fp4 bytes (torchao's MXTensor / NVFP4Tensor "
            "qdata)? pass A.view(torch.float4_e2m1fn_x2) and B.view(torch.float4_e2m1fn_x2)")
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if s is not None and s.dtype == torch.float32:
            raise TypeError(
                f"emulated_mm: scales have dtype float32 ({name}): a per-tensor (global) scale "
                "such as NVFP4's. "
                "emulated_mm takes the block scales only (float8_e4m3fn per 16 elements for "
                "NVFP4, float8_e8m0fnu per 32 for MX); multiply the result by the global "
                "scales, D * (global_a * global_b), as cuBLAS's alpha does, or run "
                "torch._scaled_mm under emulate(), which does it")
    if scale_a is None or scale_b is None or A.dim() != 2 or B.dim() != 2:
        return A, B, in_format
    (M, K), N = A.shape, B.shape[-1]
    for bs in (32, 16):
        nblk = ceil_div(K, bs)
        if tuple(scale_a.shape) == (M, nblk) and tuple(scale_b.shape) == (nblk, N):
            return A, B, in_format                      # emulated_mm's own layout
    for bs in (32, 16):
        nblk = ceil_div(K, bs)
        if tuple(scale_a.shape) == (M, nblk) and tuple(scale_b.shape) == (N, nblk):
            raise ValueError(
                f"emulated_mm: scale_b has shape {tuple(scale_b.shape)} = (N, K/{bs}), the "
                "layout of B^T's scales (cuBLAS, torchao); emulated_mm takes (K/block, N): "
                "pass scale_b.t()")
        for name, s, rows in (("scale_a", scale_a, M), ("scale_b", scale_b, N)):
            want = (rows, nblk) if name == "scale_a" else (nblk, N)
            if tuple(s.shape) != want and s.numel() == swizzled_numel(rows, nblk):
                raise ValueError(
                    f"emulated_mm: {name} has shape {tuple(s.shape)} and "
                    f"{s.numel()} elements: cuBLAS's swizzled 128x4 layout of ({rows}, "
                    f"{nblk}) block scales (torchao's is_swizzled_scales=True, what "
                    "torch._scaled_mm reads); emulated_mm takes plain scales: pass "
                    f"torch_mma_emu.preview.scaled.unswizzle({name}, {rows}, {nblk})"
                    + (".t()" if name == "scale_b" else "")
                    + " (or run torch._scaled_mm under emulate(), which reads them)")
    return A, B, in_format


def _dtype_format(t) -> Optional[str]:
    from .formats import format_of_dtype
    f = format_of_dtype(t.dtype)
    return None if f is None else f.name
