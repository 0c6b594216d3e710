"""The zero corners' deciding probes (probe/corners.py, docs/model.md section 6): each
feature reads its Spec field from a target (emulated_mm on a Spec with the field either
way stands in for the hardware), infer follows it, and a floor at or below the output's
emin is one arithmetic with the zero-term exponent (search.arith_key)."""
import pytest
import torch

from torch_mma_emu import emulated_mm, registry
from torch_mma_emu.probe import features, search
from torch_mma_emu.probe.infer import hints, infer
from torch_mma_emu.probe.targets import make_target

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
