"""Grouped matrix products under ``emulate``: ``torch._grouped_mm`` / ``F.grouped_mm`` (MoE
experts in transformers, torchtitan) and ``torch._scaled_grouped_mm`` (fp8 experts).

A grouped GEMM is one GEMM per group (CUTLASS / cuBLAS grouped kernels run each group as
its own tile schedule over its full K), so each group is emulated as the target arch's
GEMM, rounded once to the output dtype.  The operand forms (PyTorch's, ``offs`` holding the
cumulative end of each group, int32):

* 2-D x 3-D: ``A (M, K)``, ``B (G, K, N)``: rows ``offs[g-1]:offs[g]`` of A times ``B[g]``
  give those rows of the ``(M, N)`` output (rows past ``offs[-1]`` are zero here; PyTorch
  leaves them uninitialised);
* 3-D x 2-D: ``A (G, M, K)``, ``B (K, N)``: ``A[g]`` times columns ``offs[g-1]:offs[g]`` of B
  give those columns of the ``(M, N)`` output;
* 2-D x 2-D: ``A (M, K)``, ``B (K, N)`` with K split by ``offs``: group g is
  ``A[:, k-slice] @ B[k-slice]``, output ``(G, M, N)`` (the MoE weight gradient);
* 3-D x 3-D: ``A (G, M, K)``, ``B (G, K, N)``, no offsets: a batched product.

The backward of ``_grouped_mm`` is itself ``_grouped_mm`` calls (autograd's formula), which
come back through the mode and are emulated the same way.  ``_scaled_grouped_mm`` with
rowwise fp32 scales is, per group, a rowwise ``_scaled_mm`` (scales on the fp32
accumulator, fp32 promotion as for ``_scaled_mm``); MXFP8 group scales are not modelled.
"""
from __future__ import annotations

from typing import Callable, Iterator, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import scaled
from .dispatch_args import bind, phase
from .gemm import run_product

__all__ = ["pieces", "output_shape", "run_groups", "grouped_native", "Float64Groups",
           "handle_grouped_mm", "handle_scaled_grouped_mm"]

def _bounds(offs: Optional[torch.Tensor], groups: int, length: int, what: str) -> list:
    if offs is None:
        raise ValueError(f"grouped mm: offs is needed when {what} is 2-D")
    if offs.dim() != 1 or offs.dtype != torch.int32:
        raise ValueError(f"grouped mm: offs must be a 1-D int32 tensor, got {offs.dtype} "
                         f"{tuple(offs.shape)}")
    ends = [int(e) for e in offs.tolist()]
    if groups is not None and len(ends) != groups:
        raise ValueError(f"grouped mm: offs has {len(ends)} groups, the 3-D operand {groups}")
    start = 0
    out = []
    for e in ends:
        if e < start or e > length:
            raise ValueError(f"grouped mm: offs must be non-decreasing and at most {length}, "
                             f"got {ends}")
        out.append((start, e))
        start = e
    return out


def output_shape(A: torch.Tensor, B: torch.Tensor, offs) -> tuple:
    if A.dim() == 2 and B.dim() == 3:
        return (A.shape[0], B.shape[2])
    if A.dim() == 3 and B.dim() == 2:
        return (A.shape[1], B.shape[1])
    if A.dim() == 2 and B.dim() == 2:
        return (0 if offs is None else offs.shape[0], A.shape[0], B.shape[1])
    return (A.shape[0], A.shape[1], B.shape[2])


def pieces(A: torch.Tensor, B: torch.Tensor, offs: Optional[torch.Tensor]) -> Iterator[tuple]:
    """The groups of ``A`` x ``B`` as ``(g, a_g, b_g, index into the output)``."""
    if A.dim() not in (2, 3) or B.dim() not in (2, 3):
        raise ValueError(f"grouped mm: operands must be 2-D or 3-D, got {tuple(A.shape)} and "
                         f"{tuple(B.shape)}")
    if A.shape[-1] != B.shape[-2] and not (A.dim() == 2 and B.dim() == 2
                                            and A.shape[1] == B.shape[0]):
        raise ValueError(f"grouped mm: A {tuple(A.shape)} and B {tuple(B.shape)} have "
                         "different K")
    if A.dim() == 3 and B.dim() == 3:
        if offs is not None:
            raise ValueError("grouped mm: offs is not needed for 3-D x 3-D operands")
        if A.shape[0] != B.shape[0]:
            raise ValueError(f"grouped mm: {A.shape[0]} and {B.shape[0]} groups")
        for g in range(A.shape[0]):
            yield g, A[g], B[g], (g,)
    elif A.dim() == 2 and B.dim() == 3:
        for g, (s, e) in enumerate(_bounds(offs, B.shape[0], A.shape[0], "A")):
            yield g, A[s:e], B[g], (slice(s, e),)
    elif A.dim() == 3 and B.dim() == 2:
        for g, (s, e) in enumerate(_bounds(offs, A.shape[0], B.shape[1], "B")):
            yield g, A[g], B[:, s:e], (slice(None), slice(s, e))
    else:
        for g, (s, e) in enumerate(_bounds(offs, None, A.shape[1], "both")):
            yield g, A[:, s:e], B[s:e], (g,)


def run_groups(A, B, offs, out_dtype, mm: Callable) -> torch.Tensor:
    """The grouped product with ``mm(a_g, b_g, g)`` for each non-empty group (an empty K
    gives zeros, as a GEMM over no products)."""
    out = torch.zeros(output_shape(A, B, offs), dtype=out_dtype, device=A.device)
    for g, a, b, idx in pieces(A, B, offs):
        if a.shape[0] == 0 or b.shape[-1] == 0 or a.shape[-1] == 0:
            continue
        out[idx] = mm(a, b, g)
    return out


def grouped_native(func, args, kwargs):
    """``_grouped_mm`` run natively group by group with ``torch.mm`` (for dtypes PyTorch's
    own kernel lacks, e.g. the float64 reference of ``report``)."""
    a = bind(func, args, kwargs)
    A, B = a["self"], a["mat2"]
    dt = a.get("out_dtype") or A.dtype
    return run_groups(A, B, a.get("offs"), dt, lambda x, y, g: torch.mm(x, y).to(dt))


# -- the dispatch-mode handlers (``mode`` is the EmulateMode) -------------------------------
def handle_grouped_mm(mode, func, args, kwargs):
    a = bind(func, args, kwargs)
    A, B, offs = a["self"], a["mat2"], a.get("offs")
    if a.get("bias") is not None:
        raise RuntimeError(f"{func}: Bias tensor provided, but it is not supported yet.")
    shapes = [A.shape, B.shape]
    plan = mode.plan("mm", A, B, phase())
    if plan.native or A.dtype != B.dtype:
        mode.record(func, "grouped_mm", "native", shapes, "policy: native")
        return func(*args, **kwargs)
    out_dtype = a.get("out_dtype") or A.dtype
    try:
        D = run_groups(A, B, offs, out_dtype,
                       lambda x, y, g: run_product(x, y, plan, out_dtype=out_dtype))
    except ValueError as e:
        raise ValueError(f"emulate({mode.policy.arch_name}): {func}: {e}") from None
    mode.record(func, "grouped_mm", plan.label, shapes, "one GEMM per group")
    return D


def _group_scales(A, B, sa, sb, offs):
    """Per group: (rowwise scale of A's rows (m_g, 1), of B's columns (1, n_g))."""
    out = []
    for g, a, b, idx in pieces(A, B, offs):
        if A.dim() == 2 and B.dim() == 3:
            s = idx[0]
            out.append((sa[s].reshape(-1, 1), sb[g].reshape(1, -1)))
        elif A.dim() == 3 and B.dim() == 3:
            out.append((sa[g].reshape(-1, 1), sb[g].reshape(1, -1)))
        elif A.dim() == 3:
            out.append((sa[g].reshape(-1, 1), sb[idx[1]].reshape(1, -1)))
        else:
            M, N = A.shape[0], B.shape[1]
            out.append((sa[g * M:(g + 1) * M].reshape(-1, 1),
                        sb[g * N:(g + 1) * N].reshape(1, -1)))
    return out


def handle_scaled_grouped_mm(mode, func, args, kwargs):
    a = bind(func, args, kwargs)
    A, B, sa, sb, offs = a["self"], a["mat2"], a["scale_a"], a["scale_b"], a.get("offs")
    arch = mode.policy.arch_name
    if mode.policy.choice("scaled_mm") == "native":
        mode.record(func, "scaled_mm", "native", [A.shape, B.shape], "policy: native")
        return func(*args, **kwargs)
    if a.get("bias") is not None or a.get("scale_result") is not None:
        raise RuntimeError(f"{func}: bias and scale_result are not supported yet (PyTorch)")
    if sa.dtype != torch.float32 or sb.dtype != torch.float32:
        raise ValueError(f"emulate({arch}): {func}: scales {sa.dtype} x {sb.dtype} are not "
                         "modelled (rowwise float32 scales are; MXFP8 group scales are not); "
                         "formats={'scaled_mm': 'native'} runs it natively")
    out_dtype = a.get("out_dtype") or torch.bfloat16
    try:
        scales = _group_scales(A, B, sa.reshape(-1) if sa.dim() == 1 else sa,
                               sb.reshape(-1) if sb.dim() == 1 else sb, offs)
        out = torch.zeros(output_shape(A, B, offs), dtype=out_dtype, device=A.device)
        for (g, x, y, idx), (s_a, s_b) in zip(pieces(A, B, offs), scales):
            if x.shape[0] == 0 or y.shape[-1] == 0 or x.shape[-1] == 0:
                continue
            sp = scaled.build(x, y, [s_a], [scaled.ROWWISE], [], [s_b], [scaled.ROWWISE], [])
            out[idx] = scaled.run_scaled(mode, func, sp, None, out_dtype,
                                          a.get("use_fast_accum"), None)
    except (ValueError, scaled.NotEmulated, IndexError) as e:
        raise ValueError(f"emulate({arch}): {func}: {e}") from None
    return out


class Float64Groups(TorchDispatchMode):
    """Runs ``_grouped_mm`` on float64 operands (PyTorch has no kernel for them) group by
    group with ``torch.mm``: the float64 reference of ``report``."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.ops.aten._grouped_mm.default and \
                any(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in args[:2]):
            return grouped_native(func, args, kwargs)
        return func(*args, **kwargs)
