"""Model zoo: every matrix product of common models is emulated, in every mode and dtype.

Each model runs under ``emulate`` in train (forward + backward), ``no_grad``,
``inference_mode`` and ``autocast``, in fp32 / bf16 / fp16.  An independent spy mode pushed
on top of the emulating one sees each aten op before it; every op it sees that multiplies
matrices must appear as an emulated record (same count), and none may run natively.  Where
a composition of ``emulated_mm`` calls is easy to write (MLP, Linear backward), the outputs
are compared with it bit for bit; ``inference_mode`` must give ``no_grad``'s bits.
"""
from __future__ import annotations

import warnings
from collections import Counter

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import torch_mma_emu as tme
from torch_mma_emu.aten_cuda import backward
from torch_mma_emu.preview import aten_math, emulate
from torch_mma_emu.preview.mode import WATCHED_NATIVE, _decomposes
from torch_mma_emu.registry import ARCHS
from helpers import same

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ROUTED = {"mm", "addmm", "bmm", "baddbmm", "convolution", "convolution_backward",
          "_addmm_activation", "_scaled_mm", "_scaled_dot_product_flash_attention_for_cpu",
          "_scaled_dot_product_flash_attention_for_cpu_backward"}


class Spy(TorchDispatchMode):
    """Counts the matrix-multiplying aten ops that reach the dispatch level (composite ops
    are split first, as the emulating mode does)."""

    def __init__(self):
        super().__init__()
        self.seen: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.OpOverload) and _decomposes(func):
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        name = getattr(func, "overloadpacket", func).__name__
        name = name[:-1] if name in ("addmm_", "baddbmm_") else name
        if name in ROUTED or name in WATCHED_NATIVE:
            self.seen[name] += 1
        return func(*args, **kwargs)


# --------------------------------------------------------------------------- the zoo

class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(12, 24), nn.Linear(24, 6)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class CNN(nn.Module):
    """Conv1d, Conv2d, Conv3d, a depthwise Conv2d and a ConvTranspose2d."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(3, 4, 3, padding=1)
        self.c2 = nn.Conv2d(3, 6, 3, padding=1)
        self.dw = nn.Conv2d(6, 6, 3, padding=1, groups=6)
        self.up = nn.ConvTranspose2d(6, 2, 2, stride=2)
        self.c3 = nn.Conv3d(3, 2, (1, 3, 3), padding=(0, 1, 1))

    def forward(self, x):                                # (N, 3, 4, 4)
        a = self.c1(x.flatten(2)).mean((1, 2))
        b = self.up(F.relu(self.dw(self.c2(x)))).mean((1, 2, 3))
        c = self.c3(x.unsqueeze(2)).mean((1, 2, 3, 4))
        return a + b + c


class Encoder(nn.Module):
    """nn.TransformerEncoder (MultiheadAttention inside) with a causal mask."""

    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x):                                # (N, T, 16)
        T = x.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(T, dtype=x.dtype)
        return self.enc(x, mask=mask, is_causal=True)


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 12, num_layers=2, batch_first=True)
        self.gru = nn.GRU(12, 6, bidirectional=True, batch_first=True)

    def forward(self, x):                                # (N, T, 8)
        return self.gru(self.lstm(x)[0])[0]


class TiedLM(nn.Module):
    """Embedding with a tied output head."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(40, 16)
        self.head = nn.Linear(16, 40, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx):
        return self.head(torch.tanh(self.emb(idx)))


class EinsumCode(nn.Module):
    """einsum / baddbmm / matmul written by hand."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(2, 8, 8) / 3)
        self.b = nn.Parameter(torch.randn(2, 1, 8) / 3)

    def forward(self, x):                                # (2, 5, 8)
        s = torch.einsum("bij,bkj->bik", x, x) / 8       # (2, 5, 5)
        y = torch.baddbmm(self.b, x, self.w)             # (2, 5, 8)
        return torch.einsum("bik,bkj->bij", s, y) + (x.unsqueeze(1) @ self.w.unsqueeze(0)).mean(1)


def _inputs(name, dtype):
    g = torch.Generator().manual_seed(1)
    if name == "tied_lm":
        return torch.randint(0, 40, (2, 5), generator=g)
    shape = {"mlp": (3, 4, 12), "cnn": (2, 3, 4, 4), "encoder": (2, 5, 16),
             "rnn": (2, 4, 8), "einsum": (2, 5, 8)}[name]
    return torch.randn(*shape, generator=g).to(dtype)


ZOO = {"mlp": MLP, "cnn": CNN, "encoder": Encoder, "rnn": Recurrent, "tied_lm": TiedLM,
       "einsum": EinsumCode}
MODES = ("train", "no_grad", "inference_mode", "autocast")


def _model(name, dtype):
    torch.manual_seed(0)
    m = ZOO[name]()
    return m.to(dtype) if dtype is not None else m


def _run(name, mode, dtype, arch="sm90"):
    """Run one zoo model in one mode; returns (output, grads, emulate mode, spy)."""
    model_dtype = torch.float32 if mode == "autocast" else dtype
    model = _model(name, model_dtype)
    if mode != "train":
        model.eval()
    x = _inputs(name, model_dtype)
    grads = None
    with warnings.catch_warnings():
        warnings.simplefilter("error")       # a native matrix product would warn
        if mode == "train":
            with emulate(arch, record=True) as em, Spy() as spy:
                y = model(x)
                y.float().square().sum().backward()
            grads = [p.grad for p in model.parameters()]
        elif mode == "no_grad":
            with torch.no_grad(), emulate(arch, record=True) as em, Spy() as spy:
                y = model(x)
        elif mode == "inference_mode":
            with torch.inference_mode(), emulate(arch, record=True) as em, Spy() as spy:
                y = model(x)
        else:
            with torch.autocast("cpu", dtype=dtype), emulate(arch, record=True) as em, \
                    Spy() as spy:
                y = model(x)
    return y.detach() if mode != "inference_mode" else y, grads, em, spy


def _check_all_emulated(em, spy, mode):
    native = [r for r in em.records if not r.emulated]
    assert not native, f"native matrix products: {native[:3]}"
    watched = {k: n for k, n in spy.seen.items() if k in WATCHED_NATIVE}
    assert not watched, f"ops that stay native reached the dispatch level: {watched}"
    n_seen = sum(spy.seen.values())
    products = [r for r in em.records if r.product]     # (not PyTorch's CUDA math kernels)
    assert n_seen > 0 and len(products) == n_seen, (spy.seen, em.summary())
    phases = {r.phase for r in products}
    assert phases == ({"forward", "backward"} if mode == "train" else {"forward"})


FAST = [(m, "fp32") for m in MODES] + [("train", "bf16"), ("inference_mode", "fp16"),
                                       ("autocast", "bf16")]
ALL = [(m, d) for m in MODES for d in DTYPES]


def _params(combos_fast, combos_all):
    return [pytest.param(*c, marks=() if c in combos_fast else pytest.mark.slow)
            for c in combos_all]


@pytest.mark.parametrize("name", list(ZOO))
@pytest.mark.parametrize("mode,dt", _params(FAST, ALL))
def test_zoo_every_product_is_emulated(name, mode, dt):
    if mode == "autocast" and dt == "fp32":
        pytest.skip("autocast to fp32 is not a thing")
    y, grads, em, spy = _run(name, mode, DTYPES[dt])
    _check_all_emulated(em, spy, mode)
    assert torch.isfinite(y.float()).all()
    if grads is not None:
        assert all(g is not None and torch.isfinite(g.float()).all() for g in grads)
    if mode == "train":                               # backward products carry module paths
        assert all(r.module for r in em.records if r.phase == "forward" and not r.kernel)


@pytest.mark.parametrize("name", list(ZOO))
@pytest.mark.parametrize("dt", [pytest.param("fp32"), pytest.param("bf16"),
                                pytest.param("fp16", marks=pytest.mark.slow)])
def test_zoo_inference_mode_equals_no_grad(name, dt):
    y_ng, _, em_ng, _ = _run(name, "no_grad", DTYPES[dt])
    y_im, _, em_im, _ = _run(name, "inference_mode", DTYPES[dt])
    assert same(y_ng, y_im)
    # as many products in the same formats (matmul may fold a 3-D @ 2-D product into one
    # mm in one mode and send it as bmm in the other: the same dot products)
    def per_format(em):
        return Counter({fmt: 0 for (_, _, fmt) in em.counts}) + Counter(
            {fmt: sum(n for (_, _, f), n in em.counts.items() if f == fmt)
             for (_, _, fmt) in em.counts})
    assert per_format(em_ng) == per_format(em_im)


# ----------------------------------------------------- against compositions of emulated_mm

def _lin(x, w, b, arch):
    """What an emulated nn.Linear computes: fp32 accumulator, bias in the epilogue, one
    rounding to x's dtype."""
    acc = tme.emulated_mm(x.reshape(-1, x.shape[-1]), w.t(), arch=arch)
    if b is not None:
        acc = acc + b.to(torch.float32)
    return acc.to(x.dtype).reshape(*x.shape[:-1], w.shape[0])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dt,arch", [("bf16", "gfx942"), ("fp16", "sm70"), ("fp32", "sm80")])
def test_mlp_equals_a_composition_of_emulated_mm(mode, dt, arch):
    if mode == "autocast" and dt == "fp32":
        pytest.skip("autocast to fp32 is not a thing")
    dtype = DTYPES[dt]
    model = _model("mlp", torch.float32 if mode == "autocast" else dtype)
    x = _inputs("mlp", torch.float32 if mode == "autocast" else dtype)
    if mode == "train":
        x.requires_grad_()
        with emulate(arch) as em:
            y = model(x)
            gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(3)).to(y.dtype)
            y.backward(gy)
    else:
        ctx = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode,
               "autocast": lambda: torch.autocast("cpu", dtype=dtype)}[mode]
        with ctx(), emulate(arch) as em:
            y = model(x)
    assert em.recorder.native_count == 0
    W1, b1, W2, b2 = (p.detach().to(dtype) for p in (model.fc1.weight, model.fc1.bias,
                                                     model.fc2.weight, model.fc2.bias))
    xd = x.detach().to(dtype)
    h = _lin(xd, W1, b1, arch)
    # GELU: PyTorch's CUDA kernel on an NVIDIA target (preview/aten_math.py), else native
    a = aten_math.model("gelu", h) if ARCHS[arch].vendor == "nvidia" else F.gelu(h)
    ref = _lin(a, W2, b2, arch)
    assert same(y.detach(), ref)
    if mode == "train":
        # dW2 = gy^T @ gelu(h), dx = (dh) @ W1 with dh from GELU's backward (PyTorch's CUDA
        # kernel on an NVIDIA target, aten_cuda/backward.py; else native)
        g2 = gy.reshape(-1, gy.shape[-1])
        dW2 = tme.emulated_mm(g2.t(), a.reshape(-1, a.shape[-1]), arch=arch).to(dtype)
        assert same(model.fc2.weight.grad, dW2)
        dA = tme.emulated_mm(g2, W2, arch=arch).to(dtype).reshape(h.shape)
        if ARCHS[arch].vendor == "nvidia":
            dh = backward.apply("gelu_backward", dA, h).reshape(-1, h.shape[-1])
        else:
            hh = h.detach().requires_grad_()
            F.gelu(hh).backward(dA)
            dh = hh.grad.reshape(-1, h.shape[-1])
        dx = tme.emulated_mm(dh, W1, arch=arch).to(dtype).reshape(x.shape)
        assert same(x.grad, dx)
        dW1 = tme.emulated_mm(dh.t(), xd.reshape(-1, xd.shape[-1]), arch=arch).to(dtype)
        assert same(model.fc1.weight.grad, dW1)
