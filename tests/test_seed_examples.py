"""The worked examples of the seeds, through the public op (C++ kernels):
seed 003 eq. 10 / Table 8, the FTTN GEMM of seed 000 section V, seed 003 Figure 3."""
import pytest
import torch

import torch_mma_emu as tme

DT = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32, "xf32": torch.float32,
      "fp32": torch.float32, "fp64": torch.float64, "fp8_e5m2": torch.float8_e5m2,
      "fp8_e5m2fnuz": torch.float8_e5m2fnuz, "fp8_e4m3": torch.float8_e4m3fn,
      "fp8_e4m3fnuz": torch.float8_e4m3fnuz}


def eq10(fmt, n=3):
    """Seed 003 eq. 10 embedded in n x n matrices: A = (a, 0, ...)^T, B = (b, 0, ...),
    C = (c, 0, ...); K = 4 padded to 8 with zeros."""
    A = torch.zeros(n, 8, dtype=torch.float64)
    B = torch.zeros(8, n, dtype=torch.float64)
    C = torch.zeros(n, n, dtype=torch.float32)
    A[0, :4] = torch.tensor([-2.0 ** 13, -0.5, -0.25, -0.125])
    B[:4, 0] = torch.tensor([2.0 ** 10, 1, 1, 1])
    C[0, 0] = 2.0 ** 23
    dt = DT[fmt]
    return A.to(dt), B.to(dt), C


# Table 8.  FP8 column: eq. 10 needs 2^13 and 2^10, which only E5M2 holds (E4M3 max 448).
TABLE8 = [
    ("sm70", "fp16", 0.0), ("sm75", "fp16", -0.5),
    *[(a, f, -0.5) for a in ("sm80", "sm86", "sm89") for f in ("tf32", "bf16", "fp16")],
    ("sm89", "fp8_e5m2", 0.0),
    *[(a, f, -0.75) for a in ("sm90", "sm100", "sm120") for f in ("tf32", "bf16", "fp16")],
    ("sm90", "fp8_e5m2", 0.0), ("sm100", "fp8_e5m2", -0.75), ("sm120", "fp8_e5m2", -0.75),
    ("gfx908", "bf16", -0.875), ("gfx908", "fp16", -0.875),
    ("gfx90a", "fp16", 0.0),
    ("gfx942", "xf32", -0.5), ("gfx942", "bf16", -0.5), ("gfx942", "fp16", -0.5),
    ("gfx942", "fp8_e5m2fnuz", -1.0),
]


@pytest.mark.parametrize("arch,fmt,want", TABLE8, ids=[f"{a}-{f}" for a, f, _ in TABLE8])
def test_table8(arch, fmt, want):
    A, B, C = eq10(fmt)
    inf = fmt if fmt in ("tf32", "xf32") else None
    D = tme.emulated_mm(A, B, C, arch=arch, in_format=inf)
    assert D[0, 0].item() == want
    # the other elements are exact zeros
    mask = torch.ones_like(D, dtype=torch.bool)
    mask[0, 0] = False
    assert (D[mask] == 0).all()


@pytest.mark.parametrize("instruction,want", [("v_mfma_f32_32x32x8bf16_1k", 0.0),
                                              ("v_mfma_f32_32x32x4bf16", -0.375)])
def test_table8_cdna2_bf16_both_instructions(instruction, want):
    A, B, C = eq10("bf16")
    assert tme.emulated_mm(A, B, C, arch="MI250X", instruction=instruction)[0, 0].item() == want
    # the default is the _1k instruction that libraries use
    assert tme.emulated_mm(A, B, C, arch="gfx90a")[0, 0].item() == 0.0


@pytest.mark.parametrize("arch", tme.archs())
@pytest.mark.parametrize("fmt", ["fp64", "fp32"])
def test_table8_fp64_fp32_exact_everywhere(arch, fmt):
    A, B, C = eq10(fmt)
    D = tme.emulated_mm(A, B, C.to(DT[fmt]), arch=arch)
    assert D[0, 0].item() == -0.875


def fttn(K=8192):
    """Seed 000 section V: D = C - A B with C = 2^20, A_i0 = B_0j = 2^10, A_ij = 2^-2 (odd j)
    or 2^-3 (even j), B_ij = 2^-3.  alpha = -1 is folded into A.  One row/column suffices
    (all D_ij are equal); we compute a 2 x 2 block to also exercise rows/columns."""
    a = torch.full((K,), 2.0 ** -3, dtype=torch.float64)
    a[1::2] = 2.0 ** -2
    a[0] = 2.0 ** 10
    b = torch.full((K,), 2.0 ** -3, dtype=torch.float64)
    b[0] = 2.0 ** 10
    A = (-a).repeat(2, 1).to(torch.float16)
    B = b.repeat(2, 1).T.contiguous().to(torch.float16)
    C = torch.full((2, 2), 2.0 ** 20)
    return A, B, C


def test_fttn_gemm_h100_chain():
    A, B, C = fttn()
    D = tme.emulated_mm(A, B, C, arch="H100")
    assert (D == -191.875).all()


@pytest.mark.parametrize("arch", ["V100", "A100"])
def test_fttn_gemm_epilogue_v100_a100(arch):
    A, B, C = fttn()
    assert (tme.emulated_mm(A, B, C, arch=arch, c_mode="epilogue") == 0).all()


def test_fttn_exact_answer_differs():
    A, B, C = fttn()
    exact = (C.double() + A.double() @ B.double())[0, 0].item()
    assert exact == pytest.approx(-191.984375)


def figure3_errors(spec, n=64, reps=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    errs = []
    for _ in range(reps):
        A = (1000 * torch.randn(n, n, generator=g, dtype=torch.float64)).to(torch.float16)
        B = (1000 * torch.randn(n, n, generator=g, dtype=torch.float64)).to(torch.float16)
        C = torch.randn(n, n, generator=g, dtype=torch.float64).to(torch.float32)
        D = tme.emulated_mm(A, B, C, arch=spec)
        exact = C.double() + A.double() @ B.double()
        errs.append((D.double() - exact).flatten())
    return torch.cat(errs)


def test_figure3_cdna3_round_down_bias():
    """Seed 003 Figure 3: gfx942 fp16 (TR-FDPA, round-down alignment) is biased negative;
    the same model with round-toward-zero is symmetric."""
    rd = tme.spec("gfx942", "fp16")
    rz = rd.replace(align_round="rz")
    e_rd, e_rz = figure3_errors(rd), figure3_errors(rz)
    se_rd = e_rd.std() / len(e_rd) ** 0.5
    se_rz = e_rz.std() / len(e_rz) ** 0.5
    assert e_rd.mean() < -10 * se_rd  # strongly negative
    assert abs(e_rz.mean()) < 3 * se_rz  # no significant bias
    assert (e_rd < 0).float().mean() > 0.53  # 32768 samples: the fraction has s.e. 0.003
    assert 0.49 < (e_rz < 0).float().mean() < 0.51


def test_h100_bf16_subnormal_sample_of_matlab_issue_7():
    """An H100 bf16 -> fp32 sample with c = 0 and products near 2^-146, published with its
    hardware result 0x1.6p-146 in issue 7 of the MATLAB tensor-core models' repository
    (north-numerical-computing/MATLAB-tensor-core): our model gives it with and without
    MMA-Sim's zero-term exponent (docs/model.md section 6.3: consistent with both)."""
    import struct
    f = lambda h: struct.unpack(">f", bytes.fromhex(h))[0]
    A = ("9b940000 19f30000 9a2e0000 1a670000 9a250000 9b4e0000 9b290000 9a330000 "
         "99e00000 1a140000 99140000 99d10000 9ae90000 1b1a0000 9a9c0000 1b3a0000").split()
    B = ("9aaf0000 99f30000 9acc0000 1b7c0000 19ed0000 1b250000 9a1b0000 9a200000 "
         "9af70000 9a480000 1ae10000 1b320000 1b120000 1b0e0000 9a680000 17350000").split()
    a = torch.tensor([[f(x) for x in A]]).to(torch.bfloat16)
    b = torch.tensor([[f(x) for x in B]]).to(torch.bfloat16)
    c = torch.zeros(1, 1, 1)
    spec = tme.spec("sm90", "bf16")
    for sp in (spec, spec.replace(zero_exp=None)):
        d = tme.emulated_mm(a[:, None, :], b[:, :, None], c, arch=sp)
        assert d.item() == float.fromhex("0x1.6p-146")
