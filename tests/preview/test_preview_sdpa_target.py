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


# ------------------------------------------------------------------ under torch.compile

def _compiled_case(backend, arch, case, mode="train"):
    """One SDPA call (+ backward in train) eager or compiled; (out, grads, em, spy)."""
    dv, gqa, p = case.get("dv", 8), case.get("gqa", False), case.get("p", 0.0)
    q, m = rnd(2, 2, 5, 8), rnd(1, 1, 5, 6, seed=3)
    k, v = rnd(2, 1 if gqa else 2, 6, 8, seed=1), rnd(2, 1 if gqa else 2, 6, dv, seed=2)
    ts = [q, k, v, m]
    if mode == "train":
        ts = [t.clone().requires_grad_() for t in ts]

    def fn(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, dropout_p=p,
                                              enable_gqa=gqa)
    if backend != "eager":
        torch._dynamo.reset()
        fn = torch.compile(fn, backend=backend, fullgraph=True)
    with BelowSpy() as spy, _ctx(mode), emulate(arch, record=True) as em:
        torch.manual_seed(0)
        out = fn(*ts)
        if mode == "train":
            out.backward(rnd(*out.shape, seed=9))
    return out.detach(), [t.grad for t in ts if t.grad is not None], em, spy


CASES = {"mask requiring grad": {}, "value head dim 16": {"dv": 16},
         "gqa and mask grad": {"gqa": True}, "dropout": {"p": 0.25}}


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("case", list(CASES))
def test_compiled_sdpa_follows_the_target_with_eagers_bits(case, backend):
    """Under torch.compile the call is routed as in eager code (the router, which Dynamo
    traces, puts the target's op in the graph): the same bits, forward and backward (mask
    gradient too), and no fp32 math-path product."""
    spec = coarse()
    ref, ref_grads, _, _ = _compiled_case("eager", spec, CASES[case])
    out, grads, em, spy = _compiled_case(backend, spec, CASES[case])
    assert same(out, ref) and len(grads) == len(ref_grads) == 4
    assert all(same(a, b) for a, b in zip(grads, ref_grads))
    assert not spy.escaped, spy.escaped
    assert {r.kind for r in em.records if r.product} == {"attention"}
    assert all(r.emulated for r in em.records)
    assert all("flash form" in r.note for r in em.records if r.product)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_sdpa_without_a_fused_kernel_on_the_target_runs_the_math_path(backend):
    """sm75 has no fused bf16 kernel: PyTorch's math path (fp32 bmm), though this CPU's flash
    kernel takes the call; compiled as eager."""
    ref, _, _, _ = _compiled_case("eager", "sm75", {}, mode="no_grad")
    out, _, em, spy = _compiled_case(backend, "sm75", {}, mode="no_grad")
    assert same(out, ref) and not spy.escaped
    assert {(r.kind, r.format) for r in em.records if r.product} == {("bmm", "fp32")}


def test_code_compiled_for_one_arch_is_recompiled_for_another():
    q, k, v = _qkv(dv=16)
    f = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                      backend="aot_eager")
    torch._dynamo.reset()
    for arch, kind in (("sm90", "attention"), ("sm75", "bmm"), ("sm90", "attention")):
        with torch.no_grad(), emulate(arch, record=True) as em:
            f(q, k, v)
        assert {r.kind for r in em.records if r.product} == {kind}, (arch, em.summary())


def test_backward_after_the_block_is_still_emulated():
    """The routed op's backward has no CPU kernel: eager code carries the mode with the
    autograd node, so a ``.backward()`` after the block closes is emulated too."""
    spec = coarse()
    q, k, v = _qkv(grad=True)
    bias = rnd(5, 6, seed=3).requires_grad_()
    g = rnd(2, 2, 5, 8, seed=4)
    with emulate(spec):
        F.scaled_dot_product_attention(q, k, v, attn_mask=bias).backward(g)
    inside = [t.grad.clone() for t in (q, k, v, bias)]
    for t in (q, k, v, bias):
        t.grad = None
    with emulate(spec):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    out.backward(g)
    assert all(same(a, t.grad) for a, t in zip(inside, (q, k, v, bias)))
