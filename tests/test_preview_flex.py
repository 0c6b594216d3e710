"""flex_attention under ``emulate``: the forward in the GPU kernel's form (flex.py), eager
and compiled with aot_eager; Inductor-compiled flex is recorded as native and warned about
by name.  (PyTorch has no flex-attention backward on the CPU.)"""
from __future__ import annotations

import warnings

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu.preview import emulate
from helpers import rnd, same
from spy_below import BelowSpy, coarse

flex = pytest.importorskip("torch.nn.attention.flex_attention")


def _bias(score, b, h, q_idx, kv_idx):
    return score + (q_idx - kv_idx) * 0.125


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def _reference(q, k, v, spec, scale):
    """flex.py's formulas written out with emulated_mm (one head group, no GQA)."""
    S = tme.emulated_mm(q, k.transpose(-2, -1), arch=spec) * scale
    L, T = S.shape[-2:]
    i = torch.arange(L).view(-1, 1)
    j = torch.arange(T).view(1, -1)
    S = S + (i - j) * 0.125
    S = torch.where(i >= j, S, torch.tensor(float("-inf"))) * torch.tensor(1.44269504)
    m = S.amax(-1, keepdim=True)
    P = torch.exp2(S - m)
    l = P.sum(-1, keepdim=True)
    return (tme.emulated_mm(P.to(q.dtype), v, arch=spec) / l).to(q.dtype)


def _call(q, k, v, compiled=False):
    bm = flex.create_block_mask(_causal, None, None, q.shape[2], k.shape[2], device="cpu")
    f = flex.flex_attention
    if compiled:
        f = torch.compile(f, backend="aot_eager", fullgraph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # "flex_attention called without compile"
        return f(q, k, v, score_mod=_bias, block_mask=bm, scale=0.3)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "autocast"])
def test_eager_flex_forward_is_emulated_in_the_kernels_form(mode):
    spec = coarse()
    q, k, v = (rnd(1, 2, 8, 16, seed=s) for s in range(3))
    ctx = {"no_grad": torch.no_grad(), "inference_mode": torch.inference_mode(),
           "autocast": torch.autocast("cpu", dtype=torch.bfloat16)}[mode]
    with BelowSpy() as spy, ctx, emulate(spec, record=True) as em:
        out = _call(q, k, v)
    assert same(out, _reference(q, k, v, spec, 0.3))
    assert not spy.escaped, spy.escaped
    assert [(r.kind, r.emulated) for r in em.records] == [("attention", True)]
    assert "flex" in em.records[0].note


def test_flex_compiled_with_aot_eager_is_emulated():
    spec = coarse()
    q, k, v = (rnd(1, 2, 8, 16, seed=s) for s in range(3))
    with BelowSpy() as spy, torch.no_grad(), emulate(spec, record=True) as em:
        out = _call(q, k, v, compiled=True)
    assert same(out, _reference(q, k, v, spec, 0.3))
    assert not spy.escaped, spy.escaped
    assert em.recorder.emulated_count == 1 and em.recorder.native_count == 0


@pytest.mark.slow
def test_inductor_compiled_flex_is_recorded_and_warned():
    q, k, v = (rnd(1, 2, 16, 16, seed=s) for s in range(3))
    f = torch.compile(lambda q, k, v: flex.flex_attention(q, k, v, score_mod=_bias))
    with pytest.warns(UserWarning, match="flex_attention.*not emulated"):
        with torch.no_grad(), emulate("sm90", record=True) as em:
            try:
                f(q, k, v)
            except Exception as e:          # noqa: BLE001 - CPU template unsupported here
                pytest.skip(f"Inductor cannot compile flex attention here: {e}")
    assert any("flex_attention" in r.op and not r.emulated for r in em.records)
