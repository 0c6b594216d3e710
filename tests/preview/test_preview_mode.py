"""emulate(): every routed op equals emulated_mm on the same operands; the rest stays native;
state is restored; formats follow PyTorch's settings; errors say what is allowed."""
import math

import pytest
import torch
import torch.nn.functional as F

import torch_mma_emu as tme
from torch_mma_emu.preview import aten_math, emulate
from helpers import rnd, same

aten = torch.ops.aten


def emm(A, B, C=None, arch="sm90", **kw):
    return tme.emulated_mm(A, B, C, arch=arch, **kw)


# ------------------------------------------------------------------------ mm family

@pytest.mark.parametrize("arch,dtype", [("sm90", torch.bfloat16), ("gfx942", torch.float16),
                                        ("sm70", torch.float16), ("gfx90a", torch.bfloat16),
                                        ("sm80", torch.float64)])
def test_mm_equals_emulated_mm_rounded_to_input_dtype(arch, dtype):
    A, B = rnd(7, 40, dtype=dtype), rnd(40, 5, dtype=dtype, seed=1)
    with emulate(arch, record=True) as em:
        D = torch.mm(A, B)
        D2 = A @ B
    ref = emm(A, B, arch=arch).to(dtype)
    assert same(D, ref) and same(D2, ref)
    label = {torch.float64: "fp64", torch.float16: "fp16", torch.bfloat16: "bf16"}[dtype]
    assert dict(em.counts) == {("aten.mm.default", "forward", label): 2}


def test_emulation_is_not_native():
    # gfx90a flushes fp16 subnormal inputs: a product of subnormals is 0 there, not natively
    A = torch.full((2, 8), 2.0 ** -20, dtype=torch.float16)
    B = torch.full((8, 2), 2.0 ** 10, dtype=torch.float16)
    native = torch.mm(A, B)
    with emulate("gfx90a"):
        D = torch.mm(A, B)
    assert native.abs().min() > 0 and torch.count_nonzero(D) == 0
    with emulate("sm80"):
        assert same(torch.mm(A, B), emm(A, B, arch="sm80").to(torch.float16))


@pytest.mark.parametrize("bias_mode", ["epilogue", "chain"])
def test_addmm_bias_modes(bias_mode):
    A, B = rnd(6, 33), rnd(33, 4, seed=1)
    bias = rnd(4, seed=2, scale=100.0)
    with emulate("sm90", bias=bias_mode):
        D = torch.addmm(bias, A, B)
        L = F.linear(A, B.t(), bias)
    ref = emm(A, B, bias.float().expand(6, 4), c_mode=bias_mode).to(torch.bfloat16)
    assert same(D, ref) and same(L, ref)


def test_bias_modes_differ_somewhere():
    # the chain truncates the bias with the products; the epilogue adds it exactly once
    g = torch.Generator().manual_seed(3)
    A = torch.randn(64, 16, generator=g).to(torch.bfloat16)
    B = torch.randn(16, 64, generator=g).to(torch.bfloat16)
    bias = (torch.randn(64, generator=g) * 1e3).to(torch.bfloat16)
    with emulate("sm90", bias="chain"):
        Dc = aten.addmm.dtype(bias, A, B, torch.float32)
    with emulate("sm90", bias="epilogue"):
        De = aten.addmm.dtype(bias, A, B, torch.float32)
    assert same(Dc, emm(A, B, bias.float().expand(64, 64)))
    assert not same(Dc, De)


def test_addmm_alpha_beta_and_beta_zero():
    A, B = rnd(5, 24), rnd(24, 3, seed=1)
    C = rnd(5, 3, seed=2)
    with emulate("sm80"):
        D = torch.addmm(C, A, B, beta=0.5, alpha=3.0)
        Z = torch.addmm(torch.full((5, 3), float("nan"), dtype=torch.bfloat16), A, B, beta=0)
    acc = emm(A, B, arch="sm80")
    assert same(D, (acc * 3.0 + C.float() * 0.5).to(torch.bfloat16))
    assert same(Z, acc.to(torch.bfloat16))  # beta = 0 ignores C, NaN included
    with emulate("sm80", bias="chain"):
        with pytest.raises(ValueError, match="alpha"):
            torch.addmm(C, A, B, alpha=2.0)


def test_bmm_baddbmm_einsum_matmul():
    A, B = rnd(3, 4, 20), rnd(3, 20, 6, seed=1)
    C = rnd(3, 4, 6, seed=2)
    with emulate("gfx942", record=True) as em:
        D1 = torch.bmm(A, B)
        D2 = torch.baddbmm(C, A, B)
        D3 = torch.einsum("bik,bkj->bij", A, B)
        D4 = torch.matmul(A.unsqueeze(0), B)          # broadcast matmul -> bmm
    acc = emm(A, B, arch="gfx942")
    assert same(D1, acc.to(torch.bfloat16))
    assert same(D2, emm(A, B, C.float(), arch="gfx942", c_mode="epilogue").to(torch.bfloat16))
    assert same(D3, D1) and same(D4[0], D1)
    ops = {op for (op, _, _) in em.counts}
    assert {"aten.bmm.default", "aten.baddbmm.default"} <= ops


def test_out_inplace_and_dtype_overloads():
    A, B = rnd(4, 16), rnd(16, 8, seed=1)
    C = rnd(4, 8, seed=2)
    out = torch.empty(4, 8, dtype=torch.bfloat16)
    with emulate("sm90", record=True) as em:
        r = torch.mm(A, B, out=out)
        C2 = C.clone()
        C2.addmm_(A, B)
        Dd = aten.mm.dtype(A, B, torch.float32)
    acc = emm(A, B)
    assert r is out and same(out, acc.to(torch.bfloat16))
    assert same(C2, (acc + C.float()).to(torch.bfloat16))
    assert same(Dd, acc)
    assert {op for (op, _, _) in em.counts} == {"aten.mm.out", "aten.addmm_.default",
                                                "aten.mm.dtype"}


# ------------------------------------------------------------------------ convolution

def _conv_ref(x, w, b, stride, padding, dilation, groups, arch):
    """conv2d from F.unfold (native im2col) + emulated_mm per group, rounded to the input
    dtype, then the bias added in that dtype (PyTorch's output.add_(bias) after cuDNN)."""
    N, _, H, W_ = x.shape
    Co, Cg, kh, kw = w.shape
    cols = F.unfold(x.float(), (kh, kw), dilation, padding, stride).to(x.dtype)
    Ho = (H + 2 * padding - dilation * (kh - 1) - 1) // stride + 1
    Wo = (W_ + 2 * padding - dilation * (kw - 1) - 1) // stride + 1
    cols = cols.view(N, groups, Cg * kh * kw, Ho * Wo)
    ys = []
    for g in range(groups):
        wg = w[g * Co // groups:(g + 1) * Co // groups].reshape(Co // groups, -1)
        ys.append(emm(wg, cols[:, g], arch=arch).to(x.dtype))
    y = torch.cat(ys, 1).view(N, Co, Ho, Wo)
    return y if b is None else y + b.view(1, Co, 1, 1)


@pytest.mark.parametrize("stride,padding,dilation,groups", [(1, 0, 1, 1), (2, 1, 1, 1),
                                                            (1, 2, 2, 1), (2, 1, 1, 2)])
def test_conv2d_equals_emulated_mm_on_im2col(stride, padding, dilation, groups):
    x = rnd(2, 4, 9, 8, dtype=torch.float16)
    w = rnd(6, 4 // groups, 3, 3, dtype=torch.float16, seed=1)
    b = rnd(6, dtype=torch.float16, seed=2)
    with emulate("sm89", record=True) as em:
        y = F.conv2d(x, w, b, stride, padding, dilation, groups)
    assert same(y, _conv_ref(x, w, b, stride, padding, dilation, groups, "sm89"))
    assert list(em.counts) == [("aten.convolution.default", "forward", "fp16")]


@pytest.mark.parametrize("fn,shape_x,shape_w,kw", [
    (F.conv1d, (2, 3, 11), (4, 3, 3), dict(stride=2, padding=1)),
    (F.conv3d, (1, 2, 5, 6, 4), (3, 2, 2, 3, 2), dict(padding=1, dilation=(1, 2, 1))),
    (F.conv_transpose2d, (2, 4, 5, 4), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    (F.conv_transpose2d, (1, 4, 4, 4), (4, 1, 2, 3), dict(stride=(1, 2), groups=2, dilation=2)),
    (F.conv_transpose1d, (2, 2, 7), (2, 3, 4), dict(stride=3, padding=2)),
])
def test_conv_variants_fp64_match_native(fn, shape_x, shape_w, kw):
    x = rnd(*shape_x, dtype=torch.float64)
    w = rnd(*shape_w, dtype=torch.float64, seed=1)
    ref = fn(x, w, **kw)
    with emulate("sm90", record=True) as em:
        y = fn(x, w, **kw)
    assert em.recorder.emulated_count == 1
    assert y.shape == ref.shape
    torch.testing.assert_close(y, ref, rtol=1e-12, atol=1e-12)


def test_conv_transpose_equals_emulated_mm_on_zero_inserted_im2col():
    x = rnd(1, 2, 3, 3, dtype=torch.bfloat16)
    w = rnd(2, 3, 3, 3, dtype=torch.bfloat16, seed=1)   # (Cin, Cout, k, k)
    with emulate("sm80"):
        y = F.conv_transpose2d(x, w, stride=2, padding=1)
    xu = torch.zeros(1, 2, 5, 5, dtype=torch.bfloat16)
    xu[:, :, ::2, ::2] = x
    weq = w.transpose(0, 1).flip(2, 3)                    # (Cout, Cin, k, k)
    ref = _conv_ref(xu, weq, None, 1, 1, 1, 1, "sm80")   # padding k-1-p = 1
    assert same(y, ref)


def test_conv_backward_fp64_matches_native_and_is_emulated():
    x = rnd(2, 4, 7, 6, dtype=torch.float64).requires_grad_()
    w = rnd(6, 2, 3, 2, dtype=torch.float64, seed=1).requires_grad_()
    b = rnd(6, dtype=torch.float64, seed=2).requires_grad_()
    go = rnd(2, 6, 4, 7, dtype=torch.float64, seed=3)
    args = dict(stride=(2, 1), padding=1, groups=2)
    gn = torch.autograd.grad(F.conv2d(x, w, b, **args), (x, w, b), go)
    with emulate("gfx942", record=True) as em:
        ge = torch.autograd.grad(F.conv2d(x, w, b, **args), (x, w, b), go)
    for a, e in zip(gn, ge):
        torch.testing.assert_close(e, a, rtol=1e-12, atol=1e-12)
    assert em.counts[("aten.convolution_backward.default", "backward", "fp64")] == 1


def test_conv_weight_grad_equals_emulated_mm():
    x = rnd(2, 3, 5, 5, dtype=torch.bfloat16)
    w = rnd(4, 3, 3, 3, dtype=torch.bfloat16, seed=1).requires_grad_()
    go = rnd(2, 4, 3, 3, dtype=torch.bfloat16, seed=2)
    with emulate("sm90"):
        (gw,) = torch.autograd.grad(F.conv2d(x, w), (w,), go)
    cols = F.unfold(x.float(), 3).to(torch.bfloat16)                 # (N, 27, 9)
    A = go.reshape(2, 4, 9).permute(1, 0, 2).reshape(4, 18)
    B = cols.permute(0, 2, 1).reshape(18, 27)
    assert same(gw, emm(A, B).to(torch.bfloat16).view(4, 3, 3, 3))


# ------------------------------------------------------------------------ attention

def _attn_ref(q, k, v, scale, arch, causal=False, mask=None):
    S = emm(q, k.transpose(-2, -1), arch=arch) * scale
    if mask is not None:
        S = S + mask.float()
    if causal:
        keep = torch.ones(S.shape[-2:], dtype=torch.bool).tril()
        S = S.masked_fill(~keep, float("-inf"))
    m = S.amax(-1, keepdim=True)
    P = torch.exp(S - m)
    return (emm(P.to(q.dtype), v, arch=arch) / P.sum(-1, keepdim=True)).to(q.dtype)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_equals_flash_form_with_emulated_products(causal):
    q, k, v = (rnd(2, 3, 5, 16, seed=s) for s in range(3))
    with emulate("sm90", record=True) as em:
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert same(o, _attn_ref(q, k, v, 1 / 4, "sm90", causal))
    assert em.recorder.emulated_count == 1


def test_sdpa_float_mask_scale_and_gqa():
    q = rnd(1, 4, 6, 8, dtype=torch.float16)
    k, v = rnd(1, 2, 7, 8, dtype=torch.float16, seed=1), rnd(1, 2, 7, 8, dtype=torch.float16, seed=2)
    mask = rnd(6, 7, dtype=torch.float16, seed=3)
    # (sm90: cuDNN attention takes GQA with a mask; ROCm's fused kernels do not, so on
    # gfx942 PyTorch runs its math path: test_preview_sdpa_target.py)
    with emulate("sm90"):
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3, enable_gqa=True)
    ref = _attn_ref(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), 0.3, "sm90",
                    mask=mask)
    assert same(o, ref)


def test_sdpa_fp64_forward_and_backward_match_native():
    q, k, v = (rnd(2, 2, 6, 8, dtype=torch.float64, seed=s).requires_grad_() for s in range(3))
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    go = rnd(2, 2, 6, 8, dtype=torch.float64, seed=7)
    on = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    gn = torch.autograd.grad(on, (q, k, v), go)
    with emulate("sm80", record=True) as em:
        oe = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        ge = torch.autograd.grad(oe, (q, k, v), go)
    torch.testing.assert_close(oe, on, rtol=1e-12, atol=1e-12)
    for a, e in zip(gn, ge):
        torch.testing.assert_close(e, a, rtol=1e-11, atol=1e-11)
    assert em.recorder.emulated_count == 2 and em.recorder.native_count == 0


def test_sdpa_backward_products_are_emulated():
    q, k, v = (rnd(1, 2, 4, 8, seed=s).requires_grad_() for s in range(3))
    go = rnd(1, 2, 4, 8, seed=5)
    with emulate("sm90"):
        o = F.scaled_dot_product_attention(q, k, v)
        dq, dk, dv = torch.autograd.grad(o, (q, k, v), go)
    S = emm(q, k.transpose(-2, -1)) * (1 / math.sqrt(8))
    lse = torch.logsumexp(S, -1, keepdim=True)
    P = torch.exp(S - S.amax(-1, keepdim=True))
    lse = S.amax(-1, keepdim=True) + torch.log(P.sum(-1, keepdim=True))
    P = torch.exp(S - lse)
    assert same(dv, emm(P.to(torch.bfloat16).transpose(-2, -1), go).to(torch.bfloat16))
    dP = emm(go, v.transpose(-2, -1))
    D = (go.float() * o.float()).sum(-1, keepdim=True)
    dS = (P * (dP - D)).to(torch.bfloat16)
    assert same(dq, (emm(dS, k) * (1 / math.sqrt(8))).to(torch.bfloat16))
    assert same(dk, (emm(dS.transpose(-2, -1), q) * (1 / math.sqrt(8))).to(torch.bfloat16))


def test_cuda_attention_handlers_bind_their_schemas():
    # the CUDA fused kernels cannot run here; their handlers are driven with CPU tensors
    from torch_mma_emu.preview import attention, sdpa_route
    from torch_mma_emu.preview.mode import EmulateMode
    em = emulate("sm90")
    q, k, v = (rnd(1, 2, 4, 8, seed=s) for s in range(3))
    go = rnd(1, 2, 4, 8, seed=4)
    ref = _attn_ref(q, k, v, 1 / math.sqrt(8), "sm90")
    fwd = sdpa_route.handle_forward(em, aten._scaled_dot_product_efficient_attention.default,
                                    (q, k, v, None, True), {})
    assert same(fwd[0], ref) and len(fwd) == 4
    assert fwd[1].shape == (1, 2, 32) and fwd[1].dtype == torch.float32   # padded, as CUDA's
    bwd = sdpa_route.handle_backward(
        em, aten._scaled_dot_product_efficient_attention_backward.default,
        (go, q, k, v, torch.empty(0), fwd[0], fwd[1], fwd[2], fwd[3], 0.0,
         [True, True, True, False]), {})
    assert bwd[3] is None
    lse = fwd[1][..., :4]
    cpu = attention.handle_backward(
        em, aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
        (go, q, k, v, fwd[0], lse, 0.0, False), {})
    assert all(same(a, b) for a, b in zip(bwd[:3], cpu))
    fl = attention.handle_forward(em, aten._scaled_dot_product_flash_attention.default,
                                  (q, k, v), {})
    assert same(fl[0], ref) and len(fl) == 9
    assert isinstance(EmulateMode.ignore_compile_internals(), bool)


# ------------------------------------------------------------------------ _scaled_mm

def test_scaled_mm_fp8_with_promotion():
    g = torch.Generator().manual_seed(0)
    A = torch.randn(8, 300, generator=g).to(torch.float8_e4m3fn)
    B = torch.randn(16, 300, generator=g).to(torch.float8_e4m3fn).t()
    sa, sb = torch.tensor(0.5), torch.tensor(2.0)
    with emulate("sm90", record=True) as em:
        D = torch._scaled_mm(A, B, sa, sb, out_dtype=torch.bfloat16)
        Df = torch._scaled_mm(A, B, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True)
    parts = [emm(A[:, i:i + 128], B[i:i + 128]) for i in range(0, 300, 128)]
    acc = parts[0] + parts[1] + parts[2]
    assert same(D, (acc * (sa * sb)).to(torch.bfloat16))
    assert same(Df, (emm(A, B) * (sa * sb)).to(torch.bfloat16))
    labels = {fmt for (_, _, fmt) in em.counts}
    assert labels == {"fp8_e4m3 (fp32 promotion every 128) (cuBLASLt epilogue)",
                      "fp8_e4m3 (cuBLASLt epilogue)"}


# ------------------------------------------------------------------------ untouched ops, state

def test_other_ops_stay_native_and_unrouted_products_are_counted():
    x = rnd(4, 8, dtype=torch.float32)
    v = rnd(8, dtype=torch.float32, seed=1)
    ref = (torch.softmax(x, -1), torch.nn.functional.gelu(x), x.sum(0), torch.mv(x, v))
    with emulate("sm90", record=True) as em:
        got = (torch.softmax(x, -1), torch.nn.functional.gelu(x), x.sum(0), torch.mv(x, v))
    assert same(got[3], ref[3])
    # GELU: PyTorch's CUDA kernel (aten_math.py, tests/test_aten_elementwise.py)
    assert same(got[1], aten_math.model("gelu", x))
    assert em.recorder.emulated_count == 0
    prods = [r for r in em.records if r.product]
    assert [r.op for r in prods] == ["aten.mv.default"] and not prods[0].emulated
    kernels = {r.op for r in em.records if r.kernel}
    assert {"aten.gelu.default", "aten.sum.dim_IntList", "aten._softmax.default"} <= kernels
    assert "aten.mv" not in em.recorder.natives


def test_state_restored_when_the_body_raises():
    A = rnd(4, 8, dtype=torch.float16, scale=2.0 ** -18)
    B = rnd(8, 4, dtype=torch.float16)
    native = torch.mm(A, B)
    depth = torch._C._len_torch_dispatch_stack()
    with pytest.raises(RuntimeError, match="boom"):
        with emulate("gfx90a"):
            assert not same(torch.mm(A, B), native)
            raise RuntimeError("boom")
    assert torch._C._len_torch_dispatch_stack() == depth
    assert same(torch.mm(A, B), native)


def test_nested_modes_inner_wins():
    A, B = rnd(4, 64), rnd(64, 4, seed=1)
    with emulate("sm90") as outer:
        with emulate("gfx942") as inner:
            D = A @ B
        D2 = A @ B
    assert same(D, emm(A, B, arch="gfx942").to(torch.bfloat16))
    assert same(D2, emm(A, B, arch="sm90").to(torch.bfloat16))
    assert inner.recorder.emulated_count == 1


# ------------------------------------------------------------------------ formats

def test_fp32_follows_pytorch_tf32_setting():
    A, B = rnd(4, 32, dtype=torch.float32), rnd(32, 4, dtype=torch.float32, seed=1)
    old = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        with emulate("sm80", record=True) as em:
            Dt = A @ B
        with emulate("gfx942", record=True) as em2:  # no tf32: the fp32 FMA chain
            Dg = A @ B
        torch.set_float32_matmul_precision("highest")
        with emulate("sm80") as em3:
            Df = A @ B
    finally:
        torch.set_float32_matmul_precision(old)
    assert same(Dt, emm(A, B, arch="sm80", in_format="tf32"))
    assert same(Df, emm(A, B, arch="sm80"))
    assert same(Dg, emm(A, B, arch="gfx942"))
    assert em.records[0].format == "tf32" and em2.records[0].format == "fp32"
    assert em3.policy.matmul_tf32 is False


def test_per_op_formats_and_fp32_format():
    A, B = rnd(4, 32, dtype=torch.float32), rnd(32, 4, dtype=torch.float32, seed=1)
    C = rnd(4, 4, dtype=torch.float32, seed=2)
    with emulate("gfx942", formats={"mm": "bf16", "addmm": "native"}, fp32_format="xf32",
                 record=True) as em:
        Dm = A @ B
        Da = torch.addmm(C, A, B)
        Db = torch.bmm(A[None], B[None])
    assert same(Dm, emm(A.bfloat16(), B.bfloat16(), arch="gfx942"))
    assert same(Da, torch.addmm(C, A, B))
    assert same(Db[0], emm(A, B, arch="gfx942", in_format="xf32"))
    assert [r.format for r in em.records] == ["bf16", "native", "xf32"]


def test_fp8_format_uses_tensorwise_scaling():
    A, B = rnd(4, 64), rnd(64, 8, seed=1)
    with emulate("sm90", formats={"mm": "fp8_e4m3"}, record=True) as em:
        D = A @ B
    fa, fb = 448 / A.float().abs().max(), 448 / B.float().abs().max()
    A8 = (A.float() * fa).to(torch.float8_e4m3fn)
    B8 = (B.float() * fb).to(torch.float8_e4m3fn)
    ref = (emm(A8, B8) * (fa.reciprocal() * fb.reciprocal())).to(torch.bfloat16)
    assert same(D, ref)
    assert em.records[0].format == "fp8_e4m3 (tensorwise scaled)"


def test_fp16_alt_impl_in_backward_only():
    x = rnd(4, 16, dtype=torch.float16).requires_grad_()
    w = rnd(8, 16, dtype=torch.float16, seed=1)
    go = rnd(4, 8, dtype=torch.float16, seed=2)
    with emulate("gfx90a", fp16_alt_impl="backward", record=True) as em:
        y = F.linear(x, w)
        (gx,) = torch.autograd.grad(y, (x,), go)
    assert same(y, emm(x, w.t(), arch="gfx90a").half())
    assert same(gx, emm(go.bfloat16(), w.bfloat16(), arch="gfx90a").half())
    assert [(r.phase, r.format) for r in em.records] == [("forward", "fp16"),
                                                          ("backward", "bf16 (fp16 alt impl)")]


def test_fp16_accumulation_flag():
    A, B = rnd(4, 64, dtype=torch.float16), rnd(64, 4, dtype=torch.float16, seed=1)
    with emulate("sm80", fp16_accumulation=True, record=True) as em:
        D = A @ B
    assert same(D, emm(A, B, arch="sm80", out_dtype=torch.float16))
    with emulate("gfx942", fp16_accumulation=True):  # no fp16-accumulating MFMA: fp32
        assert same(A @ B, emm(A, B, arch="gfx942").half())
    assert em.records[0].format == "fp16 (fp16 acc)"


def test_bf16_on_volta_uses_the_fp32_chain():
    A, B = rnd(4, 32), rnd(32, 4, seed=1)
    with emulate("V100", record=True) as em:
        D = A @ B
    assert same(D, emm(A.float(), B.float(), arch="sm70").bfloat16())
    assert em.records[0].format == "bf16 via fp32 FMA"


def test_custom_spec_applies_to_every_product():
    s = tme.spec("sm90", "bf16").replace(F=27)
    A, B = rnd(4, 64, dtype=torch.float32), rnd(64, 4, dtype=torch.float32, seed=1)
    with emulate(s):
        D = A @ B
    assert same(D, emm(A.bfloat16(), B.bfloat16(), arch=s))


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(arch="sm999"), ValueError, "unknown arch"),
    (dict(arch=3), TypeError, "arch must be"),
    (dict(arch="sm90", formats={"linear": "bf16"}), ValueError, "unknown op kind"),
    (dict(arch="sm90", formats={"mm": "fp13"}), ValueError, "allowed"),
    (dict(arch="sm80", formats={"mm": "fp8_e4m3"}), ValueError, "no fp8_e4m3 instruction"),
    (dict(arch="gfx942", fp32_format="tf32"), ValueError, "xf32"),
    (dict(arch="sm90", fp32_format="fp19"), ValueError, "fp32_format must be one of"),
    (dict(arch="sm90", bias="prologue"), ValueError, "epilogue"),
    (dict(arch="sm70", fp16_alt_impl="always"), ValueError, "no bf16"),
    (dict(arch="sm90", fp16_alt_impl="yes"), ValueError, "off, backward, always"),
    (dict(arch="sm90", fp8_promotion=0), ValueError, "fp8_promotion"),
    (dict(arch="sm90", formats=["mm"]), TypeError, "dict"),
])
def test_bad_options_raise_clear_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        emulate(**kwargs)


def test_scaled_mm_mixed_fp8_rowwise_scales():
    g = torch.Generator().manual_seed(1)
    A = torch.randn(4, 64, generator=g).to(torch.float8_e5m2)
    B = torch.randn(8, 64, generator=g).to(torch.float8_e4m3fn).t()
    sa = torch.rand(4, 1, generator=g) + 0.5
    sb = torch.rand(1, 8, generator=g) + 0.5
    bias = torch.randn(8, generator=g).to(torch.bfloat16)
    with emulate("sm90", record=True) as em:
        D = torch._scaled_mm(A, B, sa, sb, bias=bias, out_dtype=torch.bfloat16)
    ref = (emm(A, B) * (sa * sb) + bias.float()).to(torch.bfloat16)
    assert same(D, ref) and em.records[0].format == "fp8_e5m2 x fp8_e4m3 (rowwise scales)"
    with pytest.raises(ValueError, match="'auto' or 'native'"):
        emulate("sm90", formats={"scaled_mm": "bf16"})


def test_fp8_tensors_on_an_arch_without_fp8_raise():
    A = rnd(4, 32).to(torch.float8_e4m3fn)
    B = rnd(32, 4, seed=1).to(torch.float8_e4m3fn)
    with emulate("sm80"):
        with pytest.raises(ValueError, match="sm80 has no fp8_e4m3"):
            torch._scaled_mm(A, B, torch.tensor(1.0), torch.tensor(1.0),
                             out_dtype=torch.bfloat16)


# ------------------------------------------------------------------------ every routed overload

def _gemm_calls(A, B, A3, B3, C, C3):
    f32 = torch.float32
    o2 = lambda: torch.empty(0, dtype=A.dtype)           # noqa: E731
    o3 = lambda: torch.empty(0, dtype=A.dtype)           # noqa: E731
    return {
        "aten.mm.default": (lambda: aten.mm.default(A, B), lambda acc2, acc3: acc2.to(A.dtype)),
        "aten.mm.out": (lambda: aten.mm.out(A, B, out=o2()), lambda a2, a3: a2.to(A.dtype)),
        "aten.mm.dtype": (lambda: aten.mm.dtype(A, B, f32), lambda a2, a3: a2),
        "aten.mm.dtype_out": (lambda: aten.mm.dtype_out(A, B, f32, out=torch.empty(0)),
                              lambda a2, a3: a2),
        "aten.addmm.default": (lambda: aten.addmm.default(C, A, B, beta=2, alpha=0.5),
                               lambda a2, a3: (a2 * 0.5 + C.float() * 2).to(A.dtype)),
        "aten.addmm.out": (lambda: aten.addmm.out(C, A, B, out=o2()),
                           lambda a2, a3: (a2 + C.float()).to(A.dtype)),
        "aten.addmm.dtype": (lambda: aten.addmm.dtype(C, A, B, f32), lambda a2, a3: a2 + C.float()),
        "aten.addmm.dtype_out": (lambda: aten.addmm.dtype_out(C, A, B, f32, out=torch.empty(0)),
                                 lambda a2, a3: a2 + C.float()),
        "aten.addmm_.default": (lambda: aten.addmm_.default(C.clone(), A, B),
                                lambda a2, a3: (a2 + C.float()).to(A.dtype)),
        "aten.bmm.default": (lambda: aten.bmm.default(A3, B3), lambda a2, a3: a3.to(A.dtype)),
        "aten.bmm.out": (lambda: aten.bmm.out(A3, B3, out=o3()), lambda a2, a3: a3.to(A.dtype)),
        "aten.bmm.dtype": (lambda: aten.bmm.dtype(A3, B3, f32), lambda a2, a3: a3),
        "aten.bmm.dtype_out": (lambda: aten.bmm.dtype_out(A3, B3, f32, out=torch.empty(0)),
                               lambda a2, a3: a3),
        "aten.baddbmm.default": (lambda: aten.baddbmm.default(C3, A3, B3, alpha=3),
                                 lambda a2, a3: (a3 * 3 + C3.float()).to(A.dtype)),
        "aten.baddbmm.out": (lambda: aten.baddbmm.out(C3, A3, B3, out=o3()),
                             lambda a2, a3: (a3 + C3.float()).to(A.dtype)),
        "aten.baddbmm.dtype": (lambda: aten.baddbmm.dtype(C3, A3, B3, f32),
                               lambda a2, a3: a3 + C3.float()),
        "aten.baddbmm.dtype_out": (lambda: aten.baddbmm.dtype_out(C3, A3, B3, f32,
                                                                  out=torch.empty(0)),
                                   lambda a2, a3: a3 + C3.float()),
        "aten.baddbmm_.default": (lambda: aten.baddbmm_.default(C3.clone(), A3, B3),
                                  lambda a2, a3: (a3 + C3.float()).to(A.dtype)),
    }


def test_every_gemm_overload_equals_emulated_mm():
    from torch_mma_emu.preview import ROUTED_OPS
    A, B = rnd(3, 40), rnd(40, 5, seed=1)
    A3, B3 = rnd(2, 3, 40, seed=2), rnd(2, 40, 5, seed=3)
    C, C3 = rnd(3, 5, seed=4), rnd(2, 3, 5, seed=5)
    acc2, acc3 = emm(A, B, arch="gfx942"), emm(A3, B3, arch="gfx942")
    calls = _gemm_calls(A, B, A3, B3, C, C3)
    gemm_ops = {op for op in ROUTED_OPS if op.split(".")[1] in
                ("mm", "addmm", "bmm", "baddbmm", "addmm_", "baddbmm_")}
    assert gemm_ops == set(calls)
    for op, (call, expect) in calls.items():
        with emulate("gfx942", record=True) as em:
            got = call()
        assert [r.op for r in em.records] == [op]
        assert same(got, expect(acc2, acc3)), op


def test_convolution_out_and_scaled_mm_out_overloads():
    x = rnd(1, 2, 5, 5)
    w = rnd(3, 2, 3, 3, seed=1)
    A8 = rnd(4, 32, seed=2).to(torch.float8_e4m3fn)
    B8 = rnd(6, 32, seed=3).to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0)
    with emulate("sm89", record=True) as em:
        y = torch.ops.aten.convolution.out(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1,
                                           out=torch.empty(0, dtype=torch.bfloat16))
        d = torch.ops.aten._scaled_mm.out(A8, B8, one, one, out_dtype=torch.float32,
                                          out=torch.empty(0))
    assert same(y, _conv_ref(x, w, None, 1, 0, 1, 1, "sm89"))
    assert same(d, emm(A8, B8, arch="sm89"))
    assert [r.op for r in em.records] == ["aten.convolution.out", "aten._scaled_mm.out"]


@pytest.mark.filterwarnings("ignore")
def test_flex_attention_higher_order_op_is_emulated_and_recorded():
    # (test_preview_flex.py checks its bits; other higher-order ops stay native, recorded)
    from torch.nn.attention.flex_attention import flex_attention
    q = rnd(1, 2, 8, 16, dtype=torch.float32)
    with emulate("sm90", record=True) as em:
        o = flex_attention(q, q, q)
    torch.testing.assert_close(o, flex_attention(q, q, q), rtol=1e-5, atol=1e-5)
    assert [(r.op, r.format) for r in em.records if not r.kernel] == [("flex_attention", "fp32")]


def test_addmm_activation_epilogue():
    A, B = rnd(4, 32), rnd(32, 6, seed=1)
    C = rnd(6, seed=2)
    with emulate("sm90", record=True) as em:
        R = aten._addmm_activation(C, A, B)
        G = aten._addmm_activation(C, A, B, use_gelu=True)
    acc = emm(A, B) + C.float()
    assert same(R, torch.relu(acc).bfloat16())
    assert same(G, F.gelu(acc, approximate="tanh").bfloat16())
    assert [r.format for r in em.records] == ["bf16", "bf16"]


def test_multihead_attention_fast_path_is_switched_off_and_restored():
    mha = torch.nn.MultiheadAttention(16, 2, batch_first=True).eval()
    x = rnd(2, 5, 16, dtype=torch.float32)
    before = torch.backends.mha.get_fastpath_enabled()
    with pytest.raises(KeyError):
        with torch.no_grad(), emulate("gfx942", record=True) as em:
            mha(x, x, x)
            assert torch.backends.mha.get_fastpath_enabled() is False
            raise KeyError("boom")
    assert torch.backends.mha.get_fastpath_enabled() == before
    ops = [r.op for r in em.records]
    assert "aten._native_multi_head_attention.default" not in ops
    assert ops.count("aten.bmm.default") == 2 and "aten.addmm.default" in ops
