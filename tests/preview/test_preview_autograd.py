"""Gradients under emulation: finite differences on the exact fp64 path (FMA chains), and
the backward products are emulated_mm on the same operands, for both routes."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_mma_emu as tme
from torch_mma_emu.preview import convert, emulate
from helpers import same


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 3, stride=2, padding=1)
        self.lin = nn.Linear(4, 8)
        self.out = nn.Linear(8, 3, bias=False)

    def forward(self, x):                                   # (N, 2, 7)
        h = torch.tanh(self.conv(x)).transpose(1, 2)       # (N, 4, 4)
        h = self.lin(h)                                     # (N, 4, 8)
        q = h.view(h.shape[0], 2, 4, 4)                     # two heads of width 4
        a = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        return self.out(torch.tanh(a.reshape(h.shape)))     # (N, 4, 3)


def make():
    torch.manual_seed(0)
    return Small().double(), torch.randn(2, 2, 7, dtype=torch.float64, requires_grad=True)


@pytest.mark.parametrize("arch", ["sm90", "gfx942"])
def test_gradcheck_under_emulate_on_the_fp64_path(arch):
    net, x = make()
    params = list(net.parameters())
    with emulate(arch, record=True) as em:
        assert torch.autograd.gradcheck(
            lambda x, w1, b1, w2: torch.func.functional_call(
                net, {"conv.weight": w1, "conv.bias": b1, "lin.weight": w2,
                      "lin.bias": params[3], "out.weight": params[4]}, (x,)),
            (x, params[0].detach().requires_grad_(), params[1].detach().requires_grad_(),
             params[2].detach().requires_grad_()), eps=1e-6, atol=1e-7, rtol=1e-5)
    kinds = {(r.kind, r.phase) for r in em.records}
    assert {("conv", "backward"), ("attention", "backward"), ("mm", "backward")} <= kinds
    assert all(r.format == "fp64" for r in em.records if r.emulated and r.product)


def test_gradcheck_through_converted_modules():
    net, x = make()
    convert(net, "sm80")
    assert torch.autograd.gradcheck(net, (x,), eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("route", ["emulate", "convert"])
def test_backward_products_equal_emulated_mm(route):
    torch.manual_seed(1)
    lin = nn.Linear(24, 10).to(torch.bfloat16)
    x = torch.randn(6, 24).to(torch.bfloat16).requires_grad_()
    go = torch.randn(6, 10).to(torch.bfloat16)
    if route == "emulate":
        with emulate("gfx942"):
            lin(x).backward(go)
    else:
        convert(lin, "gfx942")(x).backward(go)
    W = lin.weight.detach()
    assert same(x.grad, tme.emulated_mm(go, W, arch="gfx942").bfloat16())
    assert same(lin.weight.grad, tme.emulated_mm(go.t(), x.detach(), arch="gfx942").bfloat16())
    assert same(lin.bias.grad, go.sum(0))


def test_backward_outside_the_context_is_native():
    torch.manual_seed(2)
    A = torch.randn(4, 8).half().requires_grad_()
    B = torch.randn(8, 4).half()
    go = torch.full((4, 4), 2.0 ** -20).half()      # fp16 subnormal output gradients
    with emulate("gfx90a"):
        y = A @ B
        (g_in,) = torch.autograd.grad(y, A, go, retain_graph=True)
    (g_out,) = torch.autograd.grad(y, A, go)
    assert same(g_in, tme.emulated_mm(go, B.t(), arch="gfx90a").half())
    assert same(g_out, go @ B.t())
    assert not same(g_in, g_out)
