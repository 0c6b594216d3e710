"""convert()/revert(): module swap sharing parameters; same bits as the dispatch mode;
torch.compile(fullgraph=True) with no graph breaks and the eager bits, for both routes."""
import pytest
import torch
import torch._inductor.config
import torch.nn as nn
import torch.nn.functional as F

from torch_mma_emu.preview import EmulatedConv, EmulatedLinear, convert, emulate, revert
from torch_mma_emu.preview.tiny_gpt import tiny_gpt
from helpers import same


class Net(nn.Module):
    """Conv2d (even kernel, 'same' padding), Conv1d (reflect padding, groups), Linear on 3-D
    input, Linear without bias.  ``native_acts``: activations emulate leaves native (relu,
    hardtanh), for comparing with the mode: emulate models PyTorch's CUDA tanh / GELU too,
    convert() only the products."""

    def __init__(self, native_acts=False):
        super().__init__()
        self.acts = (F.hardtanh, F.relu) if native_acts else (torch.tanh, F.gelu)
        self.c1 = nn.Conv2d(3, 6, 2, padding="same")
        self.c2 = nn.Conv1d(6, 4, 3, padding=1, padding_mode="reflect", groups=2)
        self.l1 = nn.Linear(5, 8)
        self.l2 = nn.Linear(8, 3, bias=False)

    def forward(self, x):                       # x: (N, 3, 4, 5)
        y = F.relu(self.c1(x)).mean(2)          # (N, 6, 5)
        y = self.acts[0](self.c2(y))            # (N, 4, 5)
        return self.l2(self.acts[1](self.l1(y)))  # (N, 4, 3)


pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")


def make(dtype, seed=0, native_acts=False):
    torch.manual_seed(seed)
    net = Net(native_acts).to(dtype)
    x = torch.randn(2, 3, 4, 5).to(dtype)
    return net, x


def run(net, x):
    x = x.detach().clone().requires_grad_()
    y = net(x)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(9)).to(y.dtype)
    y.backward(g)
    grads = [x.grad] + [p.grad.clone() for p in net.parameters()]
    for p in net.parameters():
        p.grad = None
    return y.detach(), grads


# ------------------------------------------------------------------------ swap mechanics

def test_convert_swaps_and_shares_parameters_and_revert_restores():
    net, _ = make(torch.float32)
    originals = {n: m for n, m in net.named_children()}
    params = {n: p for n, p in net.named_parameters()}
    keys = list(net.state_dict())
    out = convert(net, "MI300X")
    assert out is net
    assert isinstance(net.c1, EmulatedConv) and isinstance(net.l1, EmulatedLinear)
    assert {n: p for n, p in net.named_parameters()}.keys() == params.keys()
    assert all(p is params[n] for n, p in net.named_parameters())
    assert list(net.state_dict()) == keys
    assert "gfx942" in repr(net)
    revert(net)
    assert all(getattr(net, n) is m for n, m in originals.items())


def test_convert_filter_and_bare_module_and_errors():
    net, _ = make(torch.float32)
    convert(net, "sm80", filter_fn=lambda m, fqn: fqn.startswith("l"))
    assert isinstance(net.l1, EmulatedLinear) and isinstance(net.c1, nn.Conv2d)
    lin = nn.Linear(4, 2)
    e = convert(lin, "sm90")
    assert isinstance(e, EmulatedLinear) and e.weight is lin.weight and revert(e) is lin
    with pytest.raises(TypeError, match="nn.Module"):
        convert("model", "sm90")
    with pytest.raises(ValueError, match="unknown arch"):
        convert(nn.Linear(2, 2), "sm1")
    with pytest.raises(ValueError, match="sm80 has no fp8_e4m3"):
        convert(nn.Linear(4, 2), "sm80", formats={"addmm": "fp8_e4m3"})
    with pytest.raises(TypeError, match="allowed: float64, float32, float16, bfloat16"):
        convert(nn.Linear(4, 2), "sm90")(torch.zeros(3, 4).to(torch.float8_e4m3fn))
    with pytest.raises(TypeError, match="dtype"):
        convert(nn.Linear(4, 2), "sm80")(torch.zeros(3, 4, dtype=torch.float16))


# ------------------------------------------------------------------------ same bits as emulate

@pytest.mark.parametrize("arch,dtype,opts", [
    ("sm90", torch.bfloat16, {}),
    ("gfx90a", torch.float16, dict(fp16_alt_impl="backward")),
    ("sm80", torch.float32, dict(fp32_format="tf32")),
    ("gfx942", torch.float16, dict(bias="chain")),
])
def test_convert_equals_dispatch_mode_forward_and_backward(arch, dtype, opts):
    net, x = make(dtype, native_acts=True)
    with emulate(arch, **opts, record=True) as em:
        y_mode, g_mode = run(net, x)
    # forward: 2 convolutions, addmm, mm; backward: 2 convolution_backward, 2 x 2 mm
    phases = [r.phase for r in em.records if r.emulated and r.product]
    assert phases.count("forward") == 4 and phases.count("backward") == 6
    convert(net, arch, **opts)
    y_conv, g_conv = run(net, x)
    assert same(y_mode, y_conv)
    assert all(same(a, b) for a, b in zip(g_mode, g_conv))
    revert(net)


def test_autocast_casts_like_f_linear():
    net, x = make(torch.float32, native_acts=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with emulate("sm90", record=True) as em:
            y_mode = net(x)
        convert(net, "sm90")
        y_conv = net(x)
    assert y_mode.dtype == torch.bfloat16 and same(y_mode, y_conv)
    assert {r.format for r in em.records if r.product} == {"bf16"}


# ------------------------------------------------------------------------ torch.compile

@pytest.mark.parametrize("precision_casts", [False, True])
def test_convert_compile_fullgraph_inductor_is_bit_identical(precision_casts):
    """Inductor's default (precision_casts False) fuses a bf16 cast into the next pointwise op
    and skips its rounding: the emulated products' stores (ops.round_result) and the conv
    bias add keep theirs as a GPU kernel does.  The conv bias gradients are plain sums whose
    order is Inductor's (not a product; torch 2.11 and 2.14 order them otherwise than eager):
    within an ulp of the largest."""
    net, x = make(torch.bfloat16)
    convert(net, "sm90")
    y_e, g_e = run(net, x)
    explain = torch._dynamo.explain(net)(x)
    assert explain.graph_count == 1 and explain.graph_break_count == 0
    torch._dynamo.reset()
    with torch._inductor.config.patch(emulate_precision_casts=precision_casts):
        cnet = torch.compile(net, fullgraph=True)
        y_c, g_c = run(cnet, x)
    assert same(y_e, y_c)
    names = ["x"] + [n for n, _ in net.named_parameters()]
    for name, a, b in zip(names, g_e, g_c):
        if name in ("c1.bias", "c2.bias"):
            tol = a.float().abs().max() * 2 ** -8      # an ulp of the largest, in bf16
            assert torch.allclose(a.float(), b.float(), rtol=0, atol=tol), name
        else:
            assert same(a, b), name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("act", [F.gelu, torch.tanh])
def test_compiled_linear_keeps_the_rounding_of_its_output(dtype, act):
    """A GPU GEMM writes bf16 / fp16: the next op reads the rounded value.  Before
    ops.round_result, Inductor (default settings, every torch 2.11-2.14) fused the emulation's
    cast into the activation and read the fp32 accumulator: 12-20 of 64 outputs differed."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 8, bias=False), nn.Linear(8, 8)).to(dtype)
    x = torch.randn(2, 4, 5).to(dtype)
    convert(net, "sm90")

    def f(t):
        return act(net(t))
    with torch.no_grad():
        want = f(x)
        torch._dynamo.reset()
        got = torch.compile(f, fullgraph=True)(x)
    assert same(want, got)


def test_emulate_compile_fullgraph_aot_eager_tinygpt_is_bit_identical():
    model = tiny_gpt(seed=1, n_layer=1, d_model=32, d_ff=64, vocab=64, seq=8).to(torch.bfloat16)
    idx = model.example_inputs(2)

    def step(m):
        logits = m(idx)
        loss = logits.float().logsumexp(-1).mean()
        loss.backward()
        gs = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        return logits.detach(), gs

    with emulate("gfx942", record=True) as em:
        y_e, g_e = step(model)
    torch._dynamo.reset()
    cm = torch.compile(model, fullgraph=True, backend="aot_eager")
    with emulate("gfx942", record=True) as em_c:
        y_c, g_c = step(cm)
    assert same(y_e, y_c) and all(same(a, b) for a, b in zip(g_e, g_c))
    assert em_c.recorder.emulated_count == em.recorder.emulated_count > 0
    with emulate("gfx942"):
        assert torch._dynamo.explain(model)(idx).graph_break_count == 0


@torch._inductor.config.patch(emulate_precision_casts=True)
def test_emulate_compile_inductor_routes_library_gemms():
    # relu / hardtanh: Inductor fuses the activations and their backward into its own code,
    # which the mode never sees; with tanh / GELU eager would model them and differ
    net, x = make(torch.float16, native_acts=True)
    with emulate("sm89", record=True) as em:
        y_e, g_e = run(net, x)
    torch._dynamo.reset()
    cnet = torch.compile(net, fullgraph=True)
    with emulate("sm89", record=True) as em_c:
        y_c, g_c = run(cnet, x)
    assert same(y_e, y_c) and all(same(a, b) for a, b in zip(g_e, g_c))
    # the products (Inductor fuses tanh / GELU into its own code: not routed when compiled)
    assert _products(em_c) == _products(em) > 0


def _products(em):
    return sum(r.emulated and r.product for r in em.records)
