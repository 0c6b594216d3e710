"""fp16 training under emulation: the CDNA2 subnormal flush that stalls training
(seed 003 section 2.2; PyTorch's note on MI200), reproduced on a synthetic task.

The task (docs/preview.md, section "scripts/train_preview.py: fp16 training on CDNA2"): a
deep, narrow tanh MLP fits a smooth teacher function of 16 inputs, in fp16 (activations,
weights and gradients; fp32 master weights; full-batch SGD; no loss scaling). The loss is an
fp32 mean over N = 512 rows, so the output gradient is ``2 * residual / N`` (about 1e-4),
and each layer the backward pass goes through multiplies it by weights of gain 0.8 and tanh'
<= 1: the gradients reaching the first layers are below fp16's smallest normal number 2**-14
= 6.1e-5, i.e. subnormal. An sm80 tensor core takes subnormal fp16 inputs; the gfx90a MFMA
flushes them to zero, so those layers' weight gradients are exactly zero and they never
train. Loss scaling (x1024) or the bf16 "alternate implementation" rocBLAS/MIOpen use for
the backward pass on MI200 avoid the flush. Nothing is forced: the flush happens inside
``emulated_mm``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn as nn

from .mode import emulate

__all__ = ["TaskConfig", "TrainResult", "make_mlp", "make_task", "train"]


@dataclass(frozen=True)
class TaskConfig:
    n: int = 512            # rows (full batch)
    d_in: int = 16
    hidden: int = 32
    depth: int = 5          # hidden layers
    gain: float = 0.8       # weight scale relative to variance-preserving init
    target_std: float = 0.1
    lr: float = 0.3
    steps: int = 300
    seed: int = 0


@dataclass
class TrainResult:
    label: str
    losses: list = field(default_factory=list)
    zero_grad: list = field(default_factory=list)      # per Linear: fraction of dW == 0
    subnormal_grad: list = field(default_factory=list)  # per Linear: dY entries subnormal
    seconds: float = 0.0


def make_mlp(c: TaskConfig, seed: int, depth: Optional[int] = None,
             hidden: Optional[int] = None, gain: Optional[float] = None) -> nn.Sequential:
    depth = c.depth if depth is None else depth
    hidden = c.hidden if hidden is None else hidden
    gain = c.gain if gain is None else gain
    g = torch.Generator().manual_seed(seed)
    layers, d = [], c.d_in
    for _ in range(depth):
        layers += [nn.Linear(d, hidden), nn.Tanh()]
        d = hidden
    layers.append(nn.Linear(d, 1))
    m = nn.Sequential(*layers)
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() > 1:   # uniform with variance gain^2 / fan_in
                p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) * gain * (3 / p.shape[1]) ** 0.5)
            else:
                p.zero_()
    return m


def make_task(c: TaskConfig):
    """Inputs (n, d_in) and targets (n, 1): a random 2-layer tanh teacher, scaled to
    ``target_std``."""
    g = torch.Generator().manual_seed(c.seed + 1)
    X = torch.randn(c.n, c.d_in, generator=g)
    teacher = make_mlp(c, seed=c.seed + 123, depth=2, hidden=32, gain=1.0)
    with torch.no_grad():
        y = teacher(X)
    return X, y / y.std() * c.target_std


def train(c: TaskConfig, arch: Optional[str], *, loss_scale: float = 1.0,
          fp16_alt_impl: str = "off", label: Optional[str] = None) -> TrainResult:
    """Train the fp16 MLP with every product emulated on ``arch`` (None: native)."""
    X, Y = make_task(c)
    Xh = X.half()
    model = make_mlp(c, seed=c.seed).half()
    master = [p.detach().float().clone() for p in model.parameters()]
    linears = [m for m in model if isinstance(m, nn.Linear)]
    res = TrainResult(label or f"{arch or 'native'}")
    tiny = torch.finfo(torch.float16).tiny
    sub_stats = [0.0] * len(linears)

    def watch(i):  # record how much of the gradient reaching layer i's output is subnormal
        def on_grad(g):
            g = g.float().abs()
            sub_stats[i] = float(((g > 0) & (g < tiny)).float().mean())

        def fwd_hook(_m, _inp, out):
            if out.requires_grad:
                out.register_hook(on_grad)
        return fwd_hook
    hooks = [lin.register_forward_hook(watch(i)) for i, lin in enumerate(linears)]
    mode = emulate(arch, fp16_alt_impl=fp16_alt_impl) if arch else None
    t0 = time.perf_counter()
    try:
        for _ in range(c.steps):
            for p in model.parameters():
                p.grad = None
            if mode is not None:
                mode.__enter__()
            try:
                out = model(Xh).float()
                loss = ((out - Y) ** 2).mean()
                (loss * loss_scale).backward()
            finally:
                if mode is not None:
                    mode.__exit__(None, None, None)
            with torch.no_grad():
                for p, mp in zip(model.parameters(), master):
                    mp -= c.lr * (p.grad.float() / loss_scale)
                    p.copy_(mp.half())
            res.losses.append(float(loss.detach()))
    finally:
        for h in hooks:
            h.remove()
    res.seconds = time.perf_counter() - t0
    res.zero_grad = [float((lin.weight.grad == 0).float().mean()) for lin in linears]
    res.subnormal_grad = list(sub_stats)
    return res
