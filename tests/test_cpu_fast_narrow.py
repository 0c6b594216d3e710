"""fp16 outputs run the T-FDPA kernel's narrow form (fdpa_engine.h TShape::narrow, t_narrow):
a plain maximum takes the products' exponents (a zero product's byte stays below every c's
exponent, c = 0 taking at least -64) and the range test keeps its upper bound alone (only a
NaN or an infinite c leaves the range).

Differential: fast == scalar for every fp16-output T-FDPA row, as registered and with
Spec.zero_exp removed (c = 0 then takes F - 126 raised to -64), on inputs at the edges the
narrow form relies on: c = 0, -0 and fp16 subnormals beside products from 2^-34 to 2^-12
(around zero_exp and fp16's emin), whole chunks of zero operands, NaN / infinite / huge C,
and a sum 2^-45 above an fp16 tie beside c = 0 (a c = 0 exponent raised past the products
drops that bit); fixed-shape and generic kernels, every vector ISA.
"""
import pytest
import torch

import torch_mma_emu as tme
from helpers import assert_same_bits, env, fast_path, fdpa_kwargs, mm_on_path, row_id, row_specs, seeded

_probe = tme.spec("sm90", "fp16")
ISAS = [i for i in ("avx512", "avx2") if fast_path(_probe, i).startswith(i + ":")] or [None]
SPECS = [s for s in row_specs() if s.op in ("t_fdpa", "st_fdpa") and s.out_format == "fp16"]
CASES = ["small", "zeros", "nonfinite", "tie"]

_DT = {"fp16": torch.float16, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


def _operands(spec, case, g):
    M, K, N = 13, 4 * 32 + 8, 70
    A = torch.randn(M, K, generator=g)
    B = torch.randn(K, N, generator=g)
    C = torch.randn(M, N, generator=g)
    if case == "small":  # products from 2^-34 to 2^-12: around zero_exp (-19 .. -21) and emin (-14)
        A *= 2.0 ** torch.randint(-17, -5, (M, 1), generator=g).float()
        B *= 2.0 ** torch.randint(-17, -6, (1, N), generator=g).float()
        C = C * 2.0 ** -18  # fp16 subnormals and normals near emin
        C[::3] = 0.0
        C[1::3, ::2] = -0.0
    if case == "zeros":  # chunks where some or every product is zero, tiny and zero c
        A[:, 8:16] = 0
        A[2] = 0
        B[24:40, ::3] = 0
        B[:, 7] = -0.0
        C *= 2.0 ** -16
        C[:, ::4] = 0.0
    if case == "nonfinite":  # NaN / infinite c from the start, huge c that overflows on the way
        C[0, 0] = float("nan")
        C[1, 2] = float("inf")
        C[2, 5] = -float("inf")
        C[3] = 6e4
        A[4] *= 200
    if case == "tie" and spec.in_format == "fp16":  # c = 0, 2^-25 + 2^-45: above a tie by a bit
        A[0], B[:, 0], C[0, 0] = 0, 0, 0  # the grid at emax = -25 keeps, a raised c = 0 drops
        A[0, 0], B[0, 0] = 2.0 ** -12 * (1 + 2.0 ** -10), 2.0 ** -13 * (1 + 2.0 ** -10)
        A[0, 1], B[1, 0] = -(2.0 ** -12), 2.0 ** -22
    A, B = A.to(_DT[spec.in_format]), B.to(_DT[spec.in_format])
    return fdpa_kwargs(spec, A, B, C.to(torch.float16))


@pytest.mark.parametrize("generic", [False, True], ids=["fixed", "generic"])
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("zx", [True, False], ids=["zero_exp", "no_zero_exp"])
@pytest.mark.parametrize("spec", SPECS, ids=row_id)
def test_narrow_equals_scalar(spec, zx, isa, generic):
    s = spec if zx else spec.replace(zero_exp=None)
    with env(MMA_EMU_CPU_GENERIC="1" if generic else None):
        if isa is not None:
            assert fast_path(s, isa) == f"{isa}:fdpa", fast_path(s, isa)
        for case in CASES:
            kw = _operands(s, case, seeded(row_id(spec), zx, case))
            D = mm_on_path(kw, isa)
            R = mm_on_path(kw, "scalar")
            assert_same_bits(D, R, f"{row_id(spec)} zero_exp={zx} {case} on {isa} generic={generic}")
