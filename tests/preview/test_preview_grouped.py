"""``torch._grouped_mm`` / ``F.grouped_mm`` and ``torch._scaled_grouped_mm`` under ``emulate``:
one emulated GEMM per group, every operand form, forward and backward, in every mode; the
float64 reference of ``report`` works; transformers' Mixtral with grouped_mm experts."""
from __future__ import annotations

import warnings

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu.preview import emulate
from helpers import rnd, same
from spy_below import BelowSpy, coarse

MODES = ("train", "no_grad", "inference_mode", "autocast")
OFFS = torch.tensor([3, 3, 9], dtype=torch.int32)           # an empty group in the middle


def _ctx(mode):
    return {"no_grad": torch.no_grad(), "inference_mode": torch.inference_mode(),
            "autocast": torch.autocast("cpu", dtype=torch.bfloat16)}.get(mode,
                                                                         torch.enable_grad())


def _ref(a, b, spec, dtype=torch.bfloat16):
    if a.shape[0] == 0 or b.shape[-1] == 0 or a.shape[-1] == 0:
        return torch.zeros(a.shape[0], b.shape[-1], dtype=dtype)
    return tme.emulated_mm(a, b, arch=spec).to(dtype)


def _layouts():
    """(A, B, offs, reference builder) for the four operand forms."""
    A2, B3 = rnd(10, 24, seed=1), rnd(3, 24, 5, seed=2)
    A3, B2 = rnd(3, 4, 24, seed=3), rnd(24, 11, seed=4)
    Ak, Bk = rnd(4, 20, seed=5), rnd(20, 6, seed=6)
    A33, B33 = rnd(2, 3, 24, seed=7), rnd(2, 24, 5, seed=8)
    offs_n = torch.tensor([4, 4, 11], dtype=torch.int32)
    offs_k = torch.tensor([7, 7, 20], dtype=torch.int32)

    def r23(s):
        out = torch.zeros(10, 5, dtype=torch.bfloat16)
        for g, (lo, hi) in enumerate([(0, 3), (3, 3), (3, 9)]):
            out[lo:hi] = _ref(A2[lo:hi], B3[g], s)
        return out

    def r32(s):
        return torch.cat([_ref(A3[g], B2[:, lo:hi], s)
                          for g, (lo, hi) in enumerate([(0, 4), (4, 4), (4, 11)])], 1)

    def r22(s):
        return torch.stack([_ref(Ak[:, lo:hi], Bk[lo:hi], s)
                            for lo, hi in [(0, 7), (7, 7), (7, 20)]])

    def r33(s):
        return torch.stack([_ref(A33[g], B33[g], s) for g in range(2)])
    return {"2d3d": (A2, B3, OFFS, r23), "3d2d": (A3, B2, offs_n, r32),
            "2d2d": (Ak, Bk, offs_k, r22), "3d3d": (A33, B33, None, r33)}


@pytest.mark.parametrize("layout", ["2d3d", "3d2d", "2d2d", "3d3d"])
@pytest.mark.parametrize("mode", MODES)
def test_grouped_mm_is_one_emulated_gemm_per_group(layout, mode):
    spec = coarse()
    A, B, offs, ref = _layouts()[layout]
    with BelowSpy() as spy, _ctx(mode), emulate(spec, record=True) as em:
        y = torch._grouped_mm(A, B, offs=offs)
    assert same(y, ref(spec))
    assert not same(y, ref("sm90"))                    # the coarse spec shows
    assert not spy.escaped, spy.escaped
    assert [r.kind for r in em.records] == ["grouped_mm"] and em.records[0].emulated
    assert "grouped_mm" in str(em.records[0].op)


@pytest.mark.parametrize("mode", ["train", "autocast"])
def test_grouped_mm_backward_is_emulated_per_group(mode):
    spec = coarse()
    A = rnd(10, 24, seed=1).requires_grad_()
    B = rnd(3, 24, 5, seed=2).requires_grad_()
    dy = rnd(10, 5, seed=9)
    with BelowSpy() as spy, _ctx(mode), emulate(spec, record=True) as em:
        y = torch.nn.functional.grouped_mm(A, B, offs=OFFS)
        y.backward(dy)
    assert not spy.escaped, spy.escaped
    phases = [(r.kind, r.phase) for r in em.records]
    assert phases.count(("grouped_mm", "forward")) == 1
    assert phases.count(("grouped_mm", "backward")) == 2
    gA = torch.zeros(10, 24, dtype=torch.bfloat16)
    gB = torch.zeros(3, 24, 5, dtype=torch.bfloat16)
    for g, (lo, hi) in enumerate([(0, 3), (3, 3), (3, 9)]):
        if hi > lo:
            gA[lo:hi] = _ref(dy[lo:hi], B.detach()[g].t(), spec)
            gB[g] = _ref(A.detach()[lo:hi].t(), dy[lo:hi], spec)
    assert same(A.grad, gA) and same(B.grad, gB)


def test_grouped_mm_out_dtype_float32_and_errors():
    A, B, offs, _ = _layouts()["2d3d"]
    with emulate("sm90"):
        y = torch._grouped_mm(A, B, offs=offs, out_dtype=torch.float32)
        assert y.dtype == torch.float32
        assert same(y[0:3], tme.emulated_mm(A[0:3], B[0], arch="sm90"))
        with pytest.raises(ValueError, match="offs is needed"):
            torch._grouped_mm(A, B)
        with pytest.raises(ValueError, match="non-decreasing"):
            torch._grouped_mm(A, B, offs=torch.tensor([5, 2, 9], dtype=torch.int32))
        with pytest.raises(ValueError, match="3 groups|groups"):
            torch._grouped_mm(A, B, offs=torch.tensor([5, 9], dtype=torch.int32))


def test_scaled_grouped_mm_rowwise_equals_scaled_mm_per_group():
    torch.manual_seed(0)
    M, K, N, G = 12, 64, 16, 3
    A = (torch.randn(M, K) * 4).to(torch.float8_e4m3fn)
    B = (torch.randn(G, N, K) * 4).to(torch.float8_e4m3fn).transpose(-2, -1)  # column-major
    sa, sb = torch.rand(M) + 0.5, torch.rand(G, N) + 0.5
    offs = torch.tensor([5, 5, 12], dtype=torch.int32)
    with BelowSpy() as spy, emulate("H100", record=True) as em:
        y = torch._scaled_grouped_mm(A, B, sa, sb, offs=offs, out_dtype=torch.bfloat16)
    assert not spy.escaped, spy.escaped
    ref = torch.zeros(M, N, dtype=torch.bfloat16)
    with emulate("H100"):
        for g, (lo, hi) in enumerate([(0, 5), (5, 5), (5, 12)]):
            if hi > lo:
                ref[lo:hi] = torch._scaled_mm(A[lo:hi], B[g], sa[lo:hi, None], sb[g][None],
                                              out_dtype=torch.bfloat16)
    assert same(y, ref)
    assert all(r.kind == "scaled_mm" and r.emulated for r in em.records)
    assert len(em.records) == 2                               # the two non-empty groups
    with pytest.raises(ValueError, match="not modelled"):
        with emulate("H100"):
            torch._scaled_grouped_mm(A, B, sa.to(torch.float8_e8m0fnu),
                                     sb.to(torch.float8_e8m0fnu), offs=offs)


def test_report_fp64_reference_runs_grouped_products():
    class Experts(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(rnd(3, 24, 5, seed=2))

        def forward(self, x):
            return torch._grouped_mm(x, self.w, offs=OFFS)
    m = Experts()
    with emulate("sm90", record=True) as em:
        m(rnd(10, 24, seed=1))
    rep = em.report("fp64")
    assert rep.rows and rep.rows[-1].products == 1 and rep.rows[-1].max_abs < 0.1


# -- transformers' Mixtral: grouped_mm experts (and the custom-op fallback) ----------------
def _mixtral(impl: str):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.MixtralConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
        num_experts_per_tok=2, max_position_embeddings=32)
    cfg._experts_implementation = impl
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.MixtralForCausalLM(cfg).to(torch.bfloat16).eval()
    return model


@pytest.mark.parametrize("mode", ["train", "no_grad", "inference_mode"])
def test_mixtral_grouped_mm_experts_emulated(mode):
    model = _mixtral("grouped_mm")
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))
    spec = coarse()
    with BelowSpy() as spy, _ctx(mode), emulate(spec, record=True) as em:
        out = model(ids).logits
        if mode == "train":
            out.float().logsumexp(-1).sum().backward()
    assert not spy.escaped, spy.escaped
    assert em.recorder.native_count == 0, [r for r in em.records if not r.emulated]
    grouped = [r for r in em.records if r.kind == "grouped_mm"]
    assert len(grouped) >= (2 if mode != "train" else 6)
    assert all(r.format == "custom(sm90)" or r.emulated for r in grouped)
    rep = em.report("fp64")                                  # no crash on _grouped_mm
    assert any(r.products for r in rep.rows)
