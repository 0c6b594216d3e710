"""torch._scaled_mm / F.scaled_mm under emulate(): MX, NVFP4 and blockwise scales, the
cuBLAS scale layout, packed fp4, and the calls that stay native (loudly)."""
import warnings
from functools import partial

import pytest
import torch
import torch.nn.functional as F

import torch_mma_emu as tme
from torch_mma_emu.preview import scaled

HAS_V2 = hasattr(F, "scaled_mm") and hasattr(torch.ops.aten, "_scaled_mm_v2")
E8M0 = getattr(torch, "float8_e8m0fnu", None)
FP4X2 = getattr(torch, "float4_e2m1fn_x2", None)
needs_v2 = pytest.mark.skipif(not HAS_V2, reason="F.scaled_mm needs torch >= 2.10")
needs_fp4 = pytest.mark.skipif(FP4X2 is None, reason="no torch.float4_e2m1fn_x2")
E2M1 = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6], dtype=torch.float64)


def gen(seed):
    return torch.Generator().manual_seed(seed)


def to_blocked(s):
    """cuBLAS's 128x4-tile scale layout, element by element from the formula in the cuBLAS
    docs (independent of scaled.unswizzle's permute)."""
    rows, cols = s.shape
    nr, nc = -(-rows // 128), -(-cols // 4)
    flat = torch.zeros(nr * nc * 512, dtype=torch.uint8)
    u = s.contiguous().view(torch.uint8)
    for i in range(rows):
        for j in range(cols):
            o = i % 128
            flat[512 * ((i // 128) * nc + j // 4) + (o % 32) * 16 + (o // 32) * 4 + j % 4] = u[i, j]
    return flat.view(s.dtype)


def pack_fp4(codes):
    """(R, 2C) uint8 E2M1 codes -> (R, C) float4_e2m1fn_x2, element 2i in the low nibble."""
    return (codes[:, 1::2] << 4 | codes[:, ::2]).view(FP4X2)


def fp4_codes(M, K, N, g):
    """Random E2M1 codes for A (M, K) and B as (N, K), one per byte."""
    return (torch.randint(0, 16, (M, K), generator=g, dtype=torch.uint8),
            torch.randint(0, 16, (N, K), generator=g, dtype=torch.uint8))


def fp4_operands(g, M, K, N, block, scale):
    """fp4_codes plus one scale ``scale(shape, g)`` per ``block`` elements of K, for each."""
    ca, cb = fp4_codes(M, K, N, g)
    return ca, cb, scale((M, K // block), g), scale((N, K // block), g)


def fp4_value(codes):
    v = E2M1[(codes & 7).long()]
    return torch.where(codes >= 8, -v, v)


def e8m0(shape, g, lo=120, hi=134):
    return torch.randint(lo, hi, shape, generator=g, dtype=torch.uint8).view(E8M0)


def ue4m3(shape, g):
    return (torch.rand(shape, generator=g, dtype=torch.float32) * 3 + 0.25).to(torch.float8_e4m3fn)


def emm(*a, **k):
    return tme.emulated_mm(*a, **k)


def rel_err(D, approx):
    return ((D.double() - approx).abs() / approx.abs().clamp_min(1e-2)).median().item()


# ------------------------------------------------------------------------------ layouts

@pytest.mark.parametrize("rows,cols", [(1, 1), (127, 3), (128, 4), (129, 5), (300, 9), (256, 8)])
def test_unswizzle_inverts_the_cublas_tile_layout(rows, cols):
    s = torch.randint(0, 256, (rows, cols), generator=gen(rows * cols), dtype=torch.uint8)
    blocked = to_blocked(s)
    assert blocked.numel() == scaled.swizzled_numel(rows, cols)
    assert torch.equal(scaled.unswizzle(blocked, rows, cols), s)
    # 2-D views of the same memory (as some callers keep them) read the same
    assert torch.equal(scaled.unswizzle(blocked.view(-1, 4), rows, cols), s)


@needs_fp4
def test_unpack_fp4_along_either_dimension():
    codes = torch.randint(0, 16, (6, 10), generator=gen(0), dtype=torch.uint8)
    packed = pack_fp4(codes)
    assert torch.equal(scaled.unpack_fp4(packed, 1), codes)
    assert torch.equal(scaled.unpack_fp4(packed.t(), 0), codes.t())   # B = packed(N, K/2).t()


# ------------------------------------------------------------------------------ MX / NVFP4

def _mx_fp8(M=130, K=96, N=20, seed=0, dtype=torch.float8_e4m3fn):
    g = gen(seed)
    A = (torch.randn(M, K, generator=g) * 2).to(dtype)
    Bnk = (torch.randn(N, K, generator=g) * 2).to(dtype)
    return A, Bnk, e8m0((M, K // 32), g), e8m0((N, K // 32), g)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_mxfp8_scaled_mm_is_the_block_scaled_instruction(dtype):
    A, Bnk, sa, sb = _mx_fp8(dtype=dtype)
    bias = torch.randn(20, generator=gen(9)).to(torch.bfloat16)
    with tme.emulate("B200", record=True) as em:
        D = torch._scaled_mm(A, Bnk.t(), to_blocked(sa), to_blocked(sb), out_dtype=torch.bfloat16)
        Db = torch._scaled_mm(A, Bnk.t(), to_blocked(sa), to_blocked(sb), bias=bias,
                              out_dtype=torch.bfloat16)
    acc = emm(A, Bnk.t(), arch="sm100", scale_a=sa, scale_b=sb.t())
    assert torch.equal(D, acc.to(torch.bfloat16))
    assert torch.equal(Db, (acc + bias.float()).to(torch.bfloat16))
    fmt = "fp8_e4m3" if dtype == torch.float8_e4m3fn else "fp8_e5m2"
    assert {r.format for r in em.records} == {f"MX {fmt}"}
    # the scales sit where they belong: close to the dequantized product in fp64
    sc = lambda s: torch.exp2(s.view(torch.uint8).double() - 127).repeat_interleave(32, 1)  # noqa
    approx = (A.double() * sc(sa)) @ (Bnk.double() * sc(sb)).t()
    assert rel_err(D, approx) < 0.02
    swapped = emm(A, Bnk.t(), arch="sm100", scale_a=sa.flip(0), scale_b=sb.t())
    assert rel_err(swapped, approx) > 0.05          # the check above can fail


@needs_fp4
@pytest.mark.parametrize("kind", ["mxfp4", "nvfp4"])
def test_fp4_scaled_mm_unpacks_and_scales(kind):
    g = gen(3)
    M, K, N = 40, 128, 24
    bs = 32 if kind == "mxfp4" else 16
    mk = partial(e8m0, lo=124, hi=130) if kind == "mxfp4" else ue4m3
    ca, cb, sa, sb = fp4_operands(g, M, K, N, bs, mk)
    with tme.emulate("sm100", record=True) as em:
        D = torch._scaled_mm(pack_fp4(ca), pack_fp4(cb).t(), to_blocked(sa), to_blocked(sb),
                             out_dtype=torch.bfloat16)
    acc = emm(ca, cb.t(), arch="sm100", in_format="fp4_e2m1", scale_a=sa, scale_b=sb.t())
    assert torch.equal(D, acc.to(torch.bfloat16))
    assert em.records[0].format == ("MX fp4_e2m1" if kind == "mxfp4" else "NVFP4")
    if kind == "mxfp4":
        sc = lambda s: torch.exp2(s.view(torch.uint8).double() - 127)  # noqa: E731
    else:
        sc = lambda s: s.double()  # noqa: E731
    approx = (fp4_value(ca) * sc(sa).repeat_interleave(bs, 1)) @ \
        (fp4_value(cb) * sc(sb).repeat_interleave(bs, 1)).t()
    assert rel_err(D, approx) < 0.02


@needs_v2
@needs_fp4
def test_nvfp4_two_level_scales_through_F_scaled_mm():
    g = gen(4)
    M, K, N = 16, 64, 8
    ca, cb, sa, sb = fp4_operands(g, M, K, N, 16, ue4m3)
    ga, gb = torch.tensor(0.75), torch.tensor(3.0)
    BW, TW = F.ScalingType.BlockWise1x16, F.ScalingType.TensorWise
    SW = F.SwizzleType.SWIZZLE_32_4_4
    with tme.emulate("sm100", record=True) as em:
        D = F.scaled_mm(pack_fp4(ca), pack_fp4(cb).t(), [to_blocked(sa), ga], [BW, TW],
                        [to_blocked(sb), gb], [BW, TW], swizzle_a=[SW], swizzle_b=[SW],
                        output_dtype=torch.float32)
        Dn = F.scaled_mm(pack_fp4(ca), pack_fp4(cb).t(), to_blocked(sa), BW, to_blocked(sb),
                         BW, swizzle_a=SW, swizzle_b=SW, output_dtype=torch.bfloat16)
        with pytest.raises(ValueError, match="SWIZZLE_32_4_4"):     # as PyTorch on NVIDIA
            F.scaled_mm(pack_fp4(ca), pack_fp4(cb).t(), sa, BW, sb, BW)
    acc = emm(ca, cb.t(), arch="sm100", in_format="fp4_e2m1", scale_a=sa, scale_b=sb.t())
    assert torch.equal(D, acc * (ga * gb))
    assert torch.equal(Dn, acc.to(torch.bfloat16))
    assert [r.format for r in em.records] == ["NVFP4 (x global scale)", "NVFP4"]


@needs_v2
def test_mx_through_F_scaled_mm_on_sm120_and_the_swizzle_it_needs():
    A, Bnk, sa, sb = _mx_fp8(M=8, K=64, N=8, seed=5)
    MX, SW = F.ScalingType.BlockWise1x32, F.SwizzleType.SWIZZLE_32_4_4
    with tme.emulate("sm120"):
        D = F.scaled_mm(A, Bnk.t(), to_blocked(sa), MX, to_blocked(sb), MX, swizzle_a=SW,
                        swizzle_b=SW)
        with pytest.raises(ValueError, match="NO_SWIZZLE is for AMD"):
            F.scaled_mm(A, Bnk.t(), to_blocked(sa), MX, to_blocked(sb), MX)
    assert torch.equal(D, emm(A, Bnk.t(), arch="sm120", scale_a=sa,
                              scale_b=sb.t()).to(torch.bfloat16))


def test_mx_in_every_autograd_mode_autocast_and_under_compile():
    A, Bnk, sa, sb = _mx_fp8(M=8, K=64, N=8, seed=6)
    ref = emm(A, Bnk.t(), arch="sm100", scale_a=sa, scale_b=sb.t()).to(torch.bfloat16)

    def f(A, B, a, b):
        return torch._scaled_mm(A, B, a, b, out_dtype=torch.bfloat16)

    args = (A, Bnk.t(), to_blocked(sa), to_blocked(sb))
    autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # noqa: E731
    for ctx in (torch.enable_grad, torch.no_grad, torch.inference_mode, autocast):
        with ctx(), tme.emulate("sm100", record=True) as em:
            assert torch.equal(f(*args), ref)
        assert em.records[0].format == "MX fp8_e4m3"
    torch._dynamo.reset()
    with tme.emulate("sm100", record=True) as em:
        assert torch.equal(torch.compile(f, backend="aot_eager", fullgraph=True)(*args), ref)
    assert em.records[0].format == "MX fp8_e4m3"


# ------------------------------------------------------------------------------ blockwise

@pytest.mark.parametrize("blocks", ["1x128 x 128x128", "128x128 x 1x128", "1x128 x 1x128"])
def test_blockwise_scales_apply_per_128_block(blocks):
    g = gen(7)
    M, K, N = 150, 300, 200
    A = torch.randn(M, K, generator=g).to(torch.float8_e4m3fn)
    Bnk = torch.randn(N, K, generator=g).to(torch.float8_e4m3fn)
    kb = 3
    ra, rb = blocks.split(" x ")
    sa = torch.rand(M if ra == "1x128" else 2, kb, generator=g) + 0.5
    sb = torch.rand(kb, N if rb == "1x128" else 2, generator=g) + 0.5
    with tme.emulate("H100", record=True) as em:
        D = torch._scaled_mm(A, Bnk.t(), sa, sb, out_dtype=torch.float32)
    san = sa if ra == "1x128" else sa.repeat_interleave(128, 0)[:M]
    sbn = sb if rb == "1x128" else sb.repeat_interleave(128, 1)[:, :N]
    acc = None
    for j in range(kb):
        k = slice(128 * j, 128 * (j + 1))
        part = emm(A[:, k], Bnk.t()[k], arch="sm90") * (san[:, j:j + 1] * sbn[j:j + 1])
        acc = part if acc is None else acc + part
    assert torch.equal(D, acc)
    assert em.records[0].format == f"fp8_e4m3 ({blocks} scales)"
    approx = sum((A.double()[:, 128 * j:128 * (j + 1)] * san.double()[:, j:j + 1])
                 @ (Bnk.double().t()[128 * j:128 * (j + 1)] * sbn.double()[j])
                 for j in range(kb))
    assert rel_err(D, approx) < 0.01
    if HAS_V2 and rb == "128x128":     # F.scaled_mm pads scale_b's K blocks to a multiple of 4
        pad = torch.cat([sb, torch.full((1, 2), 99.0)])
        BW = F.ScalingType
        with tme.emulate("H100"):
            D2 = F.scaled_mm(A, Bnk.t(), sa, BW.BlockWise1x128, pad, BW.BlockWise128x128,
                             output_dtype=torch.float32)
        assert torch.equal(D2, D)


# ------------------------------------------------------------------------------ errors, native

def test_block_scales_on_an_arch_without_them_raise():
    A, Bnk, sa, sb = _mx_fp8(M=8, K=64, N=8)
    with tme.emulate("H100"):
        with pytest.raises(ValueError) as e:
            torch._scaled_mm(A, Bnk.t(), to_blocked(sa), to_blocked(sb),
                             out_dtype=torch.bfloat16)
    msg = str(e.value)      # the archs with MX fp8 named once, by the registry (issue 33)
    assert msg.startswith("emulate(sm90): aten._scaled_mm.default (MX scales): sm90 (Hopper) "
                          "has no fp8_e4m3 instruction with ue8m0 block scales; its fp8_e4m3 "
                          "instructions take no scales; fp8_e4m3 with ue8m0 block scales "
                          "needs sm100 (Blackwell) or sm120 (RTX Blackwell)"), msg
    assert "None" not in msg and msg.count("sm100") == 1
    spec = tme.spec("sm90", "fp8_e4m3").replace(F=13)          # a Spec without scales
    with tme.emulate(spec):
        with pytest.raises(TypeError, match=r"emulate\(custom Spec \[fp8_e4m3 -> fp32: "
                           r"t_fdpa L=32 F=13 .*\]\): .*the spec takes no scales, got ue8m0 "
                           r"block scales .*need a Spec that takes block scales, as the "
                           r"registry's for sm100 \(Blackwell\) or sm120 \(RTX Blackwell\) do"):
            torch._scaled_mm(A, Bnk.t(), to_blocked(sa), to_blocked(sb),
                             out_dtype=torch.bfloat16)


def test_bad_scales_raise_clear_errors():
    A, Bnk, sa, sb = _mx_fp8(M=8, K=64, N=8)
    with tme.emulate("B200"):
        with pytest.raises(ValueError, match=r"swizzled \(128x4 tile\) layout of \(8, 2\)"):
            torch._scaled_mm(A, Bnk.t(), sa, sb, out_dtype=torch.bfloat16)
        with pytest.raises(ValueError, match="match no recipe.*'native'"):
            torch._scaled_mm(A, Bnk.t(), torch.ones(3, 3), torch.ones(3, 3),
                             out_dtype=torch.bfloat16)
        with pytest.raises(ValueError, match=r"RowWise scales are \(8, 1\)"):
            scaled.build(A, Bnk.t(), [torch.ones(1, 8)], [scaled.ROWWISE], [],
                         [torch.ones(8, 1)], [scaled.ROWWISE], [])


@needs_v2
def test_unmodelled_v2_calls_raise():
    A, Bnk, sa, sb = _mx_fp8(M=8, K=64, N=8)
    one = torch.tensor(1.0)
    with tme.emulate("B200"):
        with pytest.raises(ValueError, match="BlockWise1x32 x TensorWise"):
            F.scaled_mm(A, Bnk.t(), sa, F.ScalingType.BlockWise1x32, one,
                        F.ScalingType.TensorWise)
        with pytest.raises(ValueError, match=r"contraction_dim=\[1, 1\] is not modelled"):
            torch.ops.aten._scaled_mm_v2(A, Bnk, [one], [0], [], [one], [0], [], None,
                                         torch.float32, [1, 1], False)


def test_scale_result_runs_natively_with_a_warning_for_fp8_outputs_only():
    """scale_result is modelled where cuBLASLt's epilogue is (registry.CUBLASLT_SCALED_MM:
    a second fp32 multiply before the fp8 clamp, tests/test_scaled_cublaslt.py); elsewhere
    an fp8 output with it runs natively, warned."""
    g = gen(8)
    A = torch.randn(8, 32, generator=g).to(torch.float8_e4m3fn)
    B = torch.randn(8, 32, generator=g).to(torch.float8_e4m3fn).t()
    one, four = torch.tensor(1.0), torch.tensor(4.0)
    native = torch._scaled_mm(A, B, one, one, scale_result=four,
                              out_dtype=torch.float8_e4m3fn)
    with tme.emulate("B200", record=True) as em:
        with pytest.warns(UserWarning, match="scale_result"):
            D = torch._scaled_mm(A, B, one, one, scale_result=four,
                                 out_dtype=torch.float8_e4m3fn)
        # cuBLAS ignores scale_result for other outputs: emulated, as without it
        D32 = torch._scaled_mm(A, B, one, one, scale_result=four, out_dtype=torch.float32)
    assert torch.equal(D.view(torch.uint8), native.view(torch.uint8))
    assert [r.format for r in em.records] == ["native", "fp8_e4m3"]
    assert torch.equal(D32, emm(A, B, arch="sm100"))
    with tme.emulate("H100", record=True) as em:
        D = torch._scaled_mm(A, B, one, one, scale_result=four, out_dtype=torch.float8_e4m3fn)
    want = (emm(A, B, arch="sm90") * 4).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert torch.equal(D.view(torch.uint8), want.view(torch.uint8))
    assert em.records[0].format != "native"
    with tme.emulate("H100", formats={"scaled_mm": "native"}, record=True) as em:
        with warnings.catch_warnings():
            warnings.simplefilter("error")          # asked for: no warning
            torch._scaled_mm(A, B, one, one, out_dtype=torch.float32)
    assert em.records[0].format == "native"


def test_out_overload_takes_its_dtype_from_out():
    g = gen(10)
    A = torch.randn(16, 64, generator=g).to(torch.float8_e4m3fn)
    B = torch.randn(8, 64, generator=g).to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0)
    o = torch.empty(16, 8)
    with tme.emulate("H100"):
        torch._scaled_mm(A, B, one, one, out=o)            # no out_dtype: out's dtype
        with pytest.raises(RuntimeError, match="out_dtype must match"):
            torch._scaled_mm(A, B, one, one, out_dtype=torch.bfloat16, out=torch.empty(16, 8))
    assert torch.equal(o, emm(A, B, arch="sm90"))


@needs_v2
@pytest.mark.parametrize("blocks", ["128x128 x 1x128", "1x128 x 1x128", "1x128 x 128x128"])
def test_F_scaled_mm_blockwise_layouts_are_pytorchs(blocks):
    # F.scaled_mm keeps B's 1x128 scales as (N, K/128) and A's 128x128 scales as
    # (round_up(K/128, 4), M/128), both K-block-last; torch._scaled_mm as (K/128, ...)
    g = gen(11)
    M, K, N = 256, 384, 130          # K/128 = 3: the padding to 4 shows
    A = torch.randn(M, K, generator=g).to(torch.float8_e4m3fn)
    Bnk = torch.randn(N, K, generator=g).to(torch.float8_e4m3fn)
    ra, rb = blocks.split(" x ")
    sa = torch.rand(M if ra == "1x128" else 2, 3, generator=g) + 0.5     # (rows, K blocks)
    sb = torch.rand(3, N if rb == "1x128" else 2, generator=g) + 0.5     # (K blocks, cols)
    with tme.emulate("H100"):
        D1 = torch._scaled_mm(A, Bnk.t(), sa, sb, out_dtype=torch.float32)
    pad = lambda t: torch.cat([t, torch.full((1, t.shape[1]), 99.0)])  # noqa: E731
    sa2 = sa if ra == "1x128" else pad(sa.t())
    sb2 = sb.t() if rb == "1x128" else pad(sb)
    ST = F.ScalingType
    rec = {"1x128": ST.BlockWise1x128, "128x128": ST.BlockWise128x128}
    with tme.emulate("H100", record=True) as em:
        D2 = F.scaled_mm(A, Bnk.t(), sa2, rec[ra], sb2, rec[rb], output_dtype=torch.float32)
        with pytest.raises(ValueError, match="F.scaled_mm's layouts"):
            F.scaled_mm(A, Bnk.t(), sa, rec[ra], sb, rec[rb], output_dtype=torch.float32)
    assert torch.equal(D1, D2) and em.records[0].format == f"fp8_e4m3 ({blocks} scales)"
    with tme.emulate("B200"):
        with pytest.raises(ValueError, match="on sm90 only"):
            F.scaled_mm(A, Bnk.t(), sa2, rec[ra], sb2, rec[rb], output_dtype=torch.float32)


@needs_fp4
def test_fp4_and_nvfp4_checks():
    g = gen(12)
    M, K, N = 16, 64, 16
    ca, cb, sa, sb = fp4_operands(g, M, K, N, 32, e8m0)
    A4, B4 = pack_fp4(ca), pack_fp4(cb).t()
    with tme.emulate("B200"):
        with pytest.raises(ValueError, match="use_fast_accum is not available for fp4"):
            torch._scaled_mm(A4, B4, to_blocked(sa), to_blocked(sb), out_dtype=torch.bfloat16,
                             use_fast_accum=True)
        with pytest.raises(ValueError, match=r"bias must have N = 16"):
            torch._scaled_mm(A4, B4, to_blocked(sa), to_blocked(sb), out_dtype=torch.bfloat16,
                             bias=torch.zeros(15, dtype=torch.bfloat16))
        with pytest.raises(ValueError, match="must be contiguous"):
            torch._scaled_mm(A4, B4, to_blocked(sa).view(-1, 4).t(), to_blocked(sb),
                             out_dtype=torch.bfloat16)
    if HAS_V2:
        MX, SW = F.ScalingType.BlockWise1x32, F.SwizzleType.SWIZZLE_32_4_4
        with tme.emulate("sm120"):
            with pytest.raises(ValueError, match="on sm100 only"):
                F.scaled_mm(A4, B4, to_blocked(sa), MX, to_blocked(sb), MX, swizzle_a=SW,
                            swizzle_b=SW)
        na, nb = ue4m3((M, K // 16), g), ue4m3((N, K // 16), g)
        BW, TW = F.ScalingType.BlockWise1x16, F.ScalingType.TensorWise
        with tme.emulate("B200"):
            with pytest.raises(ValueError, match="both operands or for neither"):
                F.scaled_mm(A4, B4, [to_blocked(na), torch.tensor(2.0)], [BW, TW],
                            to_blocked(nb), BW, swizzle_a=[SW, SW], swizzle_b=SW)


# ------------------------------------------------------------------------ schedule= presets

def _fp8_product(seed=3, K=300):
    g = gen(seed)
    A = torch.randn(8, K, generator=g).to(torch.float8_e4m3fn)
    B = torch.randn(16, K, generator=g).to(torch.float8_e4m3fn).t()
    return A, B, torch.tensor(0.5), torch.tensor(2.0), torch.randn(16, generator=g)


def _emm(A, B, **kw):
    return tme.emulated_mm(A, B, arch="sm90", out_dtype=torch.float32, **kw)


@pytest.mark.parametrize("preset", ["scaled_mm_fast_accum", "scaled_mm_precise"])
def test_a_schedule_preset_overrides_use_fast_accum_both_ways(preset):
    """A schedule given for scaled_mm decides the accumulation whatever the call's
    use_fast_accum says (both values give the preset's bits), and the records name it."""
    A, B, sa, sb, bias = _fp8_product()
    # the preset written out independently: the chain, or fp32 promotion every 128
    if preset == "scaled_mm_fast_accum":
        acc = _emm(A, B)
    else:
        acc = None
        for k0 in range(0, A.shape[1], 128):
            part = _emm(A[:, k0:k0 + 128], B[k0:k0 + 128])
            acc = part if acc is None else acc + part
    other = "scaled_mm_precise" if preset == "scaled_mm_fast_accum" else "scaled_mm_fast_accum"
    for sched in (preset, {"scaled_mm": preset}, {"default": preset}):
        with tme.emulate("sm90", record=True, schedule=sched) as em:
            got = [torch._scaled_mm(A, B, sa, sb, bias=bias.to(torch.bfloat16),
                                    out_dtype=torch.bfloat16, use_fast_accum=fa)
                   for fa in (False, True)]
        want_b = ((acc * (sa * sb)) + bias.to(torch.bfloat16).float()).to(torch.bfloat16)
        assert torch.equal(got[0].view(torch.int16), want_b.view(torch.int16)), sched
        assert torch.equal(got[1].view(torch.int16), want_b.view(torch.int16)), sched
        assert [r.format for r in em.records] == \
            [f"fp8_e4m3 (schedule {preset}) (cuBLASLt epilogue)"] * 2
    # and without a schedule the call's flag decides: the two presets' bits differ here
    with tme.emulate("sm90") as em:
        plain = [torch._scaled_mm(A, B, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fa)
                 for fa in (False, True)]
    with tme.emulate("sm90", schedule={"scaled_mm": other}):
        flipped = torch._scaled_mm(A, B, sa, sb, out_dtype=torch.bfloat16,
                                   use_fast_accum=preset == "scaled_mm_precise")
    assert not torch.equal(plain[0].view(torch.int16), plain[1].view(torch.int16))
    assert torch.equal(flipped.view(torch.int16),
                       plain[0 if other == "scaled_mm_precise" else 1].view(torch.int16))
