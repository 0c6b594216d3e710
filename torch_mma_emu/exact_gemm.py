"""``C + A @ B`` correctly rounded to float64, exactly, in O(M N) memory: the reference of
``mma-emu compare --random``.

Ozaki's error-free splitting: the rows of A and the columns of B are cut into slices of at
most ``beta`` significant bits at a common per-row (per-column) scale, so that every product
of two slices and every partial sum of K such products is an integer multiple of the
product's unit below 2**53.  Then each slice product ``A_s @ B_t`` is computed *exactly* by
an ordinary float64 matmul, whatever its summation order, and ``C + A @ B`` is the exact sum
of a few (M, N) matrices, which ``math.fsum`` rounds correctly per element.  Memory is the
slices and their products (a handful of M x N, M x K, K x N matrices), never M x N x K terms.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch

__all__ = ["exact_gemm", "split_exact"]


def _beta(K: int) -> int:
    """Bits per slice: K products of two (beta+1)-bit integers must sum below 2**53."""
    return (53 - max(1, math.ceil(math.log2(max(K, 2))))) // 2 - 1


def split_exact(X: torch.Tensor, dim: int, beta: int) -> list[torch.Tensor]:
    """Slices of float64 ``X`` summing to it exactly.  Along ``dim`` (the K dimension) all
    elements of one slice are integer multiples of one power of two, ``unit``, with
    magnitude at most ``2**beta * unit`` (Rump, Ogita and Oishi's ExtractScalar with a
    per-row/column power-of-two sigma)."""
    slices = []
    rest = X
    while bool((rest != 0).any()):
        mx = rest.abs().amax(dim=dim, keepdim=True)
        _, E = torch.frexp(mx)                         # mx < 2**E
        if int(E.max()) + 53 - beta >= 1024:
            raise ValueError("exact_gemm: operands too large to split exactly (>= 2**~990)")
        sigma = torch.ldexp(torch.ones_like(mx), (E + 53 - beta).to(torch.int32))
        sigma = torch.where(mx == 0, torch.zeros_like(mx), sigma)
        q = (sigma + rest) - sigma                     # rest rounded to a multiple of ulp(sigma)
        slices.append(q)
        rest = rest - q                                # exact
        if len(slices) > 2200 // beta:
            raise AssertionError("exact_gemm: slicing did not terminate")
    return slices


def exact_gemm(A: torch.Tensor, B: torch.Tensor, C=None, *, progress: Optional[Callable[[int],
               None]] = None):
    """``C + A @ B`` for 2-D float64 tensors, exact and correctly rounded to float64.

    ``C`` may also be a list of (M, N) tensors: the slice products are computed once and a
    list of results, one per C, is returned.  ``progress(n)`` is called with the number of
    slice products done."""
    if A.dim() != 2 or B.dim() != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"exact_gemm: need A (M, K) and B (K, N), got {tuple(A.shape)} and "
                         f"{tuple(B.shape)}")
    M, K = A.shape
    N = B.shape[1]
    many = isinstance(C, (list, tuple))
    Cs = list(C) if many else [torch.zeros(M, N, dtype=torch.float64) if C is None else C]
    Cs = [c.to(torch.float64) for c in Cs]
    for c in Cs:
        if tuple(c.shape) != (M, N):
            raise ValueError(f"exact_gemm: C must be ({M}, {N}), got {tuple(c.shape)}")
    A, B = A.to(torch.float64), B.to(torch.float64)
    for name, x in [("A", A), ("B", B)] + [("C", c) for c in Cs]:
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"exact_gemm: {name} holds NaN or infinity")
    beta = _beta(K)
    As, Bs = split_exact(A, 1, beta), split_exact(B, 0, beta)
    _check_no_underflow(As, Bs, beta)
    terms = []
    for a in As:
        for b in Bs:
            terms.append(a @ b)            # exact: integer multiples of one unit, < 2**53 units
            if progress is not None:
                progress(1)
    outs = []
    for c in Cs:
        T = torch.stack(terms + [c], dim=-1).reshape(M * N, -1)
        outs.append(torch.tensor([math.fsum(r) for r in T.tolist()],
                                 dtype=torch.float64).reshape(M, N))
    return outs if many else outs[0]


def _check_no_underflow(As, Bs, beta) -> None:
    """A slice product's unit must be a normal binary64 power (>= 2**-1022 keeps every
    partial sum exact); else the splitting is not error-free."""
    def low(slices, dim):
        lo = None
        for s in slices:
            mx = s.abs().amax(dim=dim)
            mx = mx[mx != 0]
            if mx.numel():
                e = int(torch.frexp(mx)[1].min()) - beta - 1
                lo = e if lo is None else min(lo, e)
        return lo
    la, lb = low(As, 1), low(Bs, 0)
    if la is not None and lb is not None and la + lb < -1074:
        raise ValueError("exact_gemm: operands too small for an exact splitting (products "
                         "below 2**-1022)")
