"""Tensor subclasses under ``emulate``: the mode returns NotImplemented for subclasses it does
not own, so they unwrap themselves and the plain-tensor products they run (``_scaled_mm``
for torchao's float8 training, ``mm`` on the inner tensors) come back and are emulated.

A spy below the mode sees no native product; a coarse spec (F=3) shows the results are the
emulated ones."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn as nn
from torch.testing._internal.two_tensor import TwoTensor

import torch_mma_emu as tme
from torch_mma_emu.preview import emulate
from helpers import rnd, same
from spy_below import BelowSpy, coarse

MODES = ("train", "no_grad", "inference_mode", "autocast")


def _ctx(mode):
    if mode == "no_grad":
        return torch.no_grad()
    if mode == "inference_mode":
        return torch.inference_mode()
    if mode == "autocast":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return torch.enable_grad()


@pytest.mark.parametrize("mode", MODES)
def test_two_tensor_wrapper_products_are_emulated_on_its_contents(mode):
    spec = coarse()
    a, a2 = rnd(5, 40), rnd(5, 40, seed=1)
    b, b2 = rnd(40, 3, seed=2), rnd(40, 3, seed=3)
    x = TwoTensor(a, a2)
    w = TwoTensor(b, b2)
    if mode == "train":
        x.requires_grad_()
    with BelowSpy() as spy, _ctx(mode), emulate(spec, record=True) as em:
        y = x @ w
        if mode == "train":
            y.sum().backward()
    assert isinstance(y, TwoTensor)
    assert same(y.a, tme.emulated_mm(a, b, arch=spec).to(y.a.dtype))
    assert same(y.b, tme.emulated_mm(a2, b2, arch=spec).to(y.b.dtype))
    assert not same(y.a, a @ b)                       # the coarse spec shows
    assert not spy.escaped, spy.escaped
    n = 4 if mode == "train" else 2                   # backward: dx = dy @ w^T, per part
    assert spy.emulated == n and em.recorder.emulated_count == n
    assert em.recorder.native_count == 0


def test_plain_tensors_are_still_handled_by_the_mode():
    A, B = rnd(4, 16), rnd(16, 4, seed=1)
    with BelowSpy() as spy, emulate(coarse()):
        y = A @ B
    assert spy.emulated == 1 and not spy.escaped
    assert same(y, tme.emulated_mm(A, B, arch=coarse()).bfloat16())


# -- torchao float8 training: Float8TrainingTensor -> _scaled_mm ---------------------------
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("mode", ["train", "no_grad", "inference_mode"])
def test_torchao_float8_training_scaled_mm_emulated_forward_and_backward(recipe, mode):
    pytest.importorskip("torchao")
    if recipe == "rowwise" and mode == "inference_mode":
        pytest.skip("torchao 0.18 raises natively here (aten.reshape with axiswise scaling)")
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 16)).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = convert_to_float8_training(
            model, config=Float8LinearConfig.from_recipe_name(recipe))
    x = rnd(16, 64, seed=4)
    if mode == "train":
        x.requires_grad_()
    with BelowSpy() as spy, _ctx(mode), emulate("H100", record=True) as em:
        y = model(x)
        if mode == "train":
            y.float().square().sum().backward()
    assert not spy.escaped, spy.escaped
    scaled = [r for r in em.records if r.kind == "scaled_mm"]
    # two Linears: forward 2 products; backward 2 each (input and weight gradients)
    assert len(scaled) == (6 if mode == "train" else 2)
    assert all(r.emulated for r in em.records), [r for r in em.records if not r.emulated]
    assert {r.phase for r in scaled} == ({"forward", "backward"} if mode == "train"
                                         else {"forward"})
    assert all(r.format.startswith("fp8_e4m3") or r.format.startswith("fp8_e5m2")
               for r in scaled), {r.format for r in scaled}
    if mode == "train":
        assert all(p.grad is not None and torch.isfinite(p.grad).all()
                   for p in model.parameters())
    assert spy.emulated >= len(scaled)
