"""flex_attention under ``emulate``: forward and backward in the GPU kernels' form (flex.py),
eager and compiled (``aot_eager``, and Inductor: while a block is open a graph holding flex
attention is compiled as ``aot_eager``, preview/patches.py), with grad enabled on CPU too
(PyTorch refuses CPU inputs that require grad; the GPU being previewed has the backward)."""
from __future__ import annotations

import warnings

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu.preview import emulate
from torch_mma_emu.preview.patches import holds_flex
from helpers import rnd, same
from spy_below import BelowSpy, coarse

flex = pytest.importorskip("torch.nn.attention.flex_attention")
RCP_LN2 = torch.tensor(1.44269504)


def _bias(score, b, h, q_idx, kv_idx):
    return score + (q_idx - kv_idx) * 0.125


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def _mask(L, T):
    return torch.arange(L).view(-1, 1) >= torch.arange(T).view(1, -1)


def _post(S, L, T):
    """score_mod and mask_mod of the tests on fp32 scores, in base-2 units."""
    i = torch.arange(L).view(-1, 1)
    j = torch.arange(T).view(1, -1)
    S = S + (i - j) * 0.125
    return torch.where(_mask(L, T), S, torch.tensor(float("-inf"))) * RCP_LN2


def _reference(q, k, v, spec, scale):
    """flex.py's forward written out with emulated_mm (no GQA): ``(out, lse base 2)``."""
    S = tme.emulated_mm(q, k.transpose(-2, -1), arch=spec) * scale
    post = _post(S, *S.shape[-2:])
    m = post.amax(-1, keepdim=True)
    P = torch.exp2(post - m)
    l = P.sum(-1, keepdim=True)
    out = (tme.emulated_mm(P.to(q.dtype), v, arch=spec) / l).to(q.dtype)
    return out, (m + torch.log2(l)).squeeze(-1)


def _reference_grads(q, k, v, dO, spec, scale):
    """The Triton backward kernels' formulas (flex.py) written out, no GQA."""
    def mm(a, b):
        return tme.emulated_mm(a, b, arch=spec)
    out, lse = _reference(q, k, v, spec, scale)
    S = mm(q, k.transpose(-2, -1)) * scale
    P = torch.exp2(_post(S, *S.shape[-2:]) - lse.unsqueeze(-1))
    D = (out.float() * dO.float()).sum(-1, keepdim=True).to(q.dtype).float()
    dS = P * (mm(dO, v.transpose(-2, -1)) - D)          # score_mod's gradient: identity
    dS = torch.where(_mask(*S.shape[-2:]), dS, torch.zeros(())).to(q.dtype)
    dq = (mm(dS, k) * scale).to(q.dtype)
    dk = (mm(dS.transpose(-2, -1), q) * scale).to(q.dtype)
    dv = mm(P.to(q.dtype).transpose(-2, -1), dO).to(q.dtype)
    return dq, dk, dv


def _flex_fn(backend):
    if backend == "eager":
        return flex.flex_attention
    torch._dynamo.reset()
    return torch.compile(flex.flex_attention, backend=backend, fullgraph=True)


def _call(f, q, k, v, **kw):
    bm = flex.create_block_mask(_causal, None, None, q.shape[2], k.shape[2], device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # "flex_attention called without compile"
        return f(q, k, v, score_mod=_bias, block_mask=bm, scale=0.3, **kw)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "autocast"])
def test_eager_flex_forward_is_emulated_in_the_kernels_form(mode):
    spec = coarse()
    q, k, v = (rnd(1, 2, 8, 16, seed=s) for s in range(3))
    ctx = {"no_grad": torch.no_grad(), "inference_mode": torch.inference_mode(),
           "autocast": torch.autocast("cpu", dtype=torch.bfloat16)}[mode]
    with BelowSpy() as spy, ctx, emulate(spec, record=True) as em:
        out = _call(flex.flex_attention, q, k, v)
    assert same(out, _reference(q, k, v, spec, 0.3)[0])
    assert not spy.escaped, spy.escaped
    prods = [r for r in em.records if r.product]        # (the block mask's arange: a kernel)
    assert [(r.kind, r.emulated) for r in prods] == [("attention", True)]
    assert "flex" in prods[0].note


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "inductor"])
def test_forward_and_backward_with_grad_on_cpu(backend):
    """Grad enabled on CPU inputs (PyTorch alone refuses them): forward and backward are
    emulated, bit for bit the kernels' formulas, eager and compiled alike."""
    spec = coarse()
    q, k, v = (rnd(1, 2, 16, 16, seed=s).requires_grad_() for s in range(3))
    g = rnd(1, 2, 16, 16, seed=7)
    f = _flex_fn(backend)
    with BelowSpy() as spy, emulate(spec, record=True) as em:
        out = _call(f, q, k, v)
        out.backward(g)
    assert not spy.escaped, spy.escaped
    assert spy.emulated > 0
    assert sorted((r.op, r.phase, r.emulated) for r in em.records if r.product) == [
        ("flex_attention", "forward", True), ("flex_attention_backward", "backward", True)]
    assert same(out.detach(), _reference(q.detach(), k.detach(), v.detach(), spec, 0.3)[0])
    ref = _reference_grads(q.detach(), k.detach(), v.detach(), g, spec, 0.3)
    assert all(same(t.grad, r) for t, r in zip((q, k, v), ref))


def test_inductor_compiled_flex_is_emulated_without_a_warning():
    """What transformers' attn_implementation="flex_attention" calls:
    ``torch.compile(flex_attention)`` with Inductor, under no_grad."""
    spec = coarse()
    q, k, v = (rnd(1, 2, 16, 16, seed=s) for s in range(3))
    f = _flex_fn("inductor")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with BelowSpy() as spy, torch.no_grad(), emulate(spec, record=True) as em:
            out = _call(f, q, k, v)
    assert same(out, _reference(q, k, v, spec, 0.3)[0])
    assert not spy.escaped and em.recorder.native_count == 0
    assert em.recorder.emulated_count == 1


def test_lse_and_its_gradient():
    """``return_aux=AuxRequest(lse=True)``: the lse (natural log, as the API returns it) and
    a loss that depends on it (the kernel folds d lse into its D term)."""
    spec = coarse()
    q, k, v = (rnd(1, 2, 8, 16, seed=s).requires_grad_() for s in range(3))
    with BelowSpy() as spy, emulate(spec, record=True) as em:
        out, aux = _call(flex.flex_attention, q, k, v, return_aux=flex.AuxRequest(lse=True))
        (out.float().sum() + aux.lse.sum()).backward()
    assert not spy.escaped
    _, lse2 = _reference(q.detach(), k.detach(), v.detach(), spec, 0.3)
    assert torch.allclose(aux.lse.detach(), lse2 * torch.log(torch.tensor(2.0)), rtol=1e-6)
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    assert em.recorder.emulated_count == 2


def _gqa_inputs(dtype, bkv=2, h=(4, 2), L=6, T=5, d=8):
    q = torch.randn(2, h[0], L, d, dtype=dtype, requires_grad=True)
    k = torch.randn(bkv, h[1], T, d, dtype=dtype, requires_grad=True)
    v = torch.randn(bkv, h[1], T, d, dtype=dtype, requires_grad=True)
    return q, k, v


@pytest.mark.parametrize("bkv", [2, 1])
def test_gradients_match_finite_differences_on_the_fp64_path(bkv):
    """GQA, a K / V batch broadcast over the query batch, a score_mod with a captured tensor
    that requires grad (its gradient comes from the joint graph): gradcheck on the fp64
    path (the arch's fp64 FMA chain) checks every gradient of the emulated backward."""
    torch.manual_seed(0)
    q, k, v = _gqa_inputs(torch.float64, bkv=bkv, h=(2, 1), L=4, T=3, d=2)
    table = torch.randn(3, dtype=torch.float64, requires_grad=True)     # per key position

    def score_mod(score, b, h, q_idx, kv_idx):
        return score * 0.5 + table[kv_idx] + (q_idx - kv_idx) * 0.1

    def run(q, k, v, table_):
        bm = flex.create_block_mask(_causal, 2, None, 4, 3, device="cpu")
        with emulate("sm90"):
            return flex.flex_attention(q, k, v, score_mod=score_mod, block_mask=bm,
                                       enable_gqa=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.autograd.gradcheck(lambda q, k, v: run(q, k, v, table), (q, k, v))
        run(q, k, v, table).sum().backward()
    assert table.grad is not None and table.grad.abs().sum() > 0.1
    # the captured tensor's gradient: the same as PyTorch's math backward (no block open)
    q2, k2, v2 = (t.detach() for t in (q, k, v))
    tab2 = table.detach().clone().requires_grad_()

    def score_mod2(score, b, h, q_idx, kv_idx):
        return score * 0.5 + tab2[kv_idx] + (q_idx - kv_idx) * 0.1
    from torch._higher_order_ops.flex_attention import math_attention
    bm = flex.create_block_mask(_causal, 2, None, 4, 3, device="cpu")
    out, _, _ = math_attention(q2, k2, v2, score_mod2, bm.as_tuple(), 1 / 2 ** 0.5, {})
    out.sum().backward()
    # (to the Triton templates' 1/ln 2 constant, 1.44269504)
    assert torch.allclose(table.grad, tab2.grad, rtol=1e-6, atol=1e-9)
    assert not torch.equal(table.grad, torch.zeros_like(table.grad))


def test_gqa_key_gradient_is_one_product_over_the_query_heads():
    """A K / V head's gradient accumulates over its query heads in one fp32 accumulator
    (the dK / dV kernel's loop): one emulated product over the concatenated positions."""
    spec = coarse()
    q = rnd(1, 4, 8, 16, seed=1).requires_grad_()
    k, v = (rnd(1, 2, 8, 16, seed=s).requires_grad_() for s in (2, 3))
    g = rnd(1, 4, 8, 16, seed=4)
    with emulate(spec):
        out = _call(flex.flex_attention, q, k, v, enable_gqa=True)
        out.backward(g)
    # per query head: the no-GQA formulas; dK of a K head = one product over both q heads
    ke, ve = (t.detach().repeat_interleave(2, dim=1) for t in (k, v))
    dq, _, _ = _reference_grads(q.detach(), ke, ve, g, spec, 0.3)
    assert same(q.grad, dq)
    S = tme.emulated_mm(q.detach(), ke.transpose(-2, -1), arch=spec) * 0.3
    out_r, lse = _reference(q.detach(), ke, ve, spec, 0.3)
    P = torch.exp2(_post(S, 8, 8) - lse.unsqueeze(-1))
    D = (out_r.float() * g.float()).sum(-1, keepdim=True).to(torch.bfloat16).float()
    dS = P * (tme.emulated_mm(g, ve.transpose(-2, -1), arch=spec) - D)
    dS = torch.where(_mask(8, 8), dS, torch.zeros(())).to(torch.bfloat16)
    dsT = dS.reshape(1, 2, 16, 8).transpose(-2, -1)           # (B, Hkv, T, G * L)
    dk = (tme.emulated_mm(dsT, q.detach().reshape(1, 2, 16, 16), arch=spec) * 0.3)
    assert same(k.grad, dk.to(torch.bfloat16))


def test_backward_close_to_pytorchs_math_backward_with_an_fp32_chain():
    """Differential check against PyTorch's autograd of the same attention written densely
    (no block; torch's private sdpa_dense_backward changed its signature between 2.11 and
    2.13): fp32 inputs on an fp32 FMA chain agree to fp32 rounding."""
    torch.manual_seed(1)
    q, k, v = _gqa_inputs(torch.float32)
    g = torch.randn(2, 4, 6, 8)
    bm = flex.create_block_mask(_causal, None, None, 6, 5, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with emulate("sm90", fp32_format="fp32"):
            flex.flex_attention(q, k, v, score_mod=_bias, block_mask=bm,
                                enable_gqa=True).backward(g)
    ours = [t.grad.clone() for t in (q, k, v)]
    qd, kd, vd = (t.detach().clone().requires_grad_() for t in (q, k, v))
    rep = qd.shape[1] // kd.shape[1]
    kx, vx = kd.repeat_interleave(rep, 1), vd.repeat_interleave(rep, 1)
    S = _post(qd @ kx.transpose(-2, -1) * (1 / 8 ** 0.5), 6, 5) / RCP_LN2
    (torch.softmax(S, -1) @ vx).backward(g)
    for a, b in zip(ours, (qd.grad, kd.grad, vd.grad)):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), (a - b).abs().max()


def test_outside_a_block_pytorchs_cpu_refusal_stands():
    q = rnd(1, 1, 8, 16, dtype=torch.float32).requires_grad_()
    with emulate("sm90"):
        pass
    with pytest.raises(NotImplementedError, match="backward on CPU"):
        flex.flex_attention(q, q, q)


def test_holds_flex_finds_the_operator_in_subgraphs():
    gm = torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
    assert not holds_flex(gm)
    outer = torch.nn.Module()
    inner = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    x = inner.graph.placeholder("x")
    inner.graph.output(inner.graph.call_function(torch.ops.higher_order.flex_attention,
                                                 (x,)))
    outer.sub = inner
    assert holds_flex(outer) and not holds_flex(object())


def test_the_router_is_never_compiled_as_a_frame_of_its_own():
    """Where Dynamo runs a frame eagerly with its callback on, it used to compile the
    router's ``__torch_function__`` and serve one call's constant answer to the next
    (``q.dim()`` -> False: flex attention's "query.dim: False" error with grad on)."""
    def f(q):
        return q.is_nested, q.dim(), q.requires_grad, q.dtype
    torch._dynamo.eval_frame.skip_code(f.__code__)     # Dynamo runs f itself eagerly
    q = torch.zeros(2, 3, 4)
    torch._dynamo.reset()
    with emulate("sm90"):
        assert torch.compile(f, backend="eager")(q) == (False, 3, False, torch.float32)


@pytest.mark.slow
def test_flex_compiled_by_inductor_before_the_block_is_recompiled_inside_it(monkeypatch):
    """Inductor's own flex kernel, compiled outside any block, is not reused inside one
    (Dynamo guards on the router): it is recompiled as aot_eager and emulated.  Should
    Inductor's flex lowering run inside a block all the same, it is recorded and warned."""
    spec = coarse()
    q, k, v = (rnd(1, 2, 16, 16, seed=s) for s in range(3))
    f = _flex_fn("inductor")
    with torch.no_grad():
        native = _call(f, q, k, v)                      # Inductor's C++ flex kernel
    with torch.no_grad(), emulate(spec, record=True) as em:
        out = _call(f, q, k, v)
    assert same(out, _reference(q, k, v, spec, 0.3)[0]) and not same(out, native)
    assert em.recorder.native_count == 0 and em.recorder.emulated_count == 1
    from torch_mma_emu.preview import patches
    monkeypatch.setattr(patches, "holds_flex", lambda gm: False)
    f = _flex_fn("inductor")
    with pytest.warns(UserWarning, match="flex_attention.*not emulated"):
        with torch.no_grad(), emulate(spec, record=True) as em:
            f(q, k, v, score_mod=_bias)
    assert any("flex_attention" in r.op and not r.emulated for r in em.records)
