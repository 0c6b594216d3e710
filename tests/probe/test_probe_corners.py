"""The zero corners' deciding probes (probe/corners.py, docs/model.md section 6): each
feature reads its Spec field from a target (emulated_mm on a Spec with the field either
way stands in for the hardware), infer follows it, and a floor at or below the output's
emin is one arithmetic with the zero-term exponent (search.arith_key)."""
import pytest
import torch

from torch_mma_emu import emulated_mm, reference, registry
from torch_mma_emu.probe import Interval, corners, features, search, subnormal
from torch_mma_emu.probe.session import Ctx
from torch_mma_emu.probe.infer import hints, infer
from torch_mma_emu.probe.targets import make_target
from torch_mma_emu.spec import Spec

# (row, field, {field value: the feature's reading})
CORNERS = [
    (("sm90", "bf16", "fp32", {}), "zero_sign", "zero_result_sign", {"plus": "+0", "keep": "-0"}),
    (("sm100", "fp4_e2m1", "fp32", {"scale_format": "ue8m0", "block_size": 32}),
     "cancelled_group", "cancelled_group_scale", {"keep": True, "drop": False}),
    (("sm100", "fp4_e2m1", "fp32", {"scale_format": "ue4m3", "block_size": 16}),
     "cancelled_group", "cancelled_group_scale", {"keep": True, "drop": False}),
    (("gfx942", "bf16", "fp32", {}), "tr_renorm", "tr_carry", {True: True, False: False}),
    (("gfx942", "fp8_e4m3fnuz", "fp32", {}), "tr_renorm", "tr_carry",
     {True: True, False: False}),
]


def _row(arch, fmt, out, kw):
    return registry.spec(arch, fmt, out, **kw)


@pytest.mark.parametrize("row,field,feat,reads", CORNERS,
                         ids=[f"{r[0]}-{r[1]}-{f}" for r, f, _, _ in CORNERS])
def test_each_corner_feature_flips_with_its_field(row, field, feat, reads):
    base = _row(*row)
    for value, want in reads.items():
        rep = features(base.replace(arch="custom", **{field: value}), order=False)
        assert rep.value(feat) == want, (value, rep[feat].detail)
        assert rep[feat].evidence, "the deciding probe vector is recorded"


def test_corner_features_say_when_they_do_not_apply():
    rep = features("sm80", "fp16", "fp32", order=False)
    # fp16 products never reach below fp32's subnormals: the sign is unobservable
    assert rep.value("zero_result_sign") is None
    assert "cannot reach" in rep["zero_result_sign"].detail
    assert rep.value("cancelled_group_scale") is None      # not block-scaled
    assert rep.value("tr_carry") is None                   # c joins the fused sum
    # sm100 ST-FDPA fuses 32 products: one ue8m0 block of 32, no second block beside it
    st = features("sm100", "fp8_e4m3", "fp32", scale_format="ue8m0", block_size=32,
                  order=False)
    assert st.value("cancelled_group_scale") is None
    assert "two scale blocks" in st["cancelled_group_scale"].detail


def test_undecidable_zero_sign_takes_the_registry_choice():
    """The cheap option: where no probe reaches the corner, both choices act alike on
    every probe and random check, so only the registry's choice is searched."""
    rep = features("sm80", "fp16", "fp32", order=False)
    iface = make_target("sm80", "fp16", "fp32").iface
    assert hints(rep, iface)["zero"]["zero_sign"] == ("plus",)
    assert set(hints(rep, iface, wide=True)["zero"]["zero_sign"]) == {"keep", "plus"}


@pytest.mark.parametrize("row,field,value", [
    (("gfx942", "bf16", "fp32", {}), "tr_renorm", False),
    (("sm100", "fp4_e2m1", "fp32", {"scale_format": "ue4m3", "block_size": 16}),
     "cancelled_group", "drop"),
    (("sm90", "bf16", "fp32", {}), "zero_sign", "keep"),
], ids=["tr_renorm-off", "cancelled_group-drop", "zero_sign-keep"])
def test_infer_recovers_either_choice_of_a_corner(row, field, value):
    reg = _row(*row)
    for sp in (reg, reg.replace(arch="custom", **{field: value})):
        inf = infer(sp, checks=200, seed=1)
        assert getattr(inf.spec, field) == getattr(sp, field), inf.describe()
        assert search.arith_key(inf.spec) == search.arith_key(sp), inf.describe()
        assert inf.rounds[0].startswith("features"), inf.rounds


def _tiny(g, shape, lo, hi):
    return torch.randn(*shape, generator=g) * 2.0 ** torch.randint(lo, hi, shape, generator=g)


@pytest.mark.parametrize("fmt,dtype", [("tf32", torch.float32), ("bf16", torch.bfloat16)])
def test_a_floor_below_emin_is_the_zero_term_exponent(fmt, dtype):
    """sm90's emax_floor=-133 + zero_exp=-133, sm120's zero_exp=-133 alone and the floor
    alone give the same bits on tiny inputs with zero terms and subnormal c (a sum with no
    zero term has c != 0, so e_max >= -126 already): one arith_key; without either the
    same inputs differ (the inputs reach the corner)."""
    sp = registry.spec("sm90", fmt, "fp32")
    assert (sp.emax_floor, sp.zero_exp) == (-133, -133)
    twin = registry.spec("sm120", fmt, "fp32")
    forms = [sp.replace(zero_exp=None), sp.replace(emax_floor=None), twin]
    assert {search.arith_key(f) for f in forms} == {search.arith_key(sp)}
    neither = sp.replace(emax_floor=None, zero_exp=None)
    assert search.arith_key(neither) != search.arith_key(sp)
    assert search.arith_key(sp.replace(emax_floor=-120, zero_exp=None)) != \
        search.arith_key(sp.replace(emax_floor=None, zero_exp=-120))   # above emin: both act
    g = torch.Generator().manual_seed(3)
    differ = 0
    for t in range(24):
        K = sp.L * (1 + t % 3) - t % 2
        A = _tiny(g, (16, K), -76, -68)
        A[torch.rand(16, K, generator=g) < 0.1] = 0
        B = _tiny(g, (K, 16), -76, -68)
        C = _tiny(g, (16, 16), -141, -139)
        C[torch.rand(16, 16, generator=g) < 0.5] = 0
        A, B = A.to(dtype), B.to(dtype)
        want = emulated_mm(A, B, C, arch=sp, in_format=fmt).view(torch.int32)
        for f in forms:
            assert torch.equal(emulated_mm(A, B, C, arch=f, in_format=fmt).view(torch.int32),
                               want)
        differ += int((emulated_mm(A, B, C, arch=neither, in_format=fmt).view(torch.int32)
                       != want).sum())
    assert differ > 0


# FTZ-AddMul's flush interval (docs/model.md 6.6): L products between two flushes of the
# accumulator input, a multiple of the group P; L = P is the old flush per group
def _ftz(fmt, L, P):
    return Spec(op="ftz_addmul", in_format=fmt, out_format="fp32", L=L, P=P, rho="rne_fp32",
                flush_inputs=True)


def _flush_feature(target, fmt):
    """acc_flush_interval alone (after the fact it needs): the reference oracle is slow."""
    ctx = Ctx(make_target(target, fmt, "fp32"))
    subnormal.subnormal_accumulation(ctx)
    return corners.acc_flush_interval(ctx)


def _reference_callable(sp):
    def f(a, b, c):
        ac = [reference.value_code(sp.fmt_a.name, x) for x in a]
        bc = [reference.value_code(sp.fmt_b.name, y) for y in b]
        d = reference.dot(sp, ac, bc, reference.value_code(sp.out_format, c))
        return reference.codes_to_tensor(d, sp.out_format)
    return f


@pytest.mark.parametrize("P,L", [(2, 2), (2, 4), (2, 16), (4, 4), (4, 8), (4, 32)])
def test_acc_flush_interval_reads_L_on_bf16(P, L):
    sp = _ftz("bf16", L, P)
    f = _flush_feature(sp, "bf16")
    assert f.value == Interval(L, L), f.detail
    assert len(f.evidence) == 2
    (v_last_plus, o_plus), (v_first_minus, o_minus) = f.evidence
    assert (o_plus.code, o_minus.code) == (0, 0x80000000)    # +0 then -0 at k = 64 - L
    # the independent Python oracle reads the same
    if L in (4, 8):
        assert _flush_feature(_reference_callable(sp), "bf16").value == Interval(L, L)


def test_acc_flush_interval_registry_rows_and_non_ftz_units():
    for ins, L in (("mfma.32x32x8bf16_1k", 8), ("mfma.32x32x4bf16", 4)):
        sp = registry.spec("gfx90a", "bf16", "fp32", instruction=ins)
        assert _flush_feature(sp, "bf16").value == Interval(L, L)
    # L beyond 64 or not dividing it (K = 64 pads the last instruction: +0 at every k)
    for L, want in ((128, Interval(128, 128)), (12, Interval(12, 12)),
                    (256, Interval(256, None))):   # 256: "at least 256"
        f = _flush_feature(_ftz("bf16", L, 4), "bf16")
        assert f.value == want, f.detail
    rep = features(_ftz("bf16", 2, 2), order=False)  # the old flush at every group
    assert rep.value("acc_flush_interval") == Interval(2, 2)
    assert "(per group)" in rep["acc_flush_interval"].detail
    for arch in ("sm80", "gfx942", "gfx908"):       # subnormal accumulators kept
        f = _flush_feature(arch, "bf16")
        assert f.value is None and "applies where" in f.detail


def test_acc_flush_interval_is_unobservable_with_fp16_inputs():
    """fp16 products (>= 2**-28 in magnitude, multiples of 2**-48) never bring a flushed c
    into fp32's subnormals, nor to -0: every L acts alike, on any input.  Adversarial inputs
    (tiny and subnormal c of both signs, -0 products, exact cancellation) give the same
    bits for L = P and L = K in fp16, and differ in bf16 (the inputs reach the corner)."""
    f = _flush_feature(_ftz("fp16", 8, 4), "fp16")
    assert f.value is None and "acts on no input" in f.detail
    rep = features(_ftz("fp16", 8, 4), order=False)
    iface = make_target(_ftz("fp16", 8, 4), "fp16", "fp32").iface
    assert hints(rep, iface)["flush_Ls"] == [8]          # the registry's L (gfx90a fp16)
    g = torch.Generator().manual_seed(5)
    for fmt, dtype, lo in (("fp16", torch.float16, -14), ("bf16", torch.bfloat16, -63)):
        differ = 0
        for P, L in ((4, 8), (2, 4), (4, 16)):
            for t in range(12):
                K = L * (1 + t % 3) - (t % 4 == 3) * P
                A = _tiny(g, (16, K), lo, lo + 3)
                A[torch.rand(16, K, generator=g) < 0.4] = 0
                B = _tiny(g, (K, 16), lo, lo + 3)
                B[torch.rand(K, 16, generator=g) < 0.3] = 0
                A[:, -P:] = -1.0                          # (-1) * (+0) = -0 products
                B[-P:, :] = 0.0
                A, B = A.to(dtype), B.to(dtype)
                # c: minus the first group's value, a little below or above (-0, subnormals)
                first = (A[:, :P].double() @ B[:P, :].double()).float()
                C = -first * (1 + torch.randint(-2, 3, (16, 16), generator=g) * 2.0 ** -23)
                C[torch.rand(16, 16, generator=g) < 0.2] = -0.0
                C[torch.rand(16, 16, generator=g) < 0.1] = -(2.0 ** -127)
                d = [emulated_mm(A, B, C, arch=_ftz(fmt, LL, P)).view(torch.int32)
                     for LL in (P, L)]
                differ += int((d[0] != d[1]).sum())
        assert (differ == 0) is (fmt == "fp16"), (fmt, differ)


@pytest.mark.slow   # 2 x infer on the 2-core machine (about 40 s)
@pytest.mark.parametrize("P,L", [(2, 4), (2, 2)])
def test_infer_recovers_the_flush_interval(P, L):
    sp = _ftz("bf16", L, P)
    inf = infer(sp, checks=200, seed=1)
    assert (inf.spec.L, inf.spec.P) == (L, P), inf.describe()
    assert search.arith_key(inf.spec) == search.arith_key(sp)
    assert inf.rounds[0].startswith("features"), inf.rounds
