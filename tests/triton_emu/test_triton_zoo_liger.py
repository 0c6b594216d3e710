"""Liger-Kernel's Triton kernels as shipped (rms_norm, cross_entropy, swiglu,
fused_linear_cross_entropy) under emulate on sm_90, sm_80 and gfx942 (tests/triton_emu/triton_zoo.py):
results against a float64 reference of the same math, forward and backward."""
import pytest
import torch
import torch.nn.functional as F

from triton_zoo import ARCHS, check_dots, close, need, run_zoo

lf = need("liger_kernel.transformers.functional")


@pytest.mark.parametrize("key", list(ARCHS))
def test_rms_norm(key):
    torch.manual_seed(1)
    x = torch.randn(6, 96, requires_grad=True)
    w = (1 + 0.1 * torch.randn(96)).requires_grad_()
    (y, gx, gw), em, launches = run_zoo(key, lambda: (
        lambda y: (y, *torch.autograd.grad(y.pow(2).sum(), (x, w))))(
        lf.liger_rms_norm(x, w, 1e-6, in_place=False)))
    xd, wd = x.double().detach().requires_grad_(), w.double().detach().requires_grad_()
    ref = xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + 1e-6) * wd
    rgx, rgw = torch.autograd.grad(ref.pow(2).sum(), (xd, wd))
    close(y, ref, 1e-5, 1e-6)
    close(gx, rgx, 1e-4, 1e-5)
    close(gw, rgw, 1e-4, 1e-4)
    assert any("rms_norm" in k for k in launches) and len(launches) >= 2   # fwd + bwd kernels
    assert "libdevice.rsqrt" in em.summary()            # named: not bit-exact
    assert not em.counts and "tl.reduce" in em.summary()    # no dot ran; reductions listed


@pytest.mark.parametrize("key", list(ARCHS))
def test_swiglu(key):
    torch.manual_seed(2)
    a = torch.randn(4, 80, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(4, 80, dtype=torch.bfloat16, requires_grad=True)
    ad, bd = a.double().detach().requires_grad_(), b.double().detach().requires_grad_()
    (y, ga, gb), em, _ = run_zoo(key, lambda: (
        lambda y: (y, *torch.autograd.grad(y.float().sum(), (a, b))))(lf.liger_swiglu(a, b)))
    # (Liger's backward writes the gradients into the saved inputs' storage: copies above)
    ref = F.silu(ad) * bd
    rga, rgb = torch.autograd.grad(ref.sum(), (ad, bd))
    close(y, ref, 1e-2, 1e-2)               # bf16 output: 2^-8 relative
    close(ga, rga, 2e-2, 2e-2)
    close(gb, rgb, 1e-2, 1e-2)
    if key != "gfx942":                      # the sm_90 ex2 / div.full models, bit-exact
        assert "tl.exp" in em.summary() and "bit-exact" in em.summary()


@pytest.mark.parametrize("key", list(ARCHS))
def test_cross_entropy(key):
    torch.manual_seed(3)
    logits = torch.randn(8, 200, requires_grad=True)
    target = torch.randint(0, 200, (8,))
    target[2] = -100                         # ignore_index
    (loss, g), em, launches = run_zoo(key, lambda: (
        lambda l: (l, torch.autograd.grad(l, logits)[0]))(
        lf.liger_cross_entropy(logits.clone(), target, label_smoothing=0.1)))
    ld = logits.double().detach().requires_grad_()
    ref = F.cross_entropy(ld, target, label_smoothing=0.1)
    (rg,) = torch.autograd.grad(ref, ld)
    close(loss, ref, 1e-5, 1e-6)
    close(g, rg, 1e-4, 1e-6)
    assert any("cross_entropy" in k for k in launches)


@pytest.mark.parametrize("key", list(ARCHS))
def test_fused_linear_cross_entropy(key):
    torch.manual_seed(4)
    x = torch.randn(6, 32, requires_grad=True)
    W = (0.2 * torch.randn(96, 32)).requires_grad_()
    target = torch.randint(0, 96, (6,))
    (loss, gx, gW), em, _ = run_zoo(key, lambda: (
        lambda l: (l, *torch.autograd.grad(l, (x, W))))(
        lf.liger_fused_linear_cross_entropy(x, W, target)))
    xd, Wd = x.double().detach().requires_grad_(), W.double().detach().requires_grad_()
    ref = F.cross_entropy(xd @ Wd.T, target)
    rgx, rgW = torch.autograd.grad(ref, (xd, Wd))
    close(loss, ref, 1e-5, 1e-6)
    close(gx, rgx, 1e-4, 1e-6)
    close(gW, rgW, 1e-4, 1e-6)
    products = {op for (op, phase, fmt) in em.torch_counts}      # the projection, emulated
    assert any("mm" in op for op in products), em.torch_counts
