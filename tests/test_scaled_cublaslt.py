"""torch._scaled_mm as cuBLASLt 12.8.3.14 returns it (issue 38): the epilogue, sm89's
interleaved split-K, and the per-call split-K choice of the recorded tables.  Recordings:
tests/data/cublaslt_epilogue (RTX 4060, torch 2.7.1; NOTICE.md there)."""
import json
import os

import numpy as np
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import Schedule
from torch_mma_emu.cublaslt import OutsideTable, SplitKChoice

DATA = os.path.join(os.path.dirname(__file__), "data", "cublaslt_epilogue")
F8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
OUT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2


def f32(bits):
    return torch.tensor([bits], dtype=torch.int64).to(torch.int32).view(torch.float32)[0]


def bits(t):
    iv = {4: torch.int32, 2: torch.int16, 1: torch.uint8}[t.element_size()]
    return t.view(iv).to(torch.int64) & ((1 << (8 * t.element_size())) - 1)


def ada_split(S, scheme, fast):
    return Schedule(split_k=S, split_grain=64, split_layout="interleaved",
                    reduce="halves" if scheme == "pairwise" else "sequential",
                    promote_every=None if fast else 128)


def scaled(arch, a, b, sa, sb, out_dtype, fast, schedule=None, **kw):
    with tme.emulate(arch, schedule=schedule):
        return torch._scaled_mm(a, b, torch.tensor(sa), torch.tensor(sb),
                                out_dtype=out_dtype, use_fast_accum=fast, **kw)


# -- the recorded epilogue cases ------------------------------------------------------------
def test_recorded_epilogue_cases():
    """Zero signs (zero and signed scales, underflow), NaN / Inf inputs, S = 3 pairwise
    splits of K = 32 (two empty splits): every output of the 264 recorded calls."""
    j = json.load(open(os.path.join(DATA, "epilogue_hw_rtx4060.json")))
    z = np.load(os.path.join(DATA, "epilogue_hw_rtx4060.npz"))
    n = 0
    for case in j["cases"]:
        a = torch.from_numpy(z[case["a"]]).view(F8[case["fmt_a"]])
        b = torch.from_numpy(z[case["b"]]).view(F8[case["fmt_b"]])
        for o in case["outputs"]:
            sk = o["splitk"]
            sched = None if sk["S"] == 1 else \
                {"scaled_mm": ada_split(sk["S"], sk["scheme"], o["fast_accum"])}
            with tme.emulate("sm89", schedule=sched):
                r = torch._scaled_mm(a, b.t(), f32(o["scale_a_bits"]), f32(o["scale_b_bits"]),
                                     out_dtype=OUT[o["out_dtype"]],
                                     use_fast_accum=o["fast_accum"])
            want = torch.from_numpy(z[o["bits"]].astype(np.int64))
            assert torch.equal(bits(r), want), (case["case"], o["name"])
            n += 1
    assert n == 264


@pytest.mark.parametrize("every", [pytest.param(1, marks=pytest.mark.slow), 5])
def test_recorded_split_outputs(every):
    """Split calls recorded on the RTX 4060 (S = 2 to 32, serial and pairwise, fast and
    slow, fp32 / bf16 / fp16 / fp8 outputs, scale_result): bit for bit with the interleaved
    layout (split_rtx4060.*, a subset of mmaemu's hw_mini, scripts/data/
    cublaslt_split_recordings.py; all 1,056 split outputs there match)."""
    j = json.load(open(os.path.join(DATA, "split_rtx4060.json")))
    z = np.load(os.path.join(DATA, "split_rtx4060.npz"))
    outs = [(c, o) for c in j["cases"] for o in c["outputs"]]
    assert len(outs) == 555 and len({o["S"] for _, o in outs}) == 18
    for c, o in outs[::every]:
        a = torch.from_numpy(z[c["a"]]).view(F8[o["fmt_a"]])
        b = torch.from_numpy(z[c["b"]]).view(F8[o["fmt_b"]])
        kw = {} if o["scale_result_bits"] is None else \
            {"scale_result": f32(o["scale_result_bits"])}
        with tme.emulate("sm89", schedule={"scaled_mm": ada_split(o["S"], o["scheme"],
                                                                  o["fast"])}):
            r = torch._scaled_mm(a, b.t(), f32(o["scale_a_bits"]), f32(o["scale_b_bits"]),
                                 out_dtype=getattr(torch, o["out_dtype"]),
                                 use_fast_accum=o["fast"], **kw)
        if tuple(r.shape) != tuple(o["shape"]):
            r = r[o["sel"]["rows"]][:, o["sel"]["cols"]]
        want = torch.from_numpy(z[o["bits"]].astype(np.int64)).reshape(r.shape)
        assert torch.equal(bits(r.contiguous()), want), (c["id"], o["name"])


@pytest.mark.parametrize("every", [pytest.param(1, marks=pytest.mark.slow), 8])
def test_recorded_double_rounding_ties(every):
    """bf16 / fp16 outputs round the fp32 y once more (ties recorded on the RTX 4060)."""
    j = json.load(open(os.path.join(DATA, "epilogue_ties_rtx4060.json")))
    z = np.load(os.path.join(DATA, "epilogue_ties_rtx4060.npz"))
    b = torch.from_numpy(z["b"]).view(E4)
    for c in j["cases"][::every]:
        a = torch.from_numpy(z[c["a"]]).view(E4)
        with tme.emulate("sm89"):
            r = torch._scaled_mm(a, b.t(), f32(c["scale_a_bits"]), f32(c["scale_b_bits"]),
                                 out_dtype=OUT[c["out_dtype"]], use_fast_accum=c["fast"])
        assert torch.equal(bits(r), torch.from_numpy(z[c["out"]].astype(np.int64))), c["out"]


# -- constructed epilogue facts ----------------------------------------------------------------
@pytest.mark.parametrize("arch", ["sm89", "sm90"])
def test_zero_product_with_negative_scale_is_plus_zero(arch):
    a = torch.tensor([[1.0] + [0.0] * 15]).to(E4)
    b = torch.zeros(16, 16).to(E4)
    r = scaled(arch, a, b, -1.0, 1.0, torch.float32, True)
    assert bits(r).eq(0).all()                                  # +0, not -0


def test_underflow_keeps_its_sign():
    a = torch.zeros(1, 16)
    a[0, 0] = -2.0 ** -6
    b = torch.zeros(16, 16)
    b[0] = 2.0 ** -6
    r = scaled("sm89", a.to(E4), b.to(E4), 2.0 ** -100, 2.0 ** -40, torch.float32, True)
    assert bits(r).eq(0x80000000).all()                          # -0: fma(-2^-12, 2^-140, +0)


def test_fp8_outputs_saturate_and_scale_result():
    a = torch.zeros(1, 16)
    a[0, 0] = 16.0
    b = torch.zeros(16, 16)
    b[0] = 64.0
    b[0, 1] = -64.0
    r = scaled("sm89", a.to(E4), b.to(E4), 1.0, 1.0, E4, True)          # 1024 -> 448
    assert r.float()[0, 0] == 448 and r.float()[0, 1] == -448
    r = scaled("sm90", a.to(E4), b.to(E4), 64.0, 1.0, E5, True)         # 65536 -> 57344
    assert r.float()[0, 0] == 57344 and r.float()[0, 1] == -57344
    # scale_result: a second fp32 multiply before the clamp (1024 * 0.25 = 256, 1024 * 4 clamps)
    r = scaled("sm89", a.to(E4), b.to(E4), 1.0, 1.0, E4, True, scale_result=torch.tensor(0.25))
    assert r.float()[0, 0] == 256
    r = scaled("sm89", a.to(E4), b.to(E4), 1.0, 1.0, E4, True, scale_result=torch.tensor(4.0))
    assert r.float()[0, 0] == 448


def test_canonical_nan_from_promotion_adds_and_epilogue():
    """Inf - Inf in the fp32 promotion adds (slow accumulation, K = 256) and 0 x Inf in the
    epilogue come out as 0x7FFFFFFF / 0x7FFF, not the CPU's 0xFFC00000 / 0xFFFF."""
    a = torch.zeros(1, 256)
    a[0, 0], a[0, 200] = float("inf"), float("-inf")
    b = torch.ones(256, 16)
    A, B = a.to(E5), b.to(E5)
    assert bits(scaled("sm89", A, B, 1.0, 1.0, torch.float32, False)).eq(0x7FFFFFFF).all()
    assert bits(scaled("sm90", A, B, 1.0, 1.0, torch.bfloat16, False)).eq(0x7FFF).all()
    a = torch.zeros(1, 16)
    a[0, 0] = float("inf")
    r = scaled("sm89", a.to(E5), torch.ones(16, 16).to(E5), 0.0, 1.0, torch.float16, True)
    assert bits(r).eq(0x7FFF).all()                                        # Inf * alpha 0


def test_k_zero_gives_zeros_without_scales():
    a, b = torch.zeros(2, 0).to(E4), torch.zeros(0, 16).to(E4)
    for sa in (float("inf"), -1.0):
        r = scaled("sm89", a, b, sa, 1.0, torch.float32, True)
        assert r.shape == (2, 16) and bits(r).eq(0).all()


# -- sm89's interleaved split-K ----------------------------------------------------------------
def test_issue_reproducer_interleaved_pairwise():
    """1 x 320 by 320 x 1: products 2^-12 at k = 65, 65536 at 128, -65536 at 256, fast
    accumulation, S = 4: the GPU returns 2^-12 (contiguous slices or a serial merge give 0)."""
    a, b = torch.zeros(1, 320), torch.zeros(320, 1)
    a[0, 65], b[65, 0] = 2.0 ** -6, 2.0 ** -6
    a[0, 128], b[128, 0] = 256.0, 256.0
    a[0, 256], b[256, 0] = -256.0, 256.0
    A, B = a.to(E4), b.to(E4)
    r = scaled("sm89", A, B, 1.0, 1.0, torch.float32, True,
               schedule={"scaled_mm": ada_split(4, "pairwise", True)})
    assert r.item() == 2.0 ** -12
    assert scaled("sm89", A, B, 1.0, 1.0, torch.float32, True,
                  schedule={"scaled_mm": "cublas_split_k_4"}).item() == 0.0


def _reference(A, B, S, pairwise, fast):
    """Independent of the schedule compiler: each split's tiles gathered by hand, its chains
    by plain emulated_mm, the merges written out in torch float32 (mmaemu's description)."""
    K = A.shape[1]
    T = -(-K // 64)
    q = -(-T // S)
    parts = []
    for s in range(S):
        idx = [t * 64 + i for t in range(s, q * S, S) for i in range(64)]
        a = torch.stack([A[:, k] if k < K else torch.zeros_like(A[:, 0]) for k in idx], 1)
        b = torch.stack([B[k] if k < K else torch.zeros_like(B[0]) for k in idx], 0)
        if fast:
            parts.append(tme.emulated_mm(a, b, arch="sm89"))
            continue
        acc = torch.zeros(A.shape[0], B.shape[1])
        for c0 in range(0, len(idx), 128):
            acc = acc + tme.emulated_mm(a[:, c0:c0 + 128], b[c0:c0 + 128], arch="sm89")
        parts.append(acc)
    if not pairwise:
        out = parts[0]
        for p in parts[1:]:
            out = out + p
        return out
    h = -(-S // 2)
    out = parts[S - 1]
    for i in range(h):
        out = out + (parts[i] + parts[i + h] if i + h < S - 1 else parts[i])
    return out


@pytest.mark.parametrize("S", [2, 3, 4, 5, 6])
def test_interleaved_split_matches_reference(S):
    g = torch.Generator().manual_seed(S)
    K = 64 * (2 * S + 1) + 24                       # ragged last tile, splits of unequal length
    x = torch.randn(3, K, generator=g) * torch.exp2(torch.randint(-8, 9, (3, K), generator=g))
    y = torch.randn(K, 5, generator=g) * torch.exp2(torch.randint(-8, 9, (K, 5), generator=g))
    A, B = x.to(E4), y.to(E4)
    for pairwise in (False, True):
        for fast in (True, False):
            s = ada_split(S, "pairwise" if pairwise else "serial", fast)
            got = tme.emulated_mm(A, B, arch="sm89", schedule=s)
            want = _reference(A, B, S, pairwise, fast)
            assert torch.equal(bits(got), bits(want)), (S, pairwise, fast)


def test_interleaved_fields_checked_and_round_trip():
    s = ada_split(3, "pairwise", False)
    assert Schedule.from_string(s.to_string()) == s
    assert "interleaved" in s.describe()
    with pytest.raises(ValueError, match="split_grain"):
        Schedule(split_k=2, split_layout="interleaved")
    with pytest.raises(ValueError, match="split_layout"):
        Schedule(split_k=2, split_grain=64, split_layout="diagonal")


# -- per-call split-K choice -------------------------------------------------------------------
def test_table_choices_h100_pcie():
    c = SplitKChoice("cublaslt-12.8.3.14/H100-PCIe")
    assert c.split(16, 384, 16384, E4, E4, torch.bfloat16, True)[0] == 6
    assert c.split(1, 2048, 8192, "fp8_e4m3", "fp8_e4m3", torch.bfloat16, False)[0] == 2
    assert c.split(1, 1920, 1920, E4, E4, torch.bfloat16, True)[0] == 1
    s = c(16, 384, 16384, E4, E4, torch.bfloat16, False)
    assert (s.split_k, s.split_grain, s.promote_every, s.split_layout) == (6, "128", 128, None)
    with pytest.raises(OutsideTable, match="no recorded"):
        c(17, 385, 16385, E4, E4, torch.bfloat16, True)
    assert SplitKChoice(c.name, workspace=0).split(16, 384, 16384, E4, E4,
                                                   torch.bfloat16, True) == (1, 0)
    with pytest.raises(ValueError, match="workspace"):
        SplitKChoice(c.name, workspace=123)
    r = SplitKChoice("cublaslt-12.8.3.14/RTX-4060")(1, 16, 8192, E4, E4, torch.bfloat16, True)
    assert (r.split_k, r.split_layout, r.reduce) == (6, "interleaved", "halves")


def test_preview_picks_the_recorded_split_per_call():
    """A model whose _scaled_mm calls span split (1 x 8192 by 8192 x 2048: S = 2) and
    unsplit (1 x 1920 by 1920 x 1920) shapes on the H100 PCIe table."""
    g = torch.Generator().manual_seed(0)
    x1 = torch.randn(1, 8192, generator=g).to(E4)
    w1 = torch.randn(2048, 8192, generator=g).to(E4).t()
    x2 = torch.randn(1, 1920, generator=g).to(E4)
    w2 = torch.randn(1920, 1920, generator=g).to(E4).t()
    one = torch.tensor(1.0)

    def model():
        return [torch._scaled_mm(x, w, one, one, out_dtype=torch.bfloat16, use_fast_accum=True)
                for x, w in ((x1, w1), (x2, w2))]
    with tme.emulate("H100", schedule={"scaled_mm": "cublaslt-12.8.3.14/H100-PCIe"},
                     record=True) as em:
        y1, y2 = model()
    labels = [r.format for r in em.records if r.kind == "scaled_mm"]
    assert "split-K 2" in labels[0] and "split-K" not in labels[1], labels
    assert all("cuBLASLt epilogue" in lab for lab in labels), labels
    with tme.emulate("H100", schedule={"scaled_mm": Schedule(split_k=2, split_grain=128)}):
        z1 = model()[0]
    with tme.emulate("H100"):
        z2 = model()[1]
    assert torch.equal(bits(y1), bits(z1)) and torch.equal(bits(y2), bits(z2))
    with tme.emulate("H100"):
        assert not torch.equal(bits(model()[0]), bits(y1))     # the split changes bits here
    with tme.emulate("sm89", schedule={"scaled_mm": "cublaslt-12.8.3.14/H100-PCIe"}):
        with pytest.raises(ValueError, match="recorded on H100 PCIe"):
            model()
    with tme.emulate("H100", schedule={"scaled_mm": "cublaslt-12.8.3.14/H100-PCIe"}):
        with pytest.raises(OutsideTable):
            torch._scaled_mm(x1[:, :1000], w1[:1000], one, one, out_dtype=torch.bfloat16)


def test_named_gpus_and_a_callable_choice():
    from torch_mma_emu.cublaslt import choice_for_gpu
    from torch_mma_emu.registry import GPUS, gpu
    assert GPUS["H100 PCIe"].sms == 114 and gpu("H100 SXM").sms == 132
    assert GPUS["H200"].sms == 132 and (GPUS["RTX 4060"].arch, GPUS["RTX 4060"].sms) == ("sm89", 24)
    assert choice_for_gpu("H100 PCIe").name == "cublaslt-12.8.3.14/H100-PCIe"
    assert choice_for_gpu("rtx-4060", workspace=32 << 20).workspace == 32 << 20
    for g in ("H100 SXM", "H200"):
        with pytest.raises(ValueError, match="132 SMs"):
            choice_for_gpu(g)
    seen = []

    def choose(M, N, K, fa, fb, out_dtype, fast):
        seen.append((M, N, K, fa, fb, out_dtype, fast))
        return ada_split(2, "pairwise", fast) if K >= 256 else None
    a = torch.ones(2, 320).to(E4)
    b = torch.ones(320, 16).to(E4)
    with tme.emulate("sm89", schedule={"scaled_mm": choose}, record=True) as em:
        torch._scaled_mm(a, b, torch.tensor(1.0), torch.tensor(1.0), out_dtype=torch.float32)
        torch._scaled_mm(a[:, :64], b[:64], torch.tensor(1.0), torch.tensor(1.0),
                         out_dtype=torch.float32)
    assert seen[0] == (2, 16, 320, E4, E4, torch.float32, False)
    assert "split-K 2" in em.records[0].format and "split-K" not in em.records[1].format
