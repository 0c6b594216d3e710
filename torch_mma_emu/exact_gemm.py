"""``C + A @ B`` correctly rounded to float64, in O(M N) memory: the reference of
``mma-emu compare --random``.

Every product ``a_k * b_k`` is made exact in binary64 (operands with more than 24
significant bits are split into 26-bit halves by Veltkamp's method, so each partial product
fits 53 bits), written as ``m * 2**e`` with an integer ``|m| < 2**53``, and added into a
fixed-point accumulator of 32-bit digits held in int64 (a "superaccumulator"): integer
additions are exact and need no order.  K is consumed in small blocks, so memory is the
M x N digit array plus one block of products, never M x N x K terms.  The digits become the
correctly rounded double at the end (Python's integer division rounds correctly).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

__all__ = ["exact_gemm", "ExactAccumulator"]

_MASK = (1 << 32) - 1


def _exponents(x: torch.Tensor) -> tuple[int, int] | None:
    """(min, max) frexp exponent over the nonzero elements, None when all are zero."""
    _, E = torch.frexp(x)
    nz = x != 0
    if not bool(nz.any()):
        return None
    E = E[nz]
    return int(E.min()), int(E.max())


def _split(x: torch.Tensor) -> list[torch.Tensor]:
    """[x] when x has at most 24 significant bits, else Veltkamp's split [hi, lo] into
    26-bit halves (hi + lo == x exactly): a product of two parts has at most 52 bits."""
    if torch.equal(x.to(torch.float32).to(torch.float64), x):
        return [x]
    if bool((x.abs() >= 2.0 ** 995).any()):
        raise ValueError("exact_gemm: operands of magnitude >= 2**995 cannot be split exactly")
    t = x * 134217729.0  # 2**27 + 1
    hi = t - (t - x)
    return [hi, x - hi]


class ExactAccumulator:
    """Exact sums of float64 terms, one per element of an (M, N) result, kept as digits.

    ``e0`` is the exponent of the lowest bit any term may carry and ``e_max`` the largest
    (``m * 2**e`` with ``|m| < 2**53``, ``e0 <= e <= e_max``); ``n_terms`` bounds the terms
    added per element (the int64 digits must not overflow)."""

    def __init__(self, M: int, N: int, e0: int, e_max: int, n_terms: int):
        if n_terms >= 1 << 27:
            raise ValueError("exact_gemm: at most 2**27 terms per element")
        self.shape = (M, N)
        self.e0 = e0
        # the top term's digits j, j+1, j+2, then carries of up to n_terms such terms
        self.n_digits = ((e_max - e0) >> 5) + 3 + 2
        self.digits = torch.zeros(M * N, self.n_digits, dtype=torch.int64)

    def copy(self) -> "ExactAccumulator":
        other = object.__new__(ExactAccumulator)
        other.__dict__.update(self.__dict__, digits=self.digits.clone())
        return other

    def add(self, terms: torch.Tensor) -> None:
        """Add ``terms`` (M, N, k) float64, every value an exact product or C value."""
        t = terms.reshape(self.digits.shape[0], -1)
        f, E = torch.frexp(t)
        m = (f * 2.0 ** 53).to(torch.int64)             # exact: |f| < 1
        e = (E.to(torch.int64) - 53 - self.e0).clamp_(0, 32 * (self.n_digits - 3))
        j, r = e >> 5, e & 31
        sign = torch.sign(m)
        am = m.abs()
        lo = (am & _MASK) << r                           # < 2**63
        hi = (am >> 32) << r                             # < 2**52
        self.digits.scatter_add_(1, j, sign * (lo & _MASK))
        self.digits.scatter_add_(1, j + 1, sign * ((lo >> 32) + (hi & _MASK)))
        self.digits.scatter_add_(1, j + 2, sign * (hi >> 32))

    def result(self) -> torch.Tensor:
        """The (M, N) sums, each correctly rounded to float64 (round to nearest even)."""
        d = self.digits.clone()
        for j in range(self.n_digits - 1):               # digits to [0, 2**32), top signed
            carry = d[:, j] >> 32
            d[:, j] -= carry * (1 << 32)
            d[:, j + 1] += carry
        out = []
        scale = self.e0
        for row in d.tolist():
            n = 0
            for digit in reversed(row):
                n = (n << 32) + digit
            out.append(float(n << scale) if scale >= 0 else n / (1 << -scale))
        return torch.tensor(out, dtype=torch.float64).reshape(self.shape)


def exact_gemm(A: torch.Tensor, B: torch.Tensor, C=None, *, block_k: int = 8,
               progress: Optional[Callable[[int], None]] = None):
    """``C + A @ B`` for 2-D float64 tensors, exact and correctly rounded to float64.

    ``C`` may also be a list of (M, N) tensors: A @ B is accumulated once and a list of
    results, one per C, is returned.  Memory O(M N (digits + block_k)); ``progress(k)`` is
    called with the number of K columns done after every block."""
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
    As, Bs = _split(A), _split(B)     # parts of <= 26 bits: every product has <= 52 bits
    ea = [x for x in map(_exponents, As) if x]
    eb = [x for x in map(_exponents, Bs) if x]
    lows, highs = [], []
    if ea and eb:   # frexp exponent of x*y is Ex + Ey or Ex + Ey - 1
        lows.append(min(a[0] for a in ea) + min(b[0] for b in eb) - 1 - 53)
        highs.append(max(a[1] for a in ea) + max(b[1] for b in eb) - 53)
    for ec in filter(None, map(_exponents, Cs)):
        lows.append(ec[0] - 53)
        highs.append(ec[1] - 53)
    if not lows:
        return [c.clone() for c in Cs] if many else Cs[0].clone()
    if min(lows) < -1074:
        raise ValueError("exact_gemm: products underflow binary64 (operands too small)")
    acc = ExactAccumulator(M, N, min(lows), max(highs), len(As) * len(Bs) * K + 1)
    for k0 in range(0, K, block_k):
        k1 = min(K, k0 + block_k)
        for a in As:
            for b in Bs:
                acc.add(a[:, None, k0:k1] * b.t()[None, :, k0:k1])    # (M, N, k) exact
        if progress is not None:
            progress(k1 - k0)
    outs = []
    for c in Cs:
        total = acc.copy()
        total.add(c.unsqueeze(-1))
        outs.append(total.result())
    return outs if many else outs[0]
