"""Differential tests: the C++ kernels against the independent exact reference
(torch_mma_emu.reference) for every registry entry, over the three input families of seed
003 section 3.1.4 (random normal, adversarial cancellation, random bit streams with NaN,
infinities, subnormals and extreme exponent spreads) and, for every entry, the ``tiny`` corner
family (signed zeros, values at the bottom of the output range).  Zero mismatches allowed."""
import zlib

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torch_mma_emu as tme
from torch_mma_emu import reference as ref
from torch_mma_emu.inputs import ALL_FAMILIES, FAMILIES, operands
from torch_mma_emu.registry import all_specs
from helpers import bits

SPECS = all_specs()


def _id(s):
    b = f"x{s.in_format_b}" if s.in_format_b else ""
    sc = f"-{s.scale_format}{s.block_size}" if s.scaled else ""
    alt = "" if s.instruction in tme.instructions(s.arch, s.in_format, s.out_format, s.scale_format)[:1] else "-alt"
    return f"{s.arch}-{s.in_format}{b}-{s.out_format}{sc}{alt}"


def check(spec, kw, c_mode="chain"):
    D = tme.emulated_mm(**kw, c_mode=c_mode)
    A, B, C = kw["A"], kw["B"], kw["C"]
    if A.dim() == 2 and B.dim() == 2:
        R = ref.mm(spec, A, B, C, kw.get("scale_a"), kw.get("scale_b"), c_mode=c_mode)
    else:  # batched: compare per batch element after broadcasting
        batch = torch.broadcast_shapes(A.shape[:-2], B.shape[:-2])
        nb = batch.numel()
        A = A.broadcast_to((*batch, *A.shape[-2:])).reshape(nb, *A.shape[-2:])
        B = B.broadcast_to((*batch, *B.shape[-2:])).reshape(nb, *B.shape[-2:])
        C = C.broadcast_to(D.shape).reshape(nb, *D.shape[-2:])
        R = torch.stack([ref.mm(spec, A[i], B[i], C[i], c_mode=c_mode) for i in range(A.shape[0])])
        R = R.reshape(D.shape)
    diff = (bits(D) != bits(R)).nonzero()
    assert diff.numel() == 0, (f"{diff.shape[0]} mismatches for {spec.describe()} "
                               f"({spec.arch} {spec.instruction}); first at {diff[0].tolist()}: "
                               f"emulated {bits(D)[tuple(diff[0])]:#x} reference {bits(R)[tuple(diff[0])]:#x}")


@pytest.mark.parametrize("family", ALL_FAMILIES)
@pytest.mark.parametrize("spec", SPECS, ids=_id)
def test_every_registry_entry_matches_reference(spec, family):
    # K covers two full instructions and a zero-padded third one
    n = spec.instr_k
    K = 2 * n + n // 2 + 1
    for seed in range(2):
        g = torch.Generator().manual_seed(zlib.crc32(f"{spec.to_string()}{family}{seed}".encode()))
        check(spec, operands(spec, 3, 2, K, family, g))


@pytest.mark.parametrize("spec", [s for s in SPECS if not s.in_format_b], ids=_id)
def test_epilogue_mode_matches_reference(spec):
    g = torch.Generator().manual_seed(zlib.crc32(spec.to_string().encode()))
    for family in FAMILIES:
        check(spec, operands(spec, 2, 2, spec.instr_k + 3, family, g), c_mode="epilogue")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(idx=st.integers(0, len(SPECS) - 1), family=st.sampled_from(FAMILIES),
       m=st.integers(1, 3), n=st.integers(1, 3), kmul=st.integers(0, 40),
       seed=st.integers(0, 2**31 - 1), batched=st.booleans())
def test_random_shapes_and_seeds(idx, family, m, n, kmul, seed, batched):
    spec = SPECS[idx]
    K = kmul * max(1, spec.L // 8)
    g = torch.Generator().manual_seed(seed)
    if batched and not spec.scaled:
        kw = operands(spec, m, n, K, family, g, batch=(2,))
        kw["A"] = kw["A"][:1]  # broadcast A over the batch of B
        kw["C"] = kw["C"][:1, :1]  # and C over rows
    else:
        kw = operands(spec, m, n, K, family, g)
    check(spec, kw)


def test_custom_spec_matches_reference():
    """A user-built model (Hopper with F = 27 and a floor) runs through the same kernels."""
    s = tme.spec("sm90", "bf16").replace(F=27, emax_floor=-100)
    for family in FAMILIES:
        g = torch.Generator().manual_seed(7)
        check(s, operands(s, 3, 3, 40, family, g))


# Multi-pass instructions beyond the registry's: every pass layout, c first or last, other
# fused operations, formats and rounding (docs/model.md section 2.1).
MULTIPASS = [
    tme.spec("sm90", "fp8_e4m3", "fp32").replace(L=8, passes=4, pass_width=1, c_join="first"),
    tme.spec("sm90", "fp8_e5m2", "fp16").replace(L=16, passes=2, pass_width=4, c_join="final"),
    tme.spec("sm90", "fp16").replace(L=8, passes=2, c_join="final"),               # contiguous
    tme.spec("sm80", "bf16").replace(L=4, passes=2, pass_width=2, c_join="first",
                                     emax_floor=-133),
    tme.spec("sm100", "fp8_e4m3", "fp32").replace(passes=1, c_join="final"),        # c last only
    tme.spec("gfx942", "fp16").replace(L=4, passes=2, pass_width=2, c_join="final"),
    tme.spec("gfx942", "fp8_e4m3fnuz").replace(L=8, passes=2, pass_width=4),
    tme.spec("gfx908", "fp16").replace(L=2, passes=3, pass_width=1, c_join="final"),
]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec", MULTIPASS, ids=lambda s: s.describe().replace(" ", "_"))
def test_multipass_specs_match_reference(spec, family):
    n = spec.instr_k
    for seed, K in enumerate((n, 2 * n + n // 2 + 1, max(1, n // 3))):
        g = torch.Generator().manual_seed(zlib.crc32(f"{spec.to_string()}{family}{seed}".encode()))
        check(spec, operands(spec, 3, 2, K, family, g))
    g = torch.Generator().manual_seed(11)
    check(spec, operands(spec, 2, 2, n + 3, family, g), c_mode="epilogue")


@pytest.mark.parametrize("c_mode", ["chain", "epilogue"])
def test_fp16_c_read_as_it_is_matches_reference(c_mode):
    """sm70 fp16 -> fp32 reads an fp16 C as it is (``c_format="fp16"``, docs/model.md 6.4):
    the core (c_emin) and the reference (C decoded as fp16 in the first chunk) agree on C of
    fp16 subnormals, zeros and random bits, with products in the binades where aligning C at
    -14 instead of its own exponent truncates them; in chain mode that differs from
    converting C first, in epilogue mode it must not."""
    spec = tme.spec("sm70", "fp16")
    g = torch.Generator().manual_seed(5)
    M, N, K = 6, 5, 9
    ex = lambda *s: torch.randint(-24, -15, s, generator=g).double()  # noqa: E731
    sign = lambda *s: torch.randint(0, 2, s, generator=g).double() * 2 - 1  # noqa: E731
    A = (sign(M, K) * 2.0 ** ex(M, K)).half()
    B = (sign(K, N) * 2.0 ** ex(K, N)).half()
    sub = torch.randint(0, 1 << 16, (M, N), generator=g) & 0x83FF        # fp16 subnormals
    rnd = torch.randint(0, 1 << 16, (M, N), generator=g)
    codes = torch.where(torch.rand((M, N), generator=g) < 0.8, sub, rnd)
    C = codes.to(torch.int16).view(torch.float16)
    check(spec, dict(A=A, B=B, C=C, arch="sm70", out_dtype=torch.float32), c_mode)
    old = tme.emulated_mm(A, B, C, arch=spec.replace(c_format=None), c_mode=c_mode)
    new = tme.emulated_mm(A, B, C, arch="sm70", out_dtype=torch.float32, c_mode=c_mode)
    assert (bits(old) != bits(new)).any() == (c_mode == "chain")
