"""probe.features on every registry model: each observed feature must equal the entry's
parameter (fused length, F, F2, rounding, output precision, c's place, groups, floor, NaN
encoding, subnormal handling).  A feature may be unobservable ("n/a") only where the test
below can say why from the formats alone; otherwise the feature test itself is broken."""
import math

import pytest

from torch_mma_emu import registry
from torch_mma_emu.probe import Interval, features, search
from torch_mma_emu.probe.features import probe
from torch_mma_emu.probe.space import Structure
from torch_mma_emu.formats import FORMATS


def _configs():
    seen = {}
    for sp in registry.all_specs():
        seen.setdefault(search.arith_key(sp), sp)
    return list(seen.values())


CONFIGS = _configs()
IDS = [f"{s.arch}-{s.op}-{s.in_format}{'x' + s.in_format_b if s.in_format_b else ''}-"
       f"{s.out_format}{'-' + s.scale_format + str(s.block_size) if s.scaled else ''}"
       for s in CONFIGS]


def test_every_registry_entry_is_covered():
    keys = {search.arith_key(s) for s in CONFIGS}
    assert all(search.arith_key(e) in keys for e in registry.all_specs())
    assert len(registry.all_specs()) > len(CONFIGS)      # duplicates by arch exist


def _narrow(sp) -> bool:
    """Inputs so narrow that no probe puts two terms 2**F apart (fp4/fp6 without scales)."""
    return max(sp.fmt_a.exp_bits, sp.fmt_b.exp_bits) <= 3 or \
        min(sp.fmt_a.exp_bits, sp.fmt_b.exp_bits) <= 3 and sp.out_format == "fp16"


def _one_narrow_block(sp) -> bool:
    """One scale block per fused sum and products of the two formats spanning fewer than
    F + 2 binades: nothing can sit 2**(F+1) below a product of the same block."""
    if not sp.scaled or sp.L > sp.block_size:
        return False
    span = (sp.fmt_a.emax + 1 + sp.fmt_b.emax + 1) - (sp.fmt_a.emin + sp.fmt_b.emin)
    return span < sp.F + 2


def check_passes(sp, rep):
    """Multi-pass instructions: the pass layout and where c joins are observed exactly;
    the fused length probe sees the whole instruction."""
    v = rep.value
    want = Structure(sp.passes, sp.L, sp.width, sp.c_join).describe()
    assert v("pass_structure") == want, rep["pass_structure"].detail
    assert v("block_width") == Interval(sp.instr_k, sp.instr_k)
    assert v("nan_encoding") == sp.nan_encoding
    assert v("products_exact") is True
    assert v("special_values") == "IEEE"
    pe = v("output_precision")
    assert pe is not None and sp.fmt_out.man_bits + 1 in pe


def check(sp, rep):
    v = rep.value
    op = sp.op
    if sp.multipass:
        return check_passes(sp, rep)
    ps = v("pass_structure")      # one fused op per chunk with c inside: no passes to see
    assert ps in ("none", None) or op == "ftz_addmul", rep["pass_structure"].detail
    W = v("block_width")
    assert W is not None and W.exact, rep["block_width"].detail
    assert W.lo == (1 if op == "fma" else sp.P if op == "ftz_addmul" else sp.L)
    F = v("fused_precision")
    if op in ("t_fdpa", "st_fdpa", "gst_fdpa", "tr_fdpa", "gtr_fdpa"):
        assert F is not None and sp.F in F, rep["fused_precision"].detail
        if not F.exact:   # only bounded: the formats' span must make larger F equivalent
            assert "every F >=" in rep["fused_precision"].detail
    elif op == "e_fdpa":
        assert F is not None and F.hi is None and F.lo >= 41
    else:
        assert F is None      # FMA chains and one-at-a-time additions: no fused sum
    fr = v("final_rounding")
    want = "RZ" if sp.rho.startswith("rz") else "RNE"
    assert fr is not None and fr.split(" ")[0].split("/")[0] == want or fr == want, fr
    pe = v("output_precision")
    p = 14 if sp.rho == "rz_e8m13" else sp.fmt_out.man_bits + 1
    assert pe is not None and p in pe
    if op in ("tr_fdpa", "gtr_fdpa"):
        assert v("c_joins") is False
        assert v("c_add_precision") == Interval(sp.F2, sp.F2)
        assert v("c_alignment").startswith(sp.align_round.upper())
    elif op in ("t_fdpa", "st_fdpa", "gst_fdpa"):
        cj = v("c_joins")
        assert cj is True or (cj is None and _narrow(sp)), rep["c_joins"].detail
    if op == "gtr_fdpa":
        assert v("product_groups") == "even/odd"
    if op == "gst_fdpa":
        assert v("product_groups") == f"G = {sp.G}"
    if op == "st_fdpa":   # narrow formats in one block: G = 1 and G = block coincide
        pg = rep["product_groups"]
        assert pg.value == "none" or pg.value is None and _one_narrow_block(sp), pg
    fl = v("exponent_floor")
    if op in ("t_fdpa", "st_fdpa", "gst_fdpa", "tr_fdpa", "gtr_fdpa"):
        if fl is None:
            assert op == "st_fdpa" and (_narrow(sp) or _one_narrow_block(sp)), \
                rep["exponent_floor"].detail
        else:
            # the probe's vectors hold zero terms, so zero_exp (docs/model.md 6.3) acts as a
            # floor too: it sees the larger of the two
            caps = [x for x in (sp.emax_floor, sp.zero_exp) if x is not None]
            if not caps and not sp.tr_renorm:   # tr_renorm: c = 0 at -126 (model.md 6.5)
                assert not fl.exact, f"a floor {fl} where the model has none"
            elif caps and fl.exact:
                assert fl == Interval(max(caps), max(caps)), (fl, caps)
            elif caps:   # bounded only: the interval holds the model's cap
                cap = max(caps)
                assert (fl.lo is None or fl.lo <= cap) and (fl.hi is None or cap <= fl.hi), \
                    (fl, caps)
    assert v("nan_encoding") == sp.nan_encoding
    assert v("subnormal_inputs") is (not sp.flush_inputs)
    assert v("subnormal_accumulation") is (op != "ftz_addmul")
    fi = rep["acc_flush_interval"]    # FTZ-AddMul's L (docs/model.md 6.6)
    if op == "ftz_addmul" and sp.in_format == "bf16":
        assert fi.value == Interval(sp.L, sp.L), fi.detail
        assert ("(per group)" in fi.detail) is (sp.L == sp.P), fi.detail
    else:   # fp16 products never reach fp32's subnormals; the others keep subnormal sums
        assert fi.value is None and ("acts on no input" in fi.detail if op == "ftz_addmul"
                                     else "applies where" in fi.detail), fi.detail
    so = v("subnormal_outputs")
    assert so is None or so is (op != "ftz_addmul")
    assert v("special_values") == "IEEE"
    assert v("products_exact") is True
    mono = v("monotonic")
    if op in ("fma", "e_fdpa", "ftz_addmul"):
        assert mono is True
    if op == "t_fdpa" and sp.L - 1 >= 3 * 2 ** (sp.F + 1 - p) and sp.fmt_out.name == "fp32":
        assert mono is False, rep["monotonic"].detail     # seed 004's counterexample
    if op == "tr_fdpa" and FORMATS[sp.in_format].exp_bits == 8:
        assert v("product_overflow") is True            # seed 003 section 4.2


@pytest.mark.parametrize("sp", CONFIGS, ids=IDS)
def test_features_match_registry(sp):
    rep = probe(sp, order=False).report
    check(sp, rep)


def test_features_by_arch_name_and_text():
    rep = features("sm80", "fp16", order=True)
    assert rep["block_width"].value == Interval(8, 8)
    assert rep["fused_precision"].value == Interval(24, 24)
    assert rep.value("order") == "chain of (8+1)-term fused sums, the first fusing 9"
    text = rep.table()
    for label in ("subnormal inputs handled", "fused length", "final rounding", "monotonic"):
        assert label in text
    doc = rep.to_json()
    assert doc["features"]["block_width"]["value"] == {"lo": 8, "hi": 8}


def test_seed_002_summary_for_hopper():
    """The generated seed 002 summary row of H100 (fp8 (2,13) 21 32 trunc.)."""
    from torch_mma_emu.probe.infer import infer
    from torch_mma_emu.probe.tables import summary_row
    inf = infer("sm90", "fp8_e4m3", "fp32", checks=500)
    row = summary_row(inf.report, inf.spec)
    assert row[3:] == ["(2,13)", "21", 32, "trunc."]


def test_monotonicity_counterexample_is_real():
    """The reported counterexample: a smaller c gives a larger result (seed 004)."""
    rep = features("sm70", "fp16", order=False)
    f = rep["monotonic"]
    assert f.value is False
    (v1, o1), (v2, o2) = f.evidence
    assert v1.c < v2.c and o1.value > o2.value
    assert v1.a == v2.a and v1.b == v2.b


def test_bad_arguments_name_what_is_allowed():
    with pytest.raises(ValueError, match="known formats"):
        features("sm80", "fp17")
    with pytest.raises(ValueError, match="in_format is required"):
        features("sm80", None)
    with pytest.raises(TypeError, match="accumulator type"):
        features("sm80", "fp16", "int8")
    with pytest.raises(TypeError, match="target must be"):
        features(42, "fp16")
    with pytest.raises(ValueError, match="unknown arch"):
        features("sm999", "fp16")
    with pytest.raises(ValueError, match="no instruction for fp8"):
        features("sm80", "fp8_e4m3")
    with pytest.raises(ValueError, match="scale_format must be"):
        features("sm100", "fp4_e2m1", scale_format="ue5m2")


@pytest.mark.parametrize("change", [dict(pass_width=1), dict(pass_width=4),
                                    dict(pass_width=16), dict(c_join="first"),
                                    dict(passes=4, L=8, pass_width=2),
                                    dict(passes=1, L=32, pass_width=0, c_join="final")])
def test_pass_structure_of_custom_multipass_units(change):
    """Every layout of the model space is read back exactly (or, for c first with
    contiguous passes, as the equivalent chain), and infer_spec's model space holds it."""
    from torch_mma_emu.probe.infer import infer
    sp = registry.spec("sm100", "fp8_e4m3", "fp16", instruction="mma.sync").replace(**change)
    ctx = probe(sp, order=False)
    rep = ctx.report
    if sp.multipass:
        want = Structure(sp.passes, sp.L, sp.width, sp.c_join).describe()
        assert rep.value("pass_structure") == want, rep["pass_structure"].detail
        assert Structure(sp.passes, sp.L, sp.width, sp.c_join) in ctx.pass_structures
    inf = infer(sp, checks=300)
    assert search.mismatches(inf.spec, probe_samples(sp)) == 0, inf.describe()


def probe_samples(sp):
    from torch_mma_emu.probe.samples import random_samples
    from torch_mma_emu.probe.targets import make_target
    return random_samples(make_target(sp), 400, [32, 64, 7], seed=3)
