"""The backward kernels of PyTorch's CUDA activations (issue 39): the NumPy models
(aten_cuda/backward.py) against nvcc 13.0's PTX of ATen's own lambdas, run instruction by
instruction (gpu_math.ptx_run), and their route under emulate."""
import importlib.util
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import torch_mma_emu as tme
from torch_mma_emu.aten_cuda import backward as bw
from torch_mma_emu.aten_cuda import elementwise as ew

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("regen_aten_math_ptx",
                                              ROOT / "scripts" / "regen_aten_math_ptx.py")
regen = importlib.util.module_from_spec(spec)
spec.loader.exec_module(regen)


@pytest.mark.parametrize("op", sorted(bw.OPS))
@pytest.mark.parametrize("dtype", ew.DTYPES)
def test_model_equals_the_ptx(op, dtype):
    """Every 16-bit second operand (with random gradients), 30,000 float32 pairs: 0
    mismatches against the committed PTX."""
    with np.errstate(all="ignore"):
        miss, n = regen.backward_mismatches(regen.BW_PTX.read_text(), op, dtype, 30_000)
    assert miss == 0 and n >= 30_000


def test_the_16bit_roundings_matter():
    """sigmoid / tanh backward round to the 16-bit type after each operation: computing in
    float and rounding once differs (the old behaviour would be PyTorch's CPU kernel)."""
    g = np.full(1 << 16, 0.7, np.float16)
    y = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    got = bw.evaluate("tanh_backward", g, y, "float16")
    with np.errstate(all="ignore"):
        once = (g.astype(np.float32) * (1 - y.astype(np.float32) ** 2)).astype(np.float16)
    fin = np.isfinite(got) & np.isfinite(once)
    assert (got[fin] != once[fin]).sum() > 100


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_committed_ptx_is_nvccs(tmp_path, monkeypatch):
    out = tmp_path / "bw.ptx"
    regen.compile_ptx(regen.BW_SOURCE, out)
    # nvcc names internal symbols with a hash of the source's path: equal in any checkout
    strip = lambda s: [re.sub(r"(?<=_)[0-9a-f]{8}(?=_)", "#", l)
                       for l in s.splitlines() if l.strip() and not l.startswith("//")]
    assert strip(out.read_text()) == strip(regen.BW_PTX.read_text())


_FWD = {"gelu_backward": F.gelu, "gelu_tanh_backward": lambda t: F.gelu(t, approximate="tanh"),
        "silu_backward": F.silu, "sigmoid_backward": torch.sigmoid,
        "tanh_backward": torch.tanh}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("op", sorted(_FWD))
def test_training_step_gives_the_kernels_gradient(op, dtype):
    """forward + backward under emulate: x.grad is the modelled backward kernel's result
    bit for bit (sigmoid / tanh backward read the modelled forward output) and recorded."""
    x = (torch.randn(16, 64, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)
    x.requires_grad_(True)
    gy = torch.randn(16, 64, generator=torch.Generator().manual_seed(1)).to(dtype)
    with tme.emulate("sm90", record=True) as em:
        y = _FWD[op](x)
        y.backward(gy)
    aten = "aten." + op.replace("gelu_tanh", "gelu") + ".default"
    assert (aten, "backward") in {(r.op, r.phase) for r in em.records}
    assert not any("_backward" in o for o in em.recorder.natives)
    other = y.detach() if op in ("sigmoid_backward", "tanh_backward") else x.detach()
    want = bw.apply(op, gy, other)
    assert torch.equal(x.grad.view(torch.int16 if dtype != torch.float32 else torch.int32),
                       want.view(torch.int16 if dtype != torch.float32 else torch.int32))
    cpu = torch.autograd.grad(_FWD[op](x), x, gy)[0]
    if dtype == torch.float32:
        assert not torch.equal(cpu, x.grad)        # the CPU's kernel differs somewhere


def test_amd_and_fp64_stay_native():
    x = torch.randn(8, requires_grad=True)
    with tme.emulate("MI300X", record=True) as em:
        F.silu(x).sum().backward()
    assert em.recorder.natives["aten.silu_backward"] == 1
    xd = torch.randn(8, dtype=torch.float64, requires_grad=True)
    with tme.emulate("sm90", record=True) as em:
        torch.tanh(xd).sum().backward()
    assert em.recorder.natives["aten.tanh_backward"] == 1


def test_bad_input():
    with pytest.raises(ValueError):
        bw.evaluate("relu_backward", np.zeros(1, np.float32), np.zeros(1, np.float32))
    with pytest.raises(TypeError):
        bw.apply("tanh_backward", torch.zeros(2), torch.zeros(2, dtype=torch.float16))


def test_tiny_gpt_training_step_models_the_backward_kernels():
    """A training step of the project's TinyGPT under emulate: GELU's and log_softmax's
    backward kernels are modelled; what still runs natively in backward is named
    (in the census)."""
    from torch_mma_emu.preview.tiny_gpt import tiny_gpt
    torch.manual_seed(0)
    model = tiny_gpt()
    tokens = model.example_inputs(2)
    with tme.emulate("sm90", record=True) as em:
        out = model(tokens)
        F.cross_entropy(out.flatten(0, 1), tokens.flatten()).backward()
    fmt = {(r.op, r.phase): r.format for r in em.records}
    label = "torch 2.13.0 CUDA kernel"
    assert fmt[("aten.gelu_backward.default", "backward")] == label
    assert fmt[("aten._log_softmax_backward_data.default", "backward")] == label
    assert fmt[("aten.native_layer_norm_backward.default", "backward")] == label
    assert fmt[("aten.native_layer_norm_backward.default (dgamma, dbeta)", "backward")] == label
    assert set(em.recorder.natives) <= {"aten.add",
                                        "aten.arange", "aten.nll_loss_forward",
                                        "aten.nll_loss_backward"}
    assert "aten.native_layer_norm_backward" in em.summary()
