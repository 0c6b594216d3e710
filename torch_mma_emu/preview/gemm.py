"""One emulated product with PyTorch's GEMM semantics: casts, fp8 scaling, alpha/beta, bias.

``run_product`` is shared by the dispatch mode (``emulate``) and the swapped modules
(``convert``), so both routes give the same bits for the same operands.  The mode's
handlers of ``mm`` / ``addmm`` / ``bmm`` / ``baddbmm`` (and their ``.out``, ``.dtype`` and
in-place forms, ``_addmm_activation``) are at the end.

Bias / ``beta * C`` (docs/preview.md, "Bias and alpha/beta"):

* ``"epilogue"`` (default, what cuBLAS / cuBLASLt / hipBLASLt do for ``addmm`` and the
  ``Linear`` bias epilogue): the product accumulates from zero in ``plan.acc_dtype``; then
  ``acc * alpha`` (when alpha != 1), ``+ beta * C`` (C converted to the accumulator type,
  times beta when beta != 1), each one IEEE operation in the accumulator type; one
  rounding to the output dtype at the end.
* ``"chain"``: ``beta * C`` seeds the accumulator (docs/model.md, "the GEMM chain";
  CUTLASS / Triton ``acc = tl.dot(a, b, acc)``); alpha must be 1 (there is no chain form of
  alpha * AB + C).

``beta == 0`` ignores C entirely (NaN / Inf in C do not propagate), as PyTorch documents.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..ops import emulated_mm, round_result
from .dispatch_args import bind, phase
from .policy import Plan

__all__ = ["run_product", "fp8_tensorwise", "acc_product", "mm_product", "handle_gemm",
           "handle_addmm_activation", "GEMM_KINDS"]


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
    return round_result(D, out_dtype)


def acc_product(plan: Plan):
    """``prod(A, B)``: the emulated product left in the accumulator type (attention)."""
    def prod(A, B):
        return run_product(A, B, plan, out_dtype=plan.acc_dtype)
    return prod


def mm_product(plan: Plan, bias_mode: str, out_dtype):
    """``mm(A, B, C=None)``: the emulated product with its bias handling (convolutions)."""
    def mm(A, B, C=None):
        return run_product(A, B, plan, C=C, bias_mode=bias_mode, out_dtype=out_dtype)
    return mm


# -- under emulate: mm / addmm / bmm / baddbmm (and .out, .dtype, in-place) ------------------
GEMM_KINDS = {"mm": ("self", "mat2", None), "addmm": ("mat1", "mat2", "self"),
              "bmm": ("self", "mat2", None), "baddbmm": ("batch1", "batch2", "self")}


def handle_gemm(mode, func, args, kwargs):
    name = func.overloadpacket.__name__
    inplace = name.endswith("_")
    kind = name.rstrip("_")
    ka, kb, kc = GEMM_KINDS[kind]
    a = bind(func, args, kwargs)
    A, B, C = a[ka], a[kb], (a[kc] if kc else None)
    plan = mode.plan(kind, A, B, phase())
    if plan.native or A.dtype != B.dtype:
        mode.record(func, kind, "native", [A.shape, B.shape], "policy: native")
        return func(*args, **kwargs)
    out_dtype = a.get("out_dtype") or (C.dtype if inplace else A.dtype)
    D = run_product(A, B, plan, C=C, alpha=a.get("alpha", 1), beta=a.get("beta", 1),
                    bias_mode=mode.policy.bias, out_dtype=out_dtype)
    mode.record(func, kind, plan.label, [A.shape, B.shape])
    target = a["self"] if inplace else a.get("out")
    if target is not None and not inplace and target.dtype != D.dtype:
        raise RuntimeError(f"{name}: expected out tensor to have dtype {D.dtype}, but got "
                           f"{target.dtype} instead")     # as PyTorch's own kernels
    if target is not None:
        if target.shape != D.shape:
            target.resize_(D.shape)
        return target.copy_(D)
    return D


def handle_addmm_activation(mode, func, args, kwargs):
    """``act(beta*self + alpha*mat1@mat2)``: cuBLASLt's RELU / GELU (tanh) epilogue,
    applied in the accumulator type before the one rounding to the output dtype."""
    a = bind(func, args, kwargs)
    A, B, C = a["mat1"], a["mat2"], a["self"]
    plan = mode.plan("addmm", A, B, phase())
    if plan.native or A.dtype != B.dtype:
        mode.record(func, "addmm", "native", [A.shape, B.shape], "policy: native")
        return func(*args, **kwargs)
    D = run_product(A, B, plan, C=C, alpha=a["alpha"], beta=a["beta"],
                    bias_mode=mode.policy.bias, out_dtype=plan.acc_dtype)
    D = (torch.nn.functional.gelu(D, approximate="tanh") if a["use_gelu"]
         else torch.relu(D))
    mode.record(func, "addmm", plan.label, [A.shape, B.shape])
    return D.to(A.dtype)
