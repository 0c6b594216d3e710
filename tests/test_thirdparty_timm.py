"""Third-party zoo, timm: a ViT, a ResNet (resnet18) and a ConvNeXt (convnext_atto, one
block per stage) with random weights, under ``emulate`` with the coarse spec and the spy
outside it (tests/thirdparty.py): ``no_grad``, ``inference_mode``, train (forward +
backward), autocast to bf16, and ``torch.compile``.  timm needs torchvision at import time
(see ``thirdparty_models._guard_torchvision``)."""
from __future__ import annotations

import pytest
import torch

from thirdparty import check, differs, import_timm, run_spied

timm = import_timm()
import thirdparty_models as M  # noqa: E402
from helpers import same  # noqa: E402

MODES = ("no_grad", "inference_mode", "train", "autocast")


def _call(model, x, mode):
    if mode == "no_grad":
        with torch.no_grad():
            return model(x)
    if mode == "inference_mode":
        with torch.inference_mode():
            return model(x).clone()
    if mode == "autocast":
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x)
    model.train()
    try:
        y = model(x)
        y.float().square().mean().backward()
    finally:
        model.eval()
    return y.detach()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(M.TIMM))
def test_every_product_emulated(name, mode):
    model, x = M.timm_model(name), M.timm_input()
    native = _call(model, x, mode)
    model.zero_grad(set_to_none=True)
    out, em, spy = run_spied(lambda: _call(model, x, mode))
    check(em, spy, what=f"timm {name} {mode}")
    assert differs(out, native), f"{name} {mode}: the emulated output is the native one"
    if mode == "train":
        assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", list(M.TIMM))
def test_inference_mode_gives_no_grad_bits(name):
    model, x = M.timm_model(name), M.timm_input()
    a, *_ = run_spied(lambda: _call(model, x, "no_grad"))
    b, *_ = run_spied(lambda: _call(model, x, "inference_mode"))
    assert same(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("name,backend", [("vit", "aot_eager"), ("convnext", "aot_eager"),
                                          ("resnet", "inductor")])
def test_compile(name, backend):
    torch._dynamo.reset()
    model, x = M.timm_model(name), M.timm_input()
    eager, *_ = run_spied(lambda: _call(model, x, "no_grad"))
    compiled = torch.compile(model, backend=backend)
    out, em, spy = run_spied(lambda: _call(compiled, x, "no_grad"))
    check(em, spy, what=f"timm {name} compiled {backend}")
    if backend == "aot_eager":
        assert same(out, eager)
