"""SDPA under ``emulate`` models the kernel the *target* GPU would run (sdpa_target.py), not
this CPU's choice: a mask that requires grad or a value head dim unlike the query's sends
PyTorch's CPU to its fp32 math path, while a GPU runs a fused kernel in the input dtype."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from torch_mma_emu.preview import emulate
from torch_mma_emu.preview.sdpa_target import gpu_choice
from helpers import rnd, same
from spy_below import BelowSpy, coarse

MODES = ("train", "no_grad", "inference_mode", "autocast")


def _ctx(mode):
    return {"no_grad": torch.no_grad(), "inference_mode": torch.inference_mode(),
            "autocast": torch.autocast("cpu", dtype=torch.bfloat16)}.get(mode,
                                                                         torch.enable_grad())


def _run(arch, q, k, v, mask=None, mode="train", **kw):
    with BelowSpy() as spy, _ctx(mode), emulate(arch, record=True) as em:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
    return out, em, spy


def _qkv(dv=8, dtype=torch.bfloat16, grad=False):
    q, k = rnd(2, 2, 5, 8, dtype=dtype), rnd(2, 2, 6, 8, dtype=dtype, seed=1)
    v = rnd(2, 2, 6, dv, dtype=dtype, seed=2)
    if grad:
        for t in (q, k, v):
            t.requires_grad_()
    return q, k, v


@pytest.mark.parametrize("mode", MODES)
def test_mask_requiring_grad_gives_the_fused_kernels_bits_in_every_mode(mode):
    spec = coarse()
    q, k, v = _qkv(grad=mode == "train")
    bias = rnd(5, 6, seed=3).requires_grad_()
    out, em, spy = _run(spec, q, k, v, bias, mode)
    ref, _, _ = _run(spec, q.detach(), k.detach(), v.detach(), bias.detach(), "no_grad")
    assert same(out, ref)                         # the grad mode does not change the bits
    assert not spy.escaped, spy.escaped
    assert [r.kind for r in em.records] == ["attention"]
    assert em.records[0].emulated and "flash form" in em.records[0].note
    assert not any(r.kind == "bmm" for r in em.records)      # no fp32 math path


def test_mask_gradient_and_qkv_gradients_of_the_fused_form():
    spec = coarse()
    q, k, v = _qkv(grad=True)
    bias = rnd(1, 2, 5, 6, seed=3).requires_grad_()
    g = rnd(2, 2, 5, 8, seed=4)
    with BelowSpy() as spy, emulate(spec, record=True) as em:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        out.backward(g)
    grads = [t.grad.clone() for t in (q, k, v)]
    assert not spy.escaped, spy.escaped
    assert bias.grad is not None and bias.grad.shape == bias.shape
    assert torch.isfinite(bias.grad).all() and bias.grad.abs().sum() > 0
    # q, k, v gradients equal those of the same attention with a constant mask (the CPU's
    # flash kernel, emulated by the dispatch mode)
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    with emulate(spec):
        F.scaled_dot_product_attention(q2, k2, v2, attn_mask=bias.detach()).backward(g)
    assert all(same(a, b.grad) for a, b in zip(grads, (q2, k2, v2)))
    assert [r.phase for r in em.records] == ["forward", "backward"]


@pytest.mark.parametrize("mode", MODES)
def test_value_head_dim_unlike_the_querys_runs_fused_in_the_input_dtype(mode):
    spec = coarse()
    q, k, v = _qkv(dv=16, grad=mode == "train")
    out, em, spy = _run(spec, q, k, v, None, mode, is_causal=True)
    assert out.shape[-1] == 16 and out.dtype == torch.bfloat16
    assert not spy.escaped, spy.escaped
    assert [r.kind for r in em.records] == ["attention"]
    assert "efficient" in em.records[0].note or "cudnn" in em.records[0].note
    ref, _, _ = _run(spec, q.detach(), k.detach(), v.detach(), None, "no_grad",
                     is_causal=True)
    assert same(out, ref)


def test_no_fused_kernel_on_the_target_runs_the_math_path():
    q, k, v = _qkv()
    # bf16 on sm75: flash and cuDNN need sm80, the efficient kernel takes bf16 from sm80
    assert not gpu_choice("sm75", q, k, v, None, 0.0, False, False).fused
    assert gpu_choice("sm80", q, k, v, None, 0.0, False, False).kernel == "flash"
    with BelowSpy() as spy, emulate("sm75", record=True) as em:
        F.scaled_dot_product_attention(q, k, v)
    assert not spy.escaped
    assert {r.kind for r in em.records} == {"bmm"} and all(r.emulated for r in em.records)
    assert {r.format for r in em.records} == {"fp32"}      # the math path's fp32 upcast
    # MI100 (gfx908): no AOTriton kernel; gfx942: none with a mask and GQA
    assert not gpu_choice("gfx908", q, k, v, None, 0.0, False, False).fused
    kq = k[:, :1]
    assert not gpu_choice("gfx942", q, kq, v[:, :1], rnd(5, 6), 0.0, False, True).fused
    assert gpu_choice("sm90", q, kq, v[:, :1], rnd(5, 6), 0.0, False, True).kernel == "cudnn"


def test_selection_table_corner_cases():
    q, k, v = _qkv()
    # 3-D inputs: every fused kernel takes 4-D only (the GPU runs the math path too)
    assert not gpu_choice("sm90", q[0], k[0], v[0], None, 0.0, False, False).fused
    # causal with Lq != Lk: not flash; a fused kernel still
    assert gpu_choice("sm90", q, k, v, None, 0.0, True, False).kernel != "flash"
    # head dim 200 in training on sm86: flash refuses, memory-efficient takes it
    qb, kb, vb = (t.new_zeros(*t.shape[:-1], 200).requires_grad_() for t in (q, k, v))
    assert gpu_choice("sm86", qb, kb, vb, None, 0.0, False, False).kernel == "efficient"
    assert gpu_choice("sm90", qb, kb, vb, None, 0.0, False, False).kernel == "flash"
    # fp32: the memory-efficient kernel
    q32, k32, v32 = (t.float() for t in (q, k, v))
    assert gpu_choice("sm90", q32, k32, v32, None, 0.0, False, False).kernel == "efficient"
    # the user's backend switches are respected
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        assert not gpu_choice("sm90", q, k, v, None, 0.0, False, False).fused
