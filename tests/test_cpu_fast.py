"""Differential tests of the CPU kernel's vectorised fast paths (csrc/cpu/fast_*.cpp).

For every registry row the fast paths serve: fast == scalar path (MMA_EMU_SCALAR=1) == exact
reference (torch_mma_emu.reference), on the three input families and on adversarial inputs:
every finite bit pattern, cancellation inside a chunk, maximal magnitudes (int32 sums at the
edge of overflow), zero products beside a subnormal c, fp16 overflow and subnormal results,
odd M/N/K, strides, batches, c_mode="epilogue".  Each available ISA (AVX-512, AVX2) is run.
Zero mismatches allowed.  Ctrl-C interrupts a long call.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import reference as ref
from torch_mma_emu.formats import FORMATS, value_table
from torch_mma_emu.cpp import params
from torch_mma_emu.inputs import FAMILIES, operands, random_codes
from torch_mma_emu.registry import ROWS, all_specs
from helpers import assert_same_bits, cpu_path, env, fast_path, fdpa_kwargs as _kw, mm_on_path, seeded

INT = {2: torch.int16, 4: torch.int32, 8: torch.int64}


_probe = tme.spec("sm90", "fp16")
ISAS = [i for i in ("avx512", "avx2") if fast_path(_probe, i).startswith(i + ":")]
ROW_SPECS = [r.first_spec() for r in ROWS]
FAST_ROWS = [s for s in ROW_SPECS if fast_path(s) != "scalar"]
FAST_SPECS = [s for s in all_specs() if fast_path(s) != "scalar"]
FDPA_ROWS = [s for s in FAST_ROWS if s.op != "fma" and s.op != "ftz_addmul"]
needs_fast = pytest.mark.skipif(not ISAS, reason="no AVX2 on this CPU: only the scalar path exists")


def _id(s):
    b = f"x{s.in_format_b}" if s.in_format_b else ""
    sc = f"-{s.scale_format}{s.block_size}" if s.scaled else ""
    mp = f"-{s.passes}pass{'-cfinal' if s.c_join == 'final' else ''}" if s.multipass else ""
    return f"{s.arch}-{s.op}-{s.in_format}{b}-{s.out_format}{sc}-L{s.L}{mp}"


def check_fast_scalar(spec, kw, c_mode="chain"):
    S = mm_on_path(kw, "scalar", c_mode)
    for isa in ISAS:
        assert_same_bits(mm_on_path(kw, isa, c_mode), S, f"fast ({isa}) vs scalar for {_id(spec)} {c_mode}")
    return S


def check_reference(spec, kw, c_mode="chain"):
    S = check_fast_scalar(spec, kw, c_mode)
    R = ref.mm(spec, kw["A"], kw["B"], kw["C"], kw.get("scale_a"), kw.get("scale_b"), c_mode=c_mode)
    assert_same_bits(S, R, f"kernel vs reference for {_id(spec)} {c_mode}")


# ---------------------------------------------------------------------------------------------

@needs_fast
def test_fast_paths_serve_the_expected_rows():
    """Eligibility does not silently drop rows: every registry row (multi-pass instructions
    included) takes its vector kernel on every instruction set this CPU has."""
    expect = {"t_fdpa": "fdpa", "st_fdpa": "fdpa", "fma": "fma", "ftz_addmul": "ftz",
              "tr_fdpa": "tr", "gtr_fdpa": "tr", "e_fdpa": "e", "gst_fdpa": "gst"}
    for isa in ISAS:
        for s in ROW_SPECS:
            assert fast_path(s, isa) == f"{isa}:{expect[s.op]}", (_id(s), isa, fast_path(s, isa))
            # tr_renorm (gfx942, docs/model.md 6.5): the TR kernel computes the renormalised
            # finish under either alignment rounding
            if s.tr_renorm:
                assert fast_path(s.replace(align_round="rz"), isa) == f"{isa}:tr"
    with cpu_path("scalar"):
        assert all(torch.ops.mma_emu._cpu_fast_path(list(params(s))) == "scalar"
                   for s in ROW_SPECS)
    with pytest.raises(ValueError, match="parameters"):
        torch.ops.mma_emu._cpu_fast_path([1, 2, 3])


@needs_fast
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec", FAST_ROWS, ids=_id)
def test_fast_equals_scalar_equals_reference(spec, family):
    # N = 33 crosses a 32-column panel; K: two chunks and a zero-padded third
    kw = operands(spec, 2, 33, 2 * spec.L + 3, family, seeded(spec.to_string(), family))
    check_reference(spec, kw)


@needs_fast
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec", FAST_SPECS, ids=_id)
def test_fast_equals_scalar_every_format_pair(spec, family):
    kw = operands(spec, 19, 70, 4 * spec.L + 5, family, seeded(spec.to_string(), family, 1))
    check_fast_scalar(spec, kw)


@needs_fast
@pytest.mark.parametrize("spec", FDPA_ROWS, ids=_id)
def test_generic_kernel_equals_the_shape_kernel(spec):
    """Through the op, on every ISA: MMA_EMU_CPU_GENERIC=1 (the FDPA kernels that read every
    option from Params) gives the bits of the kernel compiled for the row's shape
    (fdpa_engine.h kTShapes, kern/tables.inc panel_fixed), on cancelling, bit-stream and tiny
    inputs."""
    for family in ("cancel", "bitstream", "tiny"):
        kw = operands(spec, 19, 70, 4 * spec.L + 5, family, seeded(spec.to_string(), family, 2))
        for isa in ISAS:
            fixed = mm_on_path(kw, isa)
            with env(MMA_EMU_CPU_GENERIC="1"):
                generic = mm_on_path(kw, isa)
            assert_same_bits(generic, fixed, f"generic vs shape kernel ({isa}, {family}) for {_id(spec)}")


@needs_fast
@pytest.mark.parametrize("spec", FAST_ROWS, ids=_id)
def test_odd_shapes_strides_batches_epilogue(spec):
    g = seeded(spec.to_string(), "layout")
    kw = operands(spec, 7, 37, 3 * spec.L + 1, "normal", g, batch=(2,))
    check_fast_scalar(spec, kw)
    check_fast_scalar(spec, kw, c_mode="epilogue")
    # transposed / sliced operands and a broadcast C
    kw2 = dict(kw)
    kw2["A"] = kw["A"].transpose(-1, -2).contiguous().transpose(-1, -2)
    kw2["B"] = torch.cat([kw["B"], kw["B"]], dim=-1)[..., ::2]
    kw2["C"] = kw["C"][:1, :1, :]
    if spec.scaled:
        kw2["scale_b"] = torch.cat([kw["scale_b"], kw["scale_b"]], dim=-1)[..., ::2]
    check_fast_scalar(spec, kw2)
    # 1 x 1 and K < L
    kw3 = operands(spec, 1, 1, max(1, spec.L // 2 - 1), "normal", g)
    check_reference(spec, kw3)


# ---- adversarial inputs of the T-FDPA fast path ------------------------------------------

def _codes(fmt, values):
    """float64 values (exactly representable) -> codes in the tensor type emulated_mm takes."""
    from torch_mma_emu.inputs import to_format
    return to_format(values, fmt)


def _table(fmt):
    """float64 value of every code of fmt (index = code)."""
    if fmt.bits <= 8:
        return value_table(fmt.name).double()
    idx = torch.arange(1 << fmt.bits, dtype=torch.int64)
    return _as_input(idx, fmt).double()


def _max_finite_in_window(fmt):
    """The largest value of fmt whose exponent is inside the fast planes' window (|e| <= 31)."""
    v = _table(fmt)
    v = v[torch.isfinite(v) & (v > 0) & (v < 2.0 ** 32)]
    return float(v.max())


@needs_fast
@pytest.mark.parametrize("spec", FDPA_ROWS, ids=_id)
def test_maximal_magnitudes_and_int32_edge(spec):
    """All products at the largest in-window magnitude, one sign, and c of the same exponent:
    the int32 sum of a chunk overflows, the lane must go through the core.  (E-FDPA: c and
    products far apart make the fp64 TwoSum inexact: the same fallback.)"""
    fa = FORMATS[spec.in_format]
    fo = spec.out_format
    L = spec.L
    m = _max_finite_in_window(fa)
    K = 2 * L
    g = seeded(spec.to_string(), "max")
    sgn = torch.where(torch.rand(3, 1, generator=g) < 0.5, -1.0, 1.0).double()
    A = _codes(fa, (sgn * m).expand(3, K).contiguous())
    B = _codes(FORMATS[spec.in_format_b or spec.in_format], torch.full((K, 33), m).double())
    p = m * m
    cmax = 65504.0 if fo == "fp16" else 3.0e38
    # (+-p / 2: c's exponent equals the products', so c's term adds to a near-full int32 sum)
    cvals = torch.tensor([p * 1.5, -p * 1.5, p * 0.75, p * 16, -p * 1.999, 0.0, p * 0.5, -p * 0.5] * 20)[:99]
    C = cvals.clamp(-cmax, cmax).reshape(3, 33).to(torch.float16 if fo == "fp16" else torch.float32)
    check_reference(spec, _kw(spec, A, B, C))


@needs_fast
@pytest.mark.parametrize("spec", FDPA_ROWS, ids=_id)
def test_cancellation_and_zero_products_beside_subnormal_c(spec):
    fa = FORMATS[spec.in_format]
    fb = FORMATS[spec.in_format_b or spec.in_format]
    K = 2 * spec.L + 1
    g = seeded(spec.to_string(), "cancel")
    a = torch.randn(4, K, generator=g, dtype=torch.float64)
    b = torch.randn(K, 35, generator=g, dtype=torch.float64)
    # row 0: exact cancellation inside each chunk (a[k+1] = a[k], b[k+1] = -b[k])
    h = K // 2
    a[0, 1:2 * h:2] = a[0, 0:2 * h:2]
    b[1:2 * h:2, :] = -b[0:2 * h:2, :]
    a[1] = 0.0  # row 1: every product is zero, c alone (subnormal / zero) decides
    A, B = _codes(fa, a), _codes(fb, b)
    fo = spec.out_format
    odt = torch.float16 if fo == "fp16" else torch.float32
    tiny = torch.tensor([2.0 ** -149, -(2.0 ** -140), 2.0 ** -127, 1.5 * 2.0 ** -126, 0.0, -0.0]) \
        if fo == "fp32" else torch.tensor([2.0 ** -24, -(2.0 ** -20), 2.0 ** -15, 0.0, -0.0, 2.0 ** -14])
    C = tiny.repeat(4 * 35 // 6 + 1)[: 4 * 35].reshape(4, 35).to(odt)
    # row 3: c = -(exact dot) so the chain ends near zero
    C[3] = (-(_values(A, fa)[3] @ _values(B, fb))).to(odt)
    check_reference(spec, _kw(spec, A, B, C))


def _values(t, fmt):
    if t.dtype == torch.uint8:
        return value_table(fmt.name)[t.long()].double()
    if fmt.container_bits == 32:
        return (t.view(torch.int32) & ~0x1FFF).view(torch.float32).double()
    return t.double()


@needs_fast
@pytest.mark.parametrize("spec", FDPA_ROWS, ids=_id)
def test_every_finite_bit_pattern(spec):
    """Every finite code of the input format appears in A (sorted by magnitude, so most rows
    stay inside the fast window) against random finite B; fast == scalar."""
    fa = FORMATS[spec.in_format]
    fb = FORMATS[spec.in_format_b or spec.in_format]
    tab = _table(fa)
    codes = torch.arange(tab.numel())[torch.isfinite(tab)]
    codes = codes[torch.argsort(tab[codes].abs(), stable=True)]
    K = 4 * spec.L
    n = codes.numel()
    M = -(-n // K)
    codes = codes.repeat(-(-M * K // n))[: M * K].reshape(M, K)
    g = seeded(spec.to_string(), "all")
    perm = torch.randperm(K, generator=g)
    codes = codes[:, perm]
    A = _as_input(codes, fa)
    bc = random_codes(fb, (K, 40), g)
    tb = _table(fb)
    bvals = tb[_as_index(bc, fb)]
    bc = torch.where(torch.isfinite(bvals), _as_index(bc, fb), torch.zeros_like(_as_index(bc, fb)))
    B = _as_input(bc, fb)
    odt = torch.float16 if spec.out_format == "fp16" else torch.float32
    C = torch.randn(M, 40, generator=g).to(odt)
    check_fast_scalar(spec, _kw(spec, A, B, C))
    # products of every pair of codes for the 8-bit-or-smaller formats, against the reference
    if fa.bits <= 8 and fb.bits <= 8:
        ca = torch.arange(tab.numel())[torch.isfinite(tab)]
        cb = torch.arange(tb.numel())[torch.isfinite(tb)]
        A2 = _as_input(ca.reshape(-1, 1).expand(-1, spec.L).contiguous(), fa)
        B2 = _as_input(cb.reshape(1, -1).expand(spec.L, -1).contiguous(), fb)
        C2 = torch.zeros(A2.shape[0], B2.shape[1], dtype=odt)
        check_fast_scalar(spec, _kw(spec, A2, B2, C2))
        ra = torch.linspace(0, ca.numel() - 1, 8).long()
        rb = torch.linspace(0, cb.numel() - 1, 33).long()
        check_reference(spec, _kw(spec, A2[ra].contiguous(), B2[:, rb].contiguous(), C2[ra][:, rb]))


def _as_index(codes, fmt):
    if codes.element_size() == 1:
        return codes.view(torch.uint8).long()
    return codes.view(INT[codes.element_size()]).long() & ((1 << fmt.bits) - 1)


def _as_input(idx, fmt):
    """Code indices -> the tensor type emulated_mm takes for fmt."""
    if fmt.container_bits == 32:
        return (idx.to(torch.int64) << 13).to(torch.int32).view(torch.float32)
    if fmt.torch_dtype is None or fmt.bits == 8:
        t = idx.to(torch.uint8)
        return t.view(fmt.torch_dtype) if fmt.torch_dtype is not None else t
    if fmt.container_bits == 32:
        return (idx.to(torch.int64) << 13).to(torch.int32).view(torch.float32)
    return idx.to(torch.int64).to(torch.int16 if fmt.bits == 16 else torch.int32).view(fmt.torch_dtype)


@needs_fast
@pytest.mark.parametrize("arch,fmt", [("sm90", "fp16"), ("sm89", "fp8_e4m3"), ("sm70", "fp16")])
def test_fp16_accumulator_overflow_and_subnormal_results(arch, fmt):
    spec = tme.spec(arch, fmt, torch.float16)
    g = seeded(arch, fmt, "fp16out")
    K = 3 * spec.L
    scale = torch.tensor([2.0 ** -12, 2.0 ** -7, 1.0, 2.0 ** 4, 2.0 ** 7]).double()
    a = torch.randn(5, K, generator=g, dtype=torch.float64) * scale.reshape(5, 1)
    b = torch.randn(K, 34, generator=g, dtype=torch.float64) * 8
    fa = FORMATS[spec.in_format]
    A, B = _codes(fa, a), _codes(fa, b)
    C = (torch.randn(5, 34, generator=g) * 2.0 ** -16).to(torch.float16)
    check_reference(spec, _kw(spec, A, B, C))


@needs_fast
def test_mx_scales_fold_into_the_planes():
    """ST-FDPA: scale exponents inside and outside the window, NaN scales."""
    spec = tme.spec("sm100", "fp8_e4m3", scale_format="ue8m0")
    K = 2 * spec.L + 5
    g = seeded("mx")
    kw = operands(spec, 4, 36, K, "normal", g)
    nb = kw["scale_a"].shape[-1]
    sa = torch.tensor([127, 127 + 20, 127 - 25, 127 + 40][:4]).reshape(4, 1).expand(4, nb)
    sb = torch.full((nb, 36), 127)
    sb[:, 3] = 127 - 30
    sb[:, 5] = 255  # NaN scale
    kw = _kw(spec, kw["A"], kw["B"], kw["C"], (sa.to(torch.uint8).contiguous(), sb.to(torch.uint8)))
    check_reference(spec, kw)


# ---- Ctrl-C --------------------------------------------------------------------------------

@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("mode,arch,fmt,n", [("fast", "sm90", "fp16", 4096),
                                             ("scalar", "gfx908", "fp16", 1024)])
def test_ctrl_c_interrupts_a_long_call(mode, arch, fmt, n):
    if mode == "fast" and not ISAS:
        pytest.skip("no fast path on this CPU")
    code = textwrap.dedent(f"""
        import sys, time, torch, torch_mma_emu as tme
        A = torch.randn({n}, {n}).half(); B = torch.randn({n}, {n}).half()
        print("start", flush=True)
        t = time.time()
        try:
            tme.emulated_mm(A, B, arch="{arch}")
        except KeyboardInterrupt:
            print("interrupted after", round(time.time() - t, 2), flush=True)
            sys.exit(0)
        print("finished", flush=True)
    """)
    env = dict(os.environ)
    env.pop("MMA_EMU_CPU_ISA", None)
    if mode == "scalar":
        env["MMA_EMU_SCALAR"] = "1"
    else:
        env.pop("MMA_EMU_SCALAR", None)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    assert p.stdout.readline().strip() == "start"
    time.sleep(1.0)
    t0 = time.time()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    waited = time.time() - t0
    assert "interrupted after" in out, (out, err)
    assert p.returncode == 0, err
    # the full product takes tens of seconds on this machine's 2 cores
    assert waited < 10, f"took {waited:.1f} s to stop"


@needs_fast
@pytest.mark.parametrize("spec", FDPA_ROWS, ids=_id)
def test_rows_and_columns_straddling_the_plane_window(spec):
    """Row/column scales 2^-70 .. 2^70 (bf16, tf32: many outside the |e| <= 31 window, so the
    fast kernel and dot_fused share one output) and C spanning 2^-140 .. 2^140."""
    fa, fb = FORMATS[spec.in_format], FORMATS[spec.in_format_b or spec.in_format]
    g = seeded(spec.to_string(), "window")
    for spread in (30, 70):
        M, N, K = 12, 40, 3 * spec.L + 1
        a = torch.randn(M, K, generator=g, dtype=torch.float64) * torch.exp2(
            torch.randint(-spread, spread + 1, (M, 1), generator=g).double())
        b = torch.randn(K, N, generator=g, dtype=torch.float64) * torch.exp2(
            torch.randint(-spread, spread + 1, (1, N), generator=g).double())
        a[:, ::5] = 0
        odt = torch.float16 if spec.out_format == "fp16" else torch.float32
        C = (torch.randn(M, N, generator=g, dtype=torch.float64) * torch.exp2(
            torch.randint(-2 * spread, 2 * spread + 1, (M, N), generator=g).double())).to(odt)
        check_fast_scalar(spec, _kw(spec, _codes(fa, a), _codes(fb, b), C))


# ---- tr_renorm: the lanes where the renormalised finish differs from the plain one ----------

TR_ROWS = [s for s in FDPA_ROWS if s.tr_renorm]


def _near(g, fmt, e, n):
    """n values of fmt near 2^e (random significand and sign); e inside fmt's normal range."""
    sig = 1 + torch.randint(0, 1 << fmt.man_bits, (n,), generator=g).double() / (1 << fmt.man_bits)
    sign = torch.randint(0, 2, (n,), generator=g).double() * 2 - 1
    return sign * sig * 2.0 ** e


def _renorm_lanes(spec, g, n_carry=2048):
    """Candidate lanes as float64 values a (n, L), b (n, L), c (n,).  Lanes [0, n_carry) have
    T's last bit about 24 binades below its top (p1, p2 24 binades apart); odd ones carry
    T' + c' into the next binade (p1 ~ 2^(E-7), c = +-(2^(E+1) - m 2^(E-23))), where the
    renormalisation may drop the bit the plain finish rounds with; even ones cancel one binade
    (p1 ~ 2^(E-8), c = -+(2^E + m 2^(E-23))), where it keeps T's bit F2 + 1; then 16 lanes cancel c against the dot (to a lower
    binade) and 8 have products near 2^-126 (formats with 8 exponent bits, else their smallest
    normals) with c = +-0 or c = -dot."""
    fa, fb = FORMATS[spec.in_format], FORMATS[spec.in_format_b or spec.in_format]
    L, n = spec.L, n_carry + 24
    a, b, c = (torch.zeros(n, L, dtype=torch.float64), torch.zeros(n, L, dtype=torch.float64),
               torch.zeros(n, dtype=torch.float64))
    r = torch.randint(0, 1 << 30, (n_carry, 6), generator=g).tolist()
    for t in range(n_carry):
        e1a, e1b = min(fa.emax, 6) - r[t][0] % 2, min(fb.emax, 6) - r[t][1] % 2
        e2b = max(fb.emin, e1b - 14) + r[t][2] % 2
        e2a = e1a + e1b - 24 - r[t][3] % 3 + 1 - e2b
        k1 = r[t][4] % L
        k2 = (k1 + 1 + r[t][5] % max(1, L - 1)) % L
        a[t, k1], b[t, k1] = _near(g, fa, e1a, 1), _near(g, fb, e1b, 1)
        a[t, k2], b[t, k2] = _near(g, fa, e2a, 1), _near(g, fb, e2b, 1)
        d = float(a[t] @ b[t])
        m = r[t][1] // 2 % 16
        if t % 2:
            E = e1a + e1b + 7 - r[t][0] // 2 % 2
            c[t] = (1 if d >= 0 else -1) * (2.0 ** (E + 1) - m * 2.0 ** (E - 23))
        else:  # c ~ -2^E against T ~ 2^(E-8): S falls one binade, T's bit 2^(E-32) survives
            E = e1a + e1b + 8 + r[t][0] // 2 % 2
            c[t] = (-1 if d >= 0 else 1) * (2.0 ** E + m * 2.0 ** (E - 23))
    for t in range(n_carry, n_carry + 16):
        a[t], b[t] = _near(g, fa, 0, L), _near(g, fb, -(t % 3), L)
        d = float(a[t] @ b[t])
        c[t] = -d * (1 + (-1) ** t * 2.0 ** -(8 + t % 16)) if t % 4 else -d
    for t in range(n_carry + 16, n):
        a[t] = _near(g, fa, max(-63, fa.emin) + t % 3, L)
        b[t] = _near(g, fb, max(-63, fb.emin) + t % 2, L)
        c[t] = [0.0, -0.0, -float(a[t] @ b[t])][t % 3]
    return a, b, c


@needs_fast
@pytest.mark.parametrize("rz", [False, True], ids=["rd", "rz"])
@pytest.mark.parametrize("spec", TR_ROWS, ids=_id)
def test_tr_renorm_finish_corners(spec, rz):
    """fast (each ISA) == scalar core == reference on lanes where tr_renorm's finish differs
    from the plain one (found among the candidates by the core, one instruction per lane), on
    cancelling and tiny lanes, and with NaN/Inf and signed zeros."""
    spec = spec.replace(align_round="rz") if rz else spec
    plain = spec.replace(tr_renorm=False)
    fa, fb = FORMATS[spec.in_format], FORMATS[spec.in_format_b or spec.in_format]
    a, b, c = _renorm_lanes(spec, seeded(spec.to_string(), "renorm"))
    ac, bc = _codes(fa, a), _codes(fb, b)
    c32 = c.to(torch.float32)
    # every candidate as its own 1 x 1 product (a batch): where do the two finishes differ?
    kwb = _kw(spec, ac[:, None, :], bc[:, :, None], c32[:, None, None])
    rn = mm_on_path(kwb, "scalar").view(torch.int32).flatten()
    pl = mm_on_path(dict(kwb, arch=plain), "scalar").view(torch.int32).flatten()
    differ = (rn != pl).nonzero().flatten()
    assert differ.numel() > 0, "no candidate reaches a lane where the finishes differ"
    n_carry = a.shape[0] - 24
    sel = torch.cat([differ[:40], torch.arange(n_carry, a.shape[0])])
    # the selected lanes on the diagonal of one GEMM (off the diagonal: other mixtures)
    C = c32[sel].diag()
    r = min(40, differ.numel())  # specials in the rows of the cancelling lanes
    C[r, 0], C[r + 1, 1], C[r + 2, 2], C[r + 3, r + 4], C[r + 4, r + 4] = (
        float("inf"), -float("inf"), float("nan"), -0.0, -0.0)
    kw = _kw(spec, ac[sel], bc[sel].t().contiguous(), C)
    check_reference(spec, kw)
    kw["A"] = kw["A"].clone()
    kw["A"][r + 5, 0] = _codes(fa, torch.tensor([float("nan")], dtype=torch.float64))[0]
    check_reference(spec, kw)
