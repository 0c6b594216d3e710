"""The FMA / FTZ-AddMul vector kernels' corners (kern/values.inc, docs/cpu_fast.md "FMA chain
and FTZ-AddMul"): the accumulator's input flush where each instruction of L products starts
(a counter in the kernel), the flushes of products and partial sums to a zero of their sign
(left out where no value can be subnormal: fp16 inputs), on every ISA (AVX-512: the 512-bit
kernels unless the CPU is AMD; the AVX2 cap), against the scalar path and the reference."""
import pytest
import torch

from torch_mma_emu import reference as ref
import torch_mma_emu as tme
from helpers import assert_same_bits, fast_path, mm_on_path

_probe = tme.spec("sm90", "fp16")
ISAS = [i for i in ("avx512", "avx2") if fast_path(_probe, i).startswith(i + ":")]
needs_fast = pytest.mark.skipif(not ISAS, reason="no AVX2 on this CPU: only the scalar path exists")
FTZ = [tme.spec("gfx90a", f).replace(L=L, P=P) for f in ("bf16", "fp16")
       for L, P in ((8, 4), (4, 2), (16, 2), (4, 4))]


def _check(spec, A, B, C, what):
    kw = dict(A=A, B=B, C=C, arch=spec, out_dtype=torch.float32)
    S = mm_on_path(kw, "scalar")
    for isa in ISAS:
        assert fast_path(spec, isa) == f"{isa}:ftz"
        assert_same_bits(mm_on_path(kw, isa), S, f"fast ({isa}) vs scalar, {what}, {spec.to_string()}")
    assert_same_bits(S, ref.mm(spec, A, B, C), f"scalar vs reference, {what}, {spec.to_string()}")


@needs_fast
@pytest.mark.parametrize("spec", FTZ, ids=lambda s: f"{s.in_format}-L{s.L}-P{s.P}")
def test_ftz_accumulator_flush_per_instruction(spec):
    """A sum that lands on a negative subnormal flushes to -0; later groups of -0 products
    keep -0 inside the instruction, and the next instruction's input flush makes it +0
    (so +0 + -0 = +0 from there on).  Row j meets its subnormal sum in group j of the first
    instruction; bf16 only (fp16 values cannot reach it: those rows check the plain chain)."""
    L, P = spec.L, spec.P
    G = L // P                                   # groups per instruction
    K, N = 3 * L, 9
    dt = torch.bfloat16 if spec.in_format == "bf16" else torch.float16
    A = torch.zeros(G + 1, K, dtype=torch.float64)
    B = -torch.ones(K, N, dtype=torch.float64)   # a = +0 times b < 0: -0 products
    C = torch.zeros(G + 1, N)
    for j in range(G):                           # row j: product 2^-125 in group j, beside
        A[j, j * P] = -(2.0 ** -62)              # c = -1.25 * 2^-125: c + s = -2^-127 -> -0
        B[j * P, :] = -(2.0 ** -63)
    C[:G] = -1.25 * 2.0 ** -125
    A[G, :] = 2.0 ** -70                         # row G: products +-2^-140 (subnormal: +-0)
    B[:, N - 1] = torch.where(torch.arange(K) % 2 == 0, 1.0, -1.0).double()
    C[G] = torch.tensor([2.0 ** -130, -(2.0 ** -130), -0.0, 1.0, -1.0, 0.0, 2.0 ** -126, -0.0, 3.0])
    _check(spec, A.to(dt), B.to(dt), C, "accumulator flush")


@needs_fast
@pytest.mark.parametrize("spec", FTZ, ids=lambda s: f"{s.in_format}-L{s.L}-P{s.P}")
def test_ftz_products_and_sums_near_the_flush(spec):
    """Operands near the inputs' smallest normal (products and their sums around 2^-126 for
    bf16, 2^-28 for fp16), random signs, cancelling pairs, tiny and subnormal c; K not a
    multiple of L."""
    L = spec.L
    M, N, K = 5, 37, 3 * L + 3
    g = torch.Generator().manual_seed(41 + L + spec.P)
    fp16 = spec.in_format == "fp16"
    dt = torch.float16 if fp16 else torch.bfloat16
    e0 = -14 if fp16 else -63
    sgn = lambda *s: torch.where(torch.rand(*s, generator=g) < 0.5, -1.0, 1.0).double()
    A = (sgn(M, K) * (1 + torch.rand(M, K, generator=g).double())
         * 2.0 ** (e0 + torch.randint(0, 4, (M, K), generator=g).double()))
    B = (sgn(K, N) * (1 + torch.rand(K, N, generator=g).double())
         * 2.0 ** (e0 + torch.randint(0, 4, (K, N), generator=g).double()))
    A[1, 1::2] = A[1, 0:-1:2]                    # row 1: cancelling pairs
    B[1::2, :] = -B[0:-1:2, :] if K % 2 == 0 else B[1::2, :]
    A[2, ::5] = 0.0
    cv = torch.tensor([0.0, -0.0, 2.0 ** -127, -(2.0 ** -149), 2.0 ** -126, -(2.0 ** -100), 1.0])
    C = cv.repeat(M * N // len(cv) + 1)[: M * N].reshape(M, N).float()
    _check(spec, A.to(dt), B.to(dt), C, "near the flush")
