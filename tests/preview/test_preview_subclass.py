"""Converted layers are subclasses of the layers they replace: isinstance, reset_parameters,
extra_repr, state_dict, optimizer parameter groups; ConvTranspose is converted too."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from torch_mma_emu.preview import convert, emulate, revert
from torch_mma_emu.preview.modules import (EmulatedConv, EmulatedConv1d, EmulatedConv3d,
                                           EmulatedConvTranspose2d, EmulatedLinear)
from helpers import same


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(2, 4, 3)
        self.c3 = nn.Conv3d(1, 2, 2, bias=False)
        self.up = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1)
        self.fc = nn.Linear(4, 3)
        self.norm = nn.LayerNorm(3)


def test_converted_layers_are_instances_of_the_replaced_classes():
    net = convert(Net(), "sm90")
    assert isinstance(net.fc, nn.Linear) and isinstance(net.fc, EmulatedLinear)
    assert isinstance(net.c1, nn.Conv1d) and isinstance(net.c1, EmulatedConv1d)
    assert isinstance(net.c3, nn.Conv3d) and isinstance(net.c3, EmulatedConv3d)
    assert isinstance(net.up, nn.ConvTranspose2d) and isinstance(net.up, EmulatedConvTranspose2d)
    assert all(isinstance(m, EmulatedConv) for m in (net.c1, net.c3, net.up))
    # selecting modules by type (weight init, optimizer groups) finds them
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    assert linears == [net.fc]
    decay = [p for m in net.modules() if isinstance(m, (nn.Linear, nn.modules.conv._ConvNd))
             for n, p in m.named_parameters(recurse=False) if n == "weight"]
    assert len(decay) == 4
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}])
    assert len(opt.param_groups[0]["params"]) == 4


def test_reset_parameters_reinitialises_the_shared_weights():
    net = Net()
    w = net.fc.weight
    convert(net, "sm90")
    with torch.no_grad():
        net.fc.weight.zero_()
        net.up.weight.zero_()
    torch.manual_seed(0)
    net.fc.reset_parameters()
    net.up.reset_parameters()
    assert net.fc.weight is w and net.fc.weight.abs().sum() > 0
    assert net.up.weight.abs().sum() > 0
    assert revert(net).fc.weight is w and type(net.fc) is nn.Linear


def test_extra_repr_and_state_dict_round_trip():
    torch.manual_seed(0)
    plain = Net()
    sd = {k: v.clone() for k, v in plain.state_dict().items()}
    conv = convert(Net(), "gfx942", fp32_format="fp32")
    assert "in_features=4, out_features=3" in repr(conv.fc) and "arch=gfx942" in repr(conv.fc)
    assert "stride=(2, 2)" in repr(conv.up) and "output_padding=(1, 1)" in repr(conv.up)
    assert list(conv.state_dict()) == list(sd)
    conv.load_state_dict(sd)                        # a plain model's checkpoint loads
    assert all(torch.equal(conv.state_dict()[k], v) for k, v in sd.items())
    back = Net()
    back.load_state_dict(conv.state_dict())         # and the converted one's loads back
    revert(conv)
    assert all(torch.equal(conv.state_dict()[k], v) for k, v in sd.items())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_conv_transpose_module_equals_emulate_forward_and_backward(dtype):
    torch.manual_seed(0)
    up = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1).to(dtype)
    x = torch.randn(2, 3, 4, 5).to(dtype)

    def run(m):
        xi = x.clone().requires_grad_()
        y = m(xi)
        y.float().square().sum().backward()
        grads = [xi.grad] + [p.grad.clone() for p in m.parameters()]
        m.zero_grad(set_to_none=True)
        return y.detach(), grads
    with emulate("sm89", record=True) as em:
        y_mode, g_mode = run(up)
    prods = [r for r in em.records if not r.kernel]
    assert all(r.emulated for r in prods) and len(prods) == 2
    conv = convert(up, "sm89")
    assert isinstance(conv, nn.ConvTranspose2d)
    y_conv, g_conv = run(conv)
    assert same(y_mode, y_conv) and all(same(a, b) for a, b in zip(g_mode, g_conv))
    # output_size picks the output padding, as nn.ConvTranspose2d does
    assert conv(x, output_size=[7, 9]).shape == up(x, output_size=[7, 9]).shape == (2, 2, 7, 9)
