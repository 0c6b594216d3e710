"""Tests of the pure-Python exact reference model (torch_mma_emu.reference).

The reference is the test oracle of the C++ kernels, so it is itself checked against
everything with a known answer: seed 003 eq. 10 / Table 8 (MMA-Sim), the FTTN GEMM of
seed 000 section V, the hand-checked tests of seed 004 (Fasi et al.), special values
(docs/model.md section 3), and a deterministic subset of the recorded hardware samples.
"""
from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest
import torch

from torch_mma_emu import registry
from torch_mma_emu.reference import (code_value, codes_to_tensor, decode, dot, elementary,
                                     encode, mm, round_float, round_to, rz_f, rd_f,
                                     tensor_to_codes, value_code)
from torch_mma_emu.reference import hwdata
from torch_mma_emu.reference.values import x_fin
from torch_mma_emu.spec import IEEE_NAN, NVIDIA_NAN, Spec

F = Fraction
P2 = lambda k: F(2) ** k  # noqa: E731


def codes(fmt, values):
    return [value_code(fmt, x) for x in values]


def run(sp, a, b, c, **kw):
    """dot() on plain numbers; returns the exact result (Fraction, or float inf/nan)."""
    d = dot(sp, codes(sp.fmt_a, a), codes(sp.fmt_b, b), value_code(sp.out_format, c), **kw)
    return code_value(sp.out_format, d)


def run_code(sp, a, b, c, **kw):
    return dot(sp, codes(sp.fmt_a, a), codes(sp.fmt_b, b), value_code(sp.out_format, c), **kw)


# ======================================================================================
# Rounding and encoding primitives
# ======================================================================================

def test_fixed_point_roundings():
    assert rz_f(F(-5, 8), 1) == F(-1, 2)
    assert rd_f(F(-5, 8), 1) == -1
    assert rz_f(F(5, 8), 1) == F(1, 2)
    assert rd_f(F(5, 8), 1) == F(1, 2)
    assert rd_f(F(-1, 2), 1) == F(-1, 2)   # exact values are untouched


@pytest.mark.parametrize("fmt,npdtype", [("fp32", np.float32), ("fp16", np.float16)])
def test_rne_matches_numpy(fmt, npdtype):
    """RNE of doubles (normal, subnormal, overflowing, ties) agrees with numpy's conversion."""
    from torch_mma_emu.formats import get_format
    rng = random.Random(1)
    f = get_format(fmt)
    vals = []
    for _ in range(3000):
        e = rng.randint(f.emin - f.man_bits - 3, f.emax + 1)
        vals.append(rng.choice([-1, 1]) * rng.random() * 2.0 ** e)
    # exact ties at several scales
    for e in (f.emin - f.man_bits - 1, f.emin - 2, 0, f.emax - f.man_bits):
        for m in range(1, 20):
            vals.append((m + 0.5) * 2.0 ** e)
    vals += [float(f.max_finite) * (1 + 2.0 ** -(f.man_bits + 1)),  # tie at overflow -> inf
             float(f.max_finite) * (1 + 2.0 ** -(f.man_bits + 2))]
    with np.errstate(over="ignore"):
        for x in vals:
            want = npdtype(x)
            got = round_to(f, F(x), "rne")
            if np.isinf(want):
                assert got.kind == "inf" and got.sign == (want < 0), x
            else:
                assert got.kind == "fin" and got.value == F(float(want)), x


def test_rz_and_e8m13():
    x = F(1) + P2(-23) + P2(-24)
    assert round_float(x, 23, -126, 127, "rz").value == 1 + P2(-23)
    assert round_float(-x, 23, -126, 127, "rz").value == -(1 + P2(-23))
    assert round_float(x, 13, -126, 127, "rz").value == 1
    # subnormal E8M13: multiples of 2**-139
    y = 3 * P2(-140)
    assert round_float(y, 13, -126, 127, "rz").value == P2(-139)
    assert round_float(y, 23, -126, 127, "rz").value == y
    # overflow: RZ gives infinity (docs/model.md), not the largest finite number
    assert round_float(P2(128), 23, -126, 127, "rz").kind == "inf"
    assert round_float(P2(128) - P2(100), 23, -126, 127, "rz").value == P2(128) - P2(104)
    # a nonzero value that underflows to zero keeps its sign
    z = round_float(-P2(-200), 23, -126, 127, "rz")
    assert z.is_zero and z.sign == 1


def test_decode_encode_roundtrip_small_formats():
    from torch_mma_emu.formats import FORMATS
    for name, f in FORMATS.items():
        if f.bits > 8:
            continue
        for code in range(1 << f.bits):
            d = decode(f, code)
            if d.is_nan or not f.signed:
                continue
            from torch_mma_emu.reference.values import x_of
            assert encode(f, x_of(d)) == code, (name, code)


def test_tensor_codes_roundtrip():
    t = torch.tensor([1.0, -0.0, float("inf"), 3.5e-40, -2.5], dtype=torch.float32)
    c = tensor_to_codes(t)
    assert c == [0x3F800000, 0x80000000, 0x7F800000, t[3:4].view(torch.int32).item(), 0xC0200000]
    back = codes_to_tensor(c, "fp32")
    assert torch.equal(back.view(torch.int32), t.view(torch.int32))
    h = torch.tensor([-1.0, 65504.0], dtype=torch.float16)
    assert tensor_to_codes(h) == [0xBC00, 0x7BFF]
    d = torch.tensor([-1.0], dtype=torch.float64)
    assert tensor_to_codes(d) == [0xBFF0000000000000]
    assert codes_to_tensor([0xBFF0000000000000], "fp64").item() == -1.0


# ======================================================================================
# Seed 003 (MMA-Sim) eq. 10 / Table 8
# ======================================================================================

EQ10_A = [-2 ** 13, -0.5, -0.25, -0.125]
EQ10_B = [2 ** 10, 1, 1, 1]
EQ10_C = 2 ** 23

# (arch, input format, expected d) - Table 8.  "TF32/BF16 Instr." is checked for both
# input types where the arch has them (AMD CDNA3's TF32 is xf32).  FP8: the example needs
# 2**13 and 2**10, which E4M3 (max 448) and E4M3FNUZ (max 240) cannot hold, so the FP8
# column is checked with E5M2 (OCP on NVIDIA, E5M2FNUZ = "bf8" on CDNA3), the only FP8
# formats holding every input of eq. 10; a scaled E4M3 variant follows below.
TABLE8 = [
    ("sm70", "fp16", F(0)),
    ("sm75", "fp16", F(-1, 2)),
    ("sm80", "tf32", F(-1, 2)), ("sm80", "bf16", F(-1, 2)), ("sm80", "fp16", F(-1, 2)),
    ("sm86", "tf32", F(-1, 2)), ("sm86", "bf16", F(-1, 2)), ("sm86", "fp16", F(-1, 2)),
    ("sm89", "tf32", F(-1, 2)), ("sm89", "bf16", F(-1, 2)), ("sm89", "fp16", F(-1, 2)),
    ("sm89", "fp8_e5m2", F(0)),
    ("sm90", "tf32", F(-3, 4)), ("sm90", "bf16", F(-3, 4)), ("sm90", "fp16", F(-3, 4)),
    ("sm90", "fp8_e5m2", F(0)),
    ("sm100", "tf32", F(-3, 4)), ("sm100", "bf16", F(-3, 4)), ("sm100", "fp16", F(-3, 4)),
    ("sm100", "fp8_e5m2", F(-3, 4)),
    ("sm120", "tf32", F(-3, 4)), ("sm120", "bf16", F(-3, 4)), ("sm120", "fp16", F(-3, 4)),
    ("sm120", "fp8_e5m2", F(-3, 4)),
    ("gfx908", "bf16", F(-7, 8)), ("gfx908", "fp16", F(-7, 8)),
    ("gfx90a", "fp16", F(0)),
    ("gfx942", "xf32", F(-1, 2)), ("gfx942", "bf16", F(-1, 2)), ("gfx942", "fp16", F(-1, 2)),
    ("gfx942", "fp8_e5m2fnuz", F(-1)),
]


@pytest.mark.parametrize("arch,fmt,want", TABLE8, ids=[f"{a}-{f}" for a, f, _ in TABLE8])
def test_table8(arch, fmt, want):
    sp = registry.spec(arch, fmt)
    assert run(sp, EQ10_A, EQ10_B, EQ10_C) == want


@pytest.mark.parametrize("instr,want", [("v_mfma_f32_32x32x4bf16", F(-3, 8)),
                                        ("v_mfma_f32_32x32x8bf16_1k", F(0))])
def test_table8_cdna2_bf16_two_instructions(instr, want):
    assert set(registry.instructions("gfx90a", "bf16")) >= {instr}
    sp = registry.spec("gfx90a", "bf16", instruction=instr)
    assert sp.P == (2 if want else 4)
    assert run(sp, EQ10_A, EQ10_B, EQ10_C) == want


@pytest.mark.parametrize("arch", registry.archs())
@pytest.mark.parametrize("fmt", ["fp64", "fp32"])
def test_table8_fp64_fp32_exact_everywhere(arch, fmt):
    sp = registry.spec(arch, fmt)
    assert sp.op == "fma"
    assert run(sp, EQ10_A, EQ10_B, EQ10_C) == F(-7, 8)


@pytest.mark.parametrize("arch,fmt,want", [
    ("sm89", "fp8_e4m3", F(0)), ("sm90", "fp8_e4m3", F(0)), ("sm100", "fp8_e4m3", F(-3, 4)),
    ("gfx942", "fp8_e4m3fnuz", F(-1))])
def test_table8_fp8_e4m3_scaled(arch, fmt, want):
    """Eq. 10 scaled by 2**-9 so that every input fits E4M3 / E4M3FNUZ: products
    -2**14 (= -2**7 * 2**7), -2**-10, -2**-11, -2**-12 and c = 2**14.  The truncations
    depend only on the values relative to e_max, so Table 8's answers scale by 2**-9
    (the small inputs are E4M3FNUZ subnormals; their alignment is by value, so the
    unnormalised exponent does not matter)."""
    a = [-2 ** 7, -2 ** -5, -2 ** -5, -2 ** -6]
    b = [2 ** 7, 2 ** -5, 2 ** -6, 2 ** -6]
    sp = registry.spec(arch, fmt)
    assert run(sp, a, b, 2 ** 14) == want * P2(-9)


# ======================================================================================
# Seed 000 (FTTN) section V: the GEMM whose answer differs across GPUs
# ======================================================================================

def fttn_inputs(K=8192):
    # D = alpha*A*B + beta*C with alpha = -1 folded into A, beta = 1
    a = [-(2.0 ** 10)] + [-(2.0 ** -2) if j % 2 else -(2.0 ** -3) for j in range(1, K)]
    b = [2.0 ** 10] + [2.0 ** -3] * (K - 1)
    return a, b, 2.0 ** 20


def test_fttn_gemm_hopper_chain():
    """H100 produced 191.875 in magnitude: 2**20 cancels -2**20 in the first chunk, where the
    2**-6 products (below 2**(20-25)) are truncated; afterwards all terms are exact."""
    a, b, c = fttn_inputs()
    sp = registry.spec("sm90", "fp16")
    assert run(sp, a, b, c) == F(-191875, 1000)
    # the tensor API gives the same bits
    A = torch.tensor([a], dtype=torch.float16)
    B = torch.tensor(b, dtype=torch.float16).reshape(-1, 1)
    D = mm(sp, A, B, torch.tensor([[c]]))
    assert D.dtype == torch.float32 and D.item() == -191.875


@pytest.mark.parametrize("arch", ["sm70", "sm80"])
def test_fttn_gemm_epilogue_zero(arch):
    """V100 and A100 produced 0: with C added in the epilogue the accumulator holds -2**20
    from the first chunk on, every small product is truncated against it, and -2**20 + 2**20
    = 0."""
    a, b, c = fttn_inputs()
    sp = registry.spec(arch, "fp16")
    assert run(sp, a, b, c, c_mode="epilogue") == 0
    # whereas the chain (C fed to the first MMA) keeps the small products
    assert run(sp, a, b, c) != 0


# ======================================================================================
# Seed 004 (Fasi, Higham, Mikaitis, Pranesh): hand-checked tensor-core features
# ======================================================================================

NV_FP16 = ["sm70", "sm75", "sm80"]


def fasi(arch, out="fp32"):
    return registry.spec(arch, "fp16", out)


@pytest.mark.parametrize("arch", NV_FP16)
@pytest.mark.parametrize("out", ["fp32", "fp16"])
def test_fasi_subnormal_inputs_and_outputs(arch, out):
    sp = fasi(arch, out)
    # a11 = 2**-24 (fp16 subnormal), b11 = 2**2 -> 2**-22 in both modes
    assert run(sp, [2 ** -24], [4], 0) == P2(-22)
    # 2**-14 * 2**-1 -> the fp16 subnormal 2**-15 in both modes
    assert run(sp, [2 ** -14], [0.5], 0) == P2(-15)
    # 2**-14 * 1 - 2**-15 -> 2**-15
    assert run(sp, [2 ** -14], [1], -(2 ** -15)) == P2(-15)


@pytest.mark.parametrize("arch", NV_FP16)
def test_fasi_fp32_subnormal_c_preserved(arch):
    assert run(fasi(arch), [0, 0, 0, 0], [0, 0, 0, 0], 2 ** -149) == P2(-149)


def test_fasi_bf16_subnormal_output_a100():
    assert run(registry.spec("sm80", "bf16"), [2 ** -126], [0.5], 0) == P2(-127)


@pytest.mark.parametrize("arch", NV_FP16)
def test_fasi_products_exact(arch):
    x = 1 - 2 ** -11
    assert run(fasi(arch), [x] * 4, [x] * 4, 0) == 4 * (1 - P2(-10) + P2(-22))
    # fp16 output: the sum of two inexact-in-fp16 products is still exact
    assert run(fasi(arch, "fp16"), [x, x], [x, 2 ** -11], 0) == 1 - P2(-10) + P2(-11)


@pytest.mark.parametrize("arch,tiny", [("sm70", 2 ** -24), ("sm75", 2 ** -25), ("sm80", 2 ** -25)])
def test_fasi_four_rounding_errors(arch, tiny):
    """d = b1+b2+b3+b4+c with one addend 1 and the others one bit below the accumulator's
    last bit (2**-24 on V100, 2**-25 on T4/A100, which have an extra bit): always 1."""
    sp = fasi(arch)
    for pos in range(5):
        vals = [tiny] * 5
        vals[pos] = 1
        assert run(sp, [1] * 4, vals[:4], vals[4]) == 1


@pytest.mark.parametrize("arch", NV_FP16)
def test_fasi_round_toward_zero(arch):
    sp = fasi(arch)
    t = 2 ** -23 + 2 ** -24  # fp16 subnormal between RN and RZ thresholds
    assert run(sp, [1, 1], [2, t], 0) == 2
    assert run(sp, [1, 1], [-2, -t], 0) == -2


@pytest.mark.parametrize("arch", NV_FP16)
def test_fasi_fp16_output_rounds_to_nearest(arch):
    assert run(fasi(arch, "fp16"), [2 ** -24, 2 ** -24], [0.5, 0.25], 0) == P2(-24)


def test_fasi_no_guard_digit_v100():
    assert run(fasi("sm70"), [1], [1], -1 + 2 ** -24) == P2(-23)


@pytest.mark.parametrize("arch,want", [("sm70", F(1)), ("sm75", 1 + P2(-23)), ("sm80", 1 + P2(-23))])
def test_fasi_extra_bottom_bit(arch, want):
    """1 + 2**-24 + 2**-24 is exact on T4 / A100 thanks to the extra bit (F = 24)."""
    assert run(fasi(arch), [1, 1], [2 ** -24, 2 ** -24], 1) == want


def test_fasi_normalisation_only_at_the_end_v100():
    assert run(fasi("sm70"), [1] * 4, [2 ** -24] * 4, 1 - 2 ** -24) == 1 + P2(-23)


def test_fasi_normalisation_in_subtraction_v100():
    sp = fasi("sm70")
    for b in ([1, -2 ** -24, 0, 0], [-2 ** -24, 1, 0, 0], [0, 0, 1, -2 ** -24]):
        assert run(sp, [1] * 4, b, -1 + 2 ** -24) == P2(-23)


@pytest.mark.parametrize("arch", NV_FP16)
def test_fasi_two_extra_carry_bits(arch):
    sp = fasi(arch)
    c = 1 + 2 ** -22 + 2 ** -23
    for pos in range(4):
        b = [1, 1, 1, 1]
        b[pos] = 2 ** -23
        assert run(sp, [1] * 4, b, c) == 4 + P2(-21)
    # replacing 2**-23 by 1: 5 + 0.75 ulp -> RZ in the final normalisation gives 5
    assert run(sp, [1] * 4, [1] * 4, c) == 5


@pytest.mark.parametrize("arch", NV_FP16)
def test_fasi_third_carry_bit(arch):
    assert run(fasi(arch), [1] * 4, [1, 1.5, 1.75, 1.875], 1.875) == 8


def test_fasi_non_monotonic_v100():
    sp = fasi("sm70")
    assert run(sp, [1] * 4, [2 ** -24] * 4, 1 - 2 ** -24) == 1 + P2(-23)
    assert run(sp, [1] * 4, [2 ** -24] * 4, 1) == 1  # larger c, smaller result


# ======================================================================================
# Special values (docs/model.md section 3)
# ======================================================================================

INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize("arch,fmt,out,nan", [
    ("sm80", "fp16", "fp32", 0x7FFFFFFF), ("sm80", "fp16", "fp16", 0x7FFF),
    ("sm90", "bf16", "fp32", 0x7FFFFFFF), ("sm89", "fp8_e4m3", "fp32", 0x7FFFFFFF),
    ("sm90", "fp64", "fp64", 0x7FFFFFFFFFFFFFFF), ("sm90", "fp32", "fp32", 0x7FFFFFFF),
    ("gfx908", "fp16", "fp32", 0x7FC00000), ("gfx90a", "fp16", "fp32", 0x7FC00000),
    ("gfx942", "fp16", "fp32", 0x7FC00000), ("gfx942", "fp8_e4m3fnuz", "fp32", 0x7FC00000),
    ("gfx942", "fp64", "fp64", 0x7FF8000000000000)])
def test_nan_encodings(arch, fmt, out, nan):
    sp = registry.spec(arch, fmt, out)
    assert sp.nan_encoding == nan
    K = sp.L
    # NaN in a
    a = [NAN] + [1] * (K - 1)
    assert run_code(sp, a, [1] * K, 0) == nan
    # NaN in c
    assert run_code(sp, [1] * K, [1] * K, NAN) == nan
    # inf * 0 (formats with infinities)
    if sp.fmt_a.nan_style == "ieee":
        assert run_code(sp, [INF] + [0] * (K - 1), [0] * K, 0) == nan
        # inf - inf among the products, and product inf against c = -inf
        if K >= 2:
            assert run_code(sp, [INF, INF] + [0] * (K - 2), [1, -1] + [0] * (K - 2), 0) == nan
        assert run_code(sp, [INF] + [0] * (K - 1), [1] * K, -INF) == nan
        # inf plus finite stays inf with its sign
        assert run(sp, [INF] + [1] * (K - 1), [-2] * K, 5) == -INF


def test_nan_payload_not_propagated():
    sp = registry.spec("sm80", "fp16")
    a = [0x7E01] + [0x3C00] * 7  # fp16 quiet NaN with payload
    assert dot(sp, a, [0x3C00] * 8, 0) == 0x7FFFFFFF


def test_overflow_to_infinity():
    # RZ-FP32: a sum >= 2**128 becomes +inf (not the largest finite number)
    sp = registry.spec("sm90", "bf16")
    assert run(sp, [2 ** 127, 2 ** 127], [1.5, 1.5], 0) == INF
    assert run(sp, [2 ** 127, 2 ** 127], [-1.5, -1.5], 0) == -INF
    # RNE-FP16: 65504 + 16 rounds to 65520 -> inf
    sp16 = registry.spec("sm80", "fp16", "fp16")
    assert run(sp16, [65504, 16], [1, 1], 0) == INF
    assert run(sp16, [65504, 15], [1, 1], 0) == 65504


def test_tr_fdpa_product_overflow():
    """CDNA3: a finite product with |a*b| >= 2**128 overflows to infinity (seed 003 4.2)."""
    tr = registry.spec("gfx942", "bf16")
    nv = registry.spec("sm90", "bf16")
    a, b = [2 ** 64, 2 ** 63] + [0] * 6, [2 ** 64, -2 ** 64] + [0] * 6
    # 2**128 - 2**127: finite in the NVIDIA fused sum, +inf on CDNA3
    assert run(nv, a, b, 0) == P2(127)
    assert run(tr, a, b, 0) == INF
    # an overflowing product of each sign -> NaN; against c = -inf -> NaN (docs: unverified)
    assert math.isnan(run(tr, [2 ** 64, 2 ** 64] + [0] * 6, [2 ** 64, -2 ** 64] + [0] * 6, 0))
    assert math.isnan(run(tr, [2 ** 64] + [0] * 7, [2 ** 64] + [0] * 7, -INF))
    # just below 2**128 stays finite
    assert run(tr, [2 ** 64 - 2 ** 56] + [0] * 7, [2 ** 64] + [0] * 7, 0) == P2(128) - P2(120)
    # CDNA1's exact E-FDPA does not overflow in between either
    e = registry.spec("gfx908", "bf16")
    assert run(e, [2 ** 64, 2 ** 63], [2 ** 64, -2 ** 64], 0) == P2(127)


def test_ftz_addmul_overflow_and_flush():
    sp = registry.spec("gfx90a", "bf16")  # _1k: P = 4
    # FTZ-Add of two large products overflows to +inf in fp32
    assert run(sp, [2 ** 127, 2 ** 127, 0, 0], [1.5, 1.5, 0, 0], 0) == INF
    # ... and +inf + -inf later is NaN
    r = run(sp, [2 ** 127, 2 ** 127, 2 ** 127, 2 ** 127], [1.5, 1.5, -1.5, -1.5], 0)
    assert math.isnan(r)
    # product below 2**-126 is flushed (bf16 normals 2**-100 * 2**-27)
    assert run(sp, [2 ** -100, 0, 0, 0], [2 ** -27, 0, 0, 0], 1) == 1
    assert run(sp, [2 ** -100, 0, 0, 0], [2 ** -26, 0, 0, 0], 0) == P2(-126)
    # fp16 subnormal inputs flush to zero (CDNA2's FP16 input FTZ)
    sp16 = registry.spec("gfx90a", "fp16")
    assert run(sp16, [2 ** -15, 0, 0, 0], [2 ** 10, 0, 0, 0], 0) == 0
    assert run(sp16, [2 ** -14, 0, 0, 0], [2 ** 10, 0, 0, 0], 0) == P2(-4)
    # the fp32 accumulator input is flushed too
    assert run(sp16, [0] * 4, [0] * 4, 2 ** -130) == 0


def test_ftz_addmul_matches_numpy_float32():
    """Independent check of the IEEE steps (RNE, signed zeros, overflow, FTZ) of CDNA2's
    FTZ-AddMul against numpy's float32 arithmetic on random fp16 inputs."""
    sp = registry.spec("gfx90a", "fp16")
    rng = np.random.default_rng(7)
    tiny = np.float32(2.0 ** -126)

    def ftz(x):
        return np.float32(x * np.float32(0)) if abs(x) < tiny else x

    def flush(x, emin):
        return np.float32(0) if abs(x) < np.float32(2.0 ** emin) else x

    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(400):
            a16 = (rng.standard_normal(4) * 2.0 ** rng.integers(-20, 16, 4)).astype(np.float16)
            b16 = (rng.standard_normal(4) * 2.0 ** rng.integers(-20, 16, 4)).astype(np.float16)
            c32 = np.float32(rng.standard_normal() * 2.0 ** rng.integers(-140, 33))
            if rng.random() < 0.1:
                c32 = np.float32(-0.0)
            a = [flush(np.float32(x), -14) for x in a16]
            b = [flush(np.float32(x), -14) for x in b16]
            p = [ftz(np.float32(x * y)) for x, y in zip(a, b)]
            s = ftz(np.float32(ftz(np.float32(p[0] + p[1])) + ftz(np.float32(p[2] + p[3]))))
            want = ftz(np.float32(flush(c32, -126) + s))
            got = dot(sp, [int(x) for x in a16.view(np.uint16)], [int(x) for x in b16.view(np.uint16)],
                      int(np.array(c32).view(np.uint32)))
            want_bits = int(np.array(want, dtype=np.float32).view(np.uint32))
            if np.isnan(want):
                want_bits = 0x7FC00000
            assert got == want_bits, (a16, b16, c32)


def test_zero_sum_sign():
    sp = registry.spec("sm80", "fp16")
    # exact cancellation gives +0
    assert run_code(sp, [1, 1], [1, -1], 0) == 0
    # all-zero inputs with c = -0: the fixed-point sum is zero -> +0 (docs/model.md 3)
    assert run_code(sp, [-0.0, 0], [1, 1], -0.0) == 0
    # E-FDPA is a fused operation too: an exact zero gives +0 (IEEE would give -0 here)
    assert run_code(registry.spec("gfx908", "fp16"), [-0.0] * 4, [1] * 4, -0.0) == 0
    # a nonzero sum that rounds to zero: +0 on NVIDIA (MMA-Sim 2.1, docs/model.md 6.1),
    # its sign with zero_sign="keep" (IEEE style): -2**-34 -> fp16 +0 / -0
    sp16 = registry.spec("sm80", "fp16", "fp16")
    assert run_code(sp16, [-(2 ** -24)], [2 ** -10], 0) == 0
    assert run_code(sp16.replace(zero_sign="keep"), [-(2 ** -24)], [2 ** -10], 0) == 0x8000
    # FMA follows IEEE: -0 + -0 = -0
    f = registry.spec("sm80", "fp32")
    assert run_code(f, [-0.0], [1], -0.0) == 0x80000000
    assert run_code(f, [1], [1], -1) == 0


def test_fma_single_rounding():
    sp = registry.spec("gfx942", "fp32")
    x = 1 + 2 ** -12
    y = 1 - 2 ** -12
    # (1 + 2**-12)(1 - 2**-12) - 1 = -2**-24 exactly with one rounding (0 with two)
    assert run(sp, [x], [y], -1) == -P2(-24)
    sp64 = registry.spec("sm90", "fp64")
    x = 1 + 2.0 ** -30
    y = 1 - 2.0 ** -30
    assert run(sp64, [x], [y], -1) == -P2(-60)


# ======================================================================================
# CDNA3 rounding details
# ======================================================================================

def test_tr_fdpa_round_down_asymmetry():
    """Seed 003 6.2.4: CDNA3 rounds c down when aligning it, so Phi(-A, B, -C) != -Phi(A, B, C);
    the hypothetical RZ instruction (align_round="rz") is symmetric."""
    sp = registry.spec("gfx942", "fp16")
    a, b = [2 ** 15] + [0] * 7, [2 ** 15] + [0] * 7
    assert run(sp, a, b, -1) == P2(30) - 64             # c' = RD(-2**-30) = -2**-24 (units 2**30)
    assert run(sp, [-x for x in a], b, 1) == -P2(30)    # c' = RD(+2**-30) = 0
    rz = sp.replace(align_round="rz")
    assert run(rz, a, b, -1) == P2(30)
    assert run(rz, [-x for x in a], b, 1) == -P2(30)


def test_gtr_fdpa_special_truncation():
    """Algorithm 11 line 24: c' = 0 when e_c < E - F - 1 (TR-FDPA has no such rule)."""
    gtr = registry.spec("gfx942", "fp8_e5m2fnuz")
    a, b = [2 ** 15] + [0] * 15, [2 ** 15] + [0] * 15
    assert run(gtr, a, b, -(2 ** 4)) == P2(30)           # 4 < 30 - 25: dropped
    assert run(gtr, a, b, -(2 ** 5)) == P2(30) - 64      # rounded down to -2**-24 units
    tr = registry.spec("gfx942", "bf16")
    assert run(tr, a[:8], b[:8], -(2 ** 4)) == P2(30) - 64


def test_gtr_fdpa_even_odd_groups():
    """Even and odd products are truncated separately, then combined with RD_F."""
    gtr = registry.spec("gfx942", "fp8_e5m2fnuz")
    # products: k=0 2**30 and k=2 2**-1 (even group, e_even = 30: 2**-1 is below 2**(30-24)
    # and truncated), k=1 2**-2 (odd group, e_odd = -2: exact within its group)
    a = [2 ** 15, 2 ** -1, 2 ** -1] + [0] * 13
    b = [2 ** 15, 2 ** -1, 1] + [0] * 13
    # combining at e_max = 30: RD_24(+2**-32) = 0
    assert run(gtr, a, b, 0) == P2(30)
    # negative odd group rounds down to one unit 2**(30-24)
    assert run(gtr, a, [2 ** 15, -(2 ** -1), 1] + [0] * 13, 0) == P2(30) - 64


# ======================================================================================
# Block-scaled operations
# ======================================================================================

def test_st_fdpa_scales():
    sp = registry.spec("sm100", "fp8_e4m3", scale_format="ue8m0")
    assert sp.op == "st_fdpa" and sp.block_size == 32 and sp.L == 32
    a = codes("fp8_e4m3", [1.5] + [0] * 31)
    b = codes("fp8_e4m3", [2] + [0] * 31)
    # scale codes: 127 + 3 -> 2**3, 127 - 1 -> 2**-1
    d = dot(sp, a, b, 0, [130], [126])
    assert code_value("fp32", d) == 12
    # a NaN scale poisons its chunk
    assert dot(sp, a, b, 0, [0xFF], [127]) == 0x7FFFFFFF
    # K = 40: two blocks; second block zero-padded to a full chunk
    a2 = a + codes("fp8_e4m3", [1] * 8)
    b2 = b + codes("fp8_e4m3", [1] * 8)
    d = dot(sp, a2, b2, 0, [127, 127 + 10], [127, 127])
    assert code_value("fp32", d) == 3 + 8 * 2 ** 10


def test_gst_fdpa_mxfp4_groups_and_zero_groups():
    sp = registry.spec("sm100", "fp4_e2m1", scale_format="ue8m0")
    assert (sp.op, sp.L, sp.G, sp.block_size, sp.F) == ("gst_fdpa", 64, 16, 32, 35)
    a = [0] * 64
    b = [0] * 64
    a[0], b[0] = value_code("fp4_e2m1", 1), value_code("fp4_e2m1", 1)      # group 0: 1
    # group 2 (block 1): 6*6 - 6*6 = 0, under a huge scale 2**100
    a[32], b[32] = value_code("fp4_e2m1", 6), value_code("fp4_e2m1", 6)
    a[33], b[33] = value_code("fp4_e2m1", -6), value_code("fp4_e2m1", 6)
    c = value_code("fp32", 2 ** -20)
    d = elementary(sp, a, b, c, [127, 227], [127, 127])
    # the cancelled group keeps its scale exponent 100 in e_max (MMA-Sim, docs/model.md 6.2):
    # everything else truncates to 0
    assert code_value("fp32", d) == 0
    # cancelled_group="drop": it does not take part in e_max, so c survives (F = 35 bits)
    d = elementary(sp.replace(cancelled_group="drop"), a, b, c, [127, 227], [127, 127])
    assert code_value("fp32", d) == 1 + P2(-20)
    # group sums are exact before truncation: 15 * (0.5*0.5) + 6*6 inside one group
    a = [value_code("fp4_e2m1", 0.5)] * 15 + [value_code("fp4_e2m1", 6)] + [0] * 48
    b = [value_code("fp4_e2m1", 0.5)] * 15 + [value_code("fp4_e2m1", 6)] + [0] * 48
    d = elementary(sp, a, b, 0, [127, 127], [127, 127])
    assert code_value("fp32", d) == F(15, 4) + 36


def test_gst_fdpa_nvfp4_ue4m3_scale_significand():
    sp = registry.spec("sm100", "fp4_e2m1", scale_format="ue4m3")
    assert sp.block_size == 16 and len(range(sp.L // sp.block_size)) == 4
    one = value_code("fp4_e2m1", 1)
    a = [one] + [0] * 63
    b = [one] + [0] * 63
    s15 = 0x3C   # ue4m3 1.5 (exponent 7 - 7 = 0, mantissa 100)
    s1 = 0x38
    d = elementary(sp, a, b, 0, [s15, s1, s1, s1], [s15, s1, s1, s1])
    assert code_value("fp32", d) == F(9, 4)
    # sign bit of a ue4m3 scale is ignored
    d2 = elementary(sp, a, b, 0, [s15 | 0x80, s1, s1, s1], [s15, s1, s1, s1])
    assert d2 == d


# ======================================================================================
# The chain
# ======================================================================================

def test_chain_padding_and_k0():
    sp = registry.spec("sm80", "fp16")
    c = value_code("fp32", 1.25)
    assert dot(sp, [], [], c) == c
    rng = random.Random(5)
    vals = [rng.choice([-1, 1]) * rng.random() * 2 ** rng.randint(-20, 10) for _ in range(11)]
    a = codes("fp16", vals)
    b = codes("fp16", list(reversed(vals)))
    # K = 11 equals K = 16 with explicit zeros
    assert dot(sp, a, b, c) == dot(sp, a + [0] * 5, b + [0] * 5, c)
    # and equals two explicit elementary calls
    acc = elementary(sp, a[:8], b[:8], c)
    acc = elementary(sp, a[8:] + [0] * 5, b[8:] + [0] * 5, acc)
    assert dot(sp, a, b, c) == acc


def test_epilogue_mode_definition():
    sp = registry.spec("sm80", "fp16")  # F = 24
    a = codes("fp16", [1, 2 ** -24])
    b = codes("fp16", [1, 1])
    c = value_code("fp32", -1.0)
    # chain: c takes part in the fused sum -> exact 2**-24
    assert code_value("fp32", dot(sp, a, b, c)) == P2(-24)
    # epilogue: acc = RZ(1 + 2**-24) = 1, then 1 + (-1) = +0
    assert dot(sp, a, b, c, c_mode="epilogue") == 0


def test_mm_matches_dot_and_converts_c():
    sp = registry.spec("sm90", "bf16")
    g = torch.Generator().manual_seed(0)
    A = (torch.randn(3, 20, generator=g) * 8).to(torch.bfloat16)
    B = (torch.randn(20, 2, generator=g) * 8).to(torch.bfloat16)
    C = torch.randn(3, 2, generator=g, dtype=torch.float64)
    D = mm(sp, A, B, C)
    assert D.shape == (3, 2) and D.dtype == torch.float32
    ac, bc = tensor_to_codes(A), tensor_to_codes(B.t())
    cc = tensor_to_codes(C.to(torch.float32))
    for i in range(3):
        for j in range(2):
            want = dot(sp, ac[i], bc[j], cc[i][j])
            assert D[i, j].view(torch.int32).item() & 0xFFFFFFFF == want
    # close to the exact product
    ref = A.double() @ B.double() + C.float().double()
    assert torch.allclose(D.double(), ref, rtol=1e-5, atol=1e-5)
    with pytest.raises(TypeError):
        mm(sp, A.float(), B)


def test_mm_fp16_output_and_tf32_words():
    sp = registry.spec("sm80", "fp16", "fp16")
    A = torch.tensor([[1.0, 2.0]], dtype=torch.float16)
    B = torch.tensor([[3.0], [4.0]], dtype=torch.float16)
    D = mm(sp, A, B, torch.tensor([[0.5]]))
    assert D.dtype == torch.float16 and D.item() == 11.5
    # tf32: fp32 words, low 13 bits dropped
    t = registry.spec("sm80", "tf32")
    x = torch.tensor([[1.0 + 2 ** -20]], dtype=torch.float32)  # below tf32 precision
    D = mm(t, x, torch.ones(1, 1), None)
    assert D.item() == 1.0


# ======================================================================================
# Recorded hardware (deterministic subset; scripts/check_reference_hwdata.py runs all)
# ======================================================================================

HW = hwdata.hwdata_dir()
HW_INDEX = hwdata.load_index(HW) if HW else []


def test_hwdata_is_there():
    """The recorded samples are part of the repository (tests/data/hwdata): a checkout without
    them fails here instead of skipping the checks below."""
    assert HW is not None, "tests/data/hwdata/index.json not found (nor $MMA_EMU_HWDATA)"
    assert {e["file"].split("_")[0] for e in HW_INDEX} >= {"V100", "A100", "L40S", "H100", "B200"}


@pytest.mark.parametrize("entry", HW_INDEX, ids=[e["file"] for e in HW_INDEX])
def test_hwdata_subset(entry):
    n_total = entry["samples"]
    idx = sorted(random.Random(entry["file"]).sample(range(n_total), min(300, n_total)))
    n, mism = hwdata.check_file(entry, HW, idx)
    assert n == len(idx)
    assert not mism, f"{len(mism)} mismatches, first {[(i, hex(g), hex(w)) for i, g, w in mism[:5]]}"


def test_hwdata_detects_wrong_models():
    """The hardware check can fail: a model one bit short (F - 1) or with the wrong rounding
    mismatches many samples."""
    entry = next(e for e in HW_INDEX if e["file"].startswith("V100_fp16_to_fp32"))
    sp = hwdata.spec_for_entry(entry)
    orig = hwdata.spec_for_entry
    try:
        for wrong in (sp.replace(F=sp.F - 1), sp.replace(rho="rne_fp32"), sp.replace(L=2)):
            hwdata.spec_for_entry = lambda e, w=wrong: w
            n, mism = hwdata.check_file(entry, HW, range(200))
            assert len(mism) > 10
    finally:
        hwdata.spec_for_entry = orig
