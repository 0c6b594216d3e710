"""One emulated product with PyTorch's GEMM semantics: casts, fp8 scaling, alpha/beta, bias.

``run_product`` is shared by the dispatch mode (``emulate``) and the swapped modules
(``convert``), so both routes give the same bits for the same operands.

Bias / ``beta * C`` (docs/preview.md, "Bias and alpha/beta"):

* ``"epilogue"`` (default, what cuBLAS / cuBLASLt / hipBLASLt do for ``addmm`` and the
  ``Linear`` bias epilogue): the product accumulates from zero in ``plan.acc_dtype``; then
  ``acc * alpha`` (when alpha != 1), ``+ beta * C`` (C converted to the accumulator type,
  times beta when beta != 1), each one IEEE operation in the accumulator type; one
  rounding to the output dtype at the end.
* ``"chain"``: ``beta * C`` seeds the accumulator (GUIDE section 1: CUTLASS / Triton
  ``acc = tl.dot(a, b, acc)``); alpha must be 1 (there is no chain form of alpha * AB + C).

``beta == 0`` ignores C entirely (NaN / Inf in C do not propagate), as PyTorch documents.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..ops import emulated_mm
from .policy import Plan

__all__ = ["run_product", "fp8_tensorwise"]


def fp8_tensorwise(x: torch.Tensor, dtype: torch.dtype):
    """``(x8, inv_scale)``: per-tensor dynamic scaling into an fp8 format, as float8 training
    recipes do (torchao "tensorwise"): ``scale = max_fp8 / max(amax, 1e-12)`` in fp32,
    ``x8 = clamp(x * scale)`` cast RNE; the product is multiplied by ``1/scale`` later."""
    fmax = torch.finfo(dtype).max
    xf = x.to(torch.float32)
    amax = xf.abs().amax()
    scale = fmax / torch.clamp(amax, min=1e-12)
    x8 = (xf * scale).clamp(-fmax, fmax).to(dtype)
    return x8, scale.reciprocal()


def run_product(A: torch.Tensor, B: torch.Tensor, plan: Plan, *,
                C: Optional[torch.Tensor] = None, alpha=1, beta=1,
                bias_mode: str = "epilogue",
                out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``beta * C + alpha * (A @ B)`` as ``plan`` says, rounded once to ``out_dtype``
    (default: A's dtype, as ``torch.mm`` returns).  A (..., M, K), B (..., K, N)."""
    out_dtype = A.dtype if out_dtype is None else out_dtype
    acc = plan.acc_dtype
    inv = None
    if plan.cast is not None:
        if plan.fp8_scale:
            A, inv_a = fp8_tensorwise(A, plan.cast)
            B, inv_b = fp8_tensorwise(B, plan.cast)
            inv = inv_a * inv_b
        else:
            A, B = A.to(plan.cast), B.to(plan.cast)
    use_c = C is not None and beta != 0
    if use_c and bias_mode == "chain" and inv is None:
        if alpha != 1:
            raise ValueError(f"bias='chain' seeds the accumulator with beta*C; alpha={alpha} "
                             "has no such form (use bias='epilogue')")
        c0 = C.to(acc) if beta == 1 else C.to(acc) * beta
        D = emulated_mm(A, B, c0, arch=plan.arch, in_format=plan.in_format, out_dtype=acc,
                        schedule=plan.schedule)
    else:
        D = emulated_mm(A, B, arch=plan.arch, in_format=plan.in_format, out_dtype=acc,
                        schedule=plan.schedule)
        if inv is not None:
            D = D * inv
        if alpha != 1:
            D = D * alpha
        if use_c:
            D = D + (C.to(acc) if beta == 1 else C.to(acc) * beta)
    return D.to(out_dtype)
