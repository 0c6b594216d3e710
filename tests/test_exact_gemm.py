"""The exact fp64 reference of `mma-emu compare --random` (Ozaki splitting: exact slice
matmuls, O(M N) memory) against an independent oracle: math.fsum over every partial product
of a Veltkamp split (exact, correctly rounded), on random, cancelling, wide-exponent and
long-K inputs."""
import math

import pytest
import torch

from torch_mma_emu.exact_gemm import exact_gemm, split_exact


def fsum_gemm(A, B, C):
    def split(x):   # Veltkamp: 26-bit halves, so every partial product is exact
        t = x * 134217729.0
        hi = t - (t - x)
        return hi, x - hi
    ah, al = split(A)
    bh, bl = split(B)
    out = torch.empty(C.shape, dtype=torch.float64)
    for i in range(A.shape[0]):
        for j in range(B.shape[1]):
            terms = [C[i, j].item()]
            for k in range(A.shape[1]):
                for x in (ah[i, k].item(), al[i, k].item()):
                    for y in (bh[k, j].item(), bl[k, j].item()):
                        terms.append(x * y)
            out[i, j] = math.fsum(terms)
    return out


def _inputs(kind, g, M=4, K=19, N=3):
    def rnd(*s):
        return torch.randn(*s, generator=g, dtype=torch.float64)
    if kind == "fp16":
        return rnd(M, K).half().double(), rnd(K, N).half().double(), rnd(M, N).float().double()
    if kind == "fp64":
        return rnd(M, K), rnd(K, N), rnd(M, N)
    if kind == "wide":   # exponents spread over 2^-300 .. 2^300
        e = lambda *s: torch.exp2(torch.randint(-150, 150, s, generator=g).double())  # noqa: E731
        return rnd(M, K) * e(M, K), rnd(K, N) * e(K, N), rnd(M, N) * e(M, N)
    if kind == "cancel":   # C = -(A @ B) rounded: the exact result is the rounding error
        A, B = rnd(M, K), rnd(K, N)
        return A, B, -(A @ B)
    if kind == "mixed":    # fp32-exact A (not split) times full fp64 B (split)
        return rnd(M, K).float().double(), rnd(K, N), rnd(M, N)
    if kind == "zeros":
        A = rnd(M, K)
        A[:, ::2] = 0
        return A, torch.zeros(K, N, dtype=torch.float64), rnd(M, N)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["fp16", "fp64", "wide", "cancel", "mixed", "zeros"])
def test_matches_fsum(kind):
    g = torch.Generator().manual_seed(hash(kind) % 1000)
    for _ in range(3):
        A, B, C = _inputs(kind, g)
        got = exact_gemm(A, B, C)
        want = fsum_gemm(A, B, C)
        assert torch.equal(got, want), (kind, got, want)


def test_one_product_several_cs_and_progress():
    g = torch.Generator().manual_seed(5)
    A, B, C = _inputs("fp64", g)
    C2 = C.float().double()
    done = []
    r1, r2 = exact_gemm(A, B, [C, C2], progress=done.append)
    assert torch.equal(r1, fsum_gemm(A, B, C)) and torch.equal(r2, fsum_gemm(A, B, C2))
    assert len(done) >= 4      # fp64 randn rows need several slices each


def test_long_k_with_cancellation():
    # K = 3000: fewer bits per slice; C cancels the product to its rounding error
    g = torch.Generator().manual_seed(9)
    A = torch.randn(2, 3000, generator=g, dtype=torch.float64)
    B = torch.randn(3000, 2, generator=g, dtype=torch.float64)
    C = -(A @ B)
    assert torch.equal(exact_gemm(A, B, C), fsum_gemm(A, B, C))


def test_slices_are_exact_and_narrow():
    g = torch.Generator().manual_seed(3)
    X = torch.randn(5, 40, generator=g, dtype=torch.float64) * 2.0 ** 40
    for dim in (0, 1):
        parts = split_exact(X, dim, 20)
        assert torch.equal(sum(parts[1:], parts[0]), X)    # exact in any order here:
        total = torch.zeros_like(X)                         # the slices do not overlap
        for p in parts:
            mx = p.abs().amax(dim=dim, keepdim=True)
            _, E = torch.frexp(mx)
            unit = torch.ldexp(torch.ones_like(mx), (E - 21).to(torch.int32))
            # multiples of one unit per row/column, at most beta + 1 bits of them
            assert torch.equal(torch.remainder(p, unit), torch.zeros_like(p))
            total += p
        assert torch.equal(total, X)


def test_cancellation_to_exactly_zero_and_ties():
    A = torch.tensor([[1.0, 2.0 ** -60, -1.0]], dtype=torch.float64)
    B = torch.tensor([[1.0], [1.0], [1.0]], dtype=torch.float64)
    assert exact_gemm(A, B).item() == 2.0 ** -60          # fp64 matmul would give 0
    A = torch.tensor([[1.0, 2.0 ** -53, 2.0 ** -105]], dtype=torch.float64)
    assert exact_gemm(A, B).item() == 1.0 + 2.0 ** -52    # just above the tie: rounds up
    A = torch.tensor([[1.0, 2.0 ** -53]], dtype=torch.float64)
    assert exact_gemm(A, B[:2]).item() == 1.0             # the tie: to even


def test_bad_input():
    with pytest.raises(ValueError, match="NaN or infinity"):
        exact_gemm(torch.tensor([[float("nan")]]).double(), torch.ones(1, 1).double())
    with pytest.raises(ValueError, match="need A"):
        exact_gemm(torch.ones(2, 3).double(), torch.ones(2, 3).double())
