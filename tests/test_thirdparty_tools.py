"""The tools on third-party models: ``tme.convert`` on transformers' GPT-2 (its ``Conv1D``
swapped, its attention named in a warning) and ``mma-emu preview --model <a transformers
factory>`` (ModelOutput outputs, default layers returning ModelOutputs, no matplotlib)."""
from __future__ import annotations

import sys
import warnings

import pytest
import torch

pytest.importorskip("transformers")
import thirdparty_models as M  # noqa: E402
from helpers import same  # noqa: E402
from thirdparty import COARSE, product_counts, run_spied  # noqa: E402

import torch_mma_emu as tme  # noqa: E402
from torch_mma_emu.cli import main  # noqa: E402
from torch_mma_emu.preview.divergence import main_tensor  # noqa: E402


def _conv1d_layers(model):
    return [m for m in model.modules() if type(m).__name__ in ("Conv1D", "EmulatedConv1D")]


def test_convert_swaps_gpt2_conv1d_and_names_its_attention():
    model = M.gpt2()
    n = len(_conv1d_layers(model))
    with pytest.warns(UserWarning, match=r"h\.0\.attn \(GPT2Attention\)") as rec:
        tme.convert(model, COARSE)
    layers = _conv1d_layers(model)
    assert len(layers) == n == 8 and all(type(m).__name__ == "EmulatedConv1D" for m in layers)
    from transformers.pytorch_utils import Conv1D
    assert all(isinstance(m, Conv1D) for m in layers)        # still a Conv1D
    assert not any("keep running natively: h." in str(w.message) for w in rec)
    tme.revert(model)
    assert all(type(m).__name__ == "Conv1D" for m in _conv1d_layers(model))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_converted_conv1d_gives_emulates_bits_forward_and_backward(dtype):
    """One Conv1D: the converted module and ``emulate`` on the original run the same
    products (addmm with a transposed weight; its backward's two mm)."""
    from transformers.pytorch_utils import Conv1D
    torch.manual_seed(0)
    layer = Conv1D(24, 16).to(dtype)
    layer.bias.data.normal_()
    x = torch.randn(2, 5, 16, dtype=dtype)

    def run(mod):
        xx = x.clone().requires_grad_(True)
        y = mod(xx)
        y.float().square().sum().backward()
        out = (y.detach(), xx.grad, mod.weight.grad.clone(), mod.bias.grad.clone())
        mod.zero_grad(set_to_none=True)
        return out
    with tme.emulate(COARSE):
        want = run(layer)
    native = run(layer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        conv = tme.convert(layer, COARSE)
    got, em, spy = run_spied(lambda: run(conv), arch="sm90")   # no product reaches a mode
    assert not spy.seen and not product_counts(em)
    for g, w, nat in zip(got, want, native):
        assert same(g, w)
    assert not same(got[0], native[0])


def test_converted_gpt2_is_emulated_except_its_attention():
    model = M.gpt2()
    kw = M.inputs("gpt2")
    with torch.no_grad():
        native = model(**kw).logits
        with pytest.warns(UserWarning, match="attention products"):
            tme.convert(model, COARSE)
        out, em, spy = run_spied(lambda: model(**kw).logits, arch="sm90")
    # every Linear product is emulated inside the modules; only attention reaches the modes
    assert set(spy.seen) == set()
    assert {op for (op, _ph, _f) in product_counts(em)} == {   # the target's (sdpa_route)
        "aten._scaled_dot_product_efficient_attention.default"}
    assert not same(out, native)


def test_main_tensor_of_model_outputs():
    from transformers.modeling_outputs import BaseModelOutput, CausalLMOutput
    t = torch.ones(2)
    assert main_tensor(CausalLMOutput(loss=torch.zeros(()), logits=t)) is t
    assert main_tensor(BaseModelOutput(last_hidden_state=t)) is t
    assert main_tensor((None, [t])) is t
    assert main_tensor({"a": None, "b": t}) is t
    with pytest.raises(TypeError, match="holds no tensor"):
        main_tensor((None, 3), "layer x")


def _preview(tmp_path, *extra):
    return main(["preview", "--model", "thirdparty_models:llama_for_preview", "--input",
                 "randint:64:2,8", "--arch", "sm80,MI300X", "--formats", "bf16",
                 "--no-progress", "--out", str(tmp_path / "pv.png"), *extra])


def test_cli_preview_of_a_transformers_model(tmp_path, capsys):
    assert _preview(tmp_path) == 0
    out = capsys.readouterr().out
    assert "per layer against the fp64 run" in out
    header = next(line for line in out.splitlines() if line.startswith("format") and
                  "lm_head" in line)
    assert "model" in header and "output" in header
    assert (tmp_path / "pv.png").exists() and (tmp_path / "pv.json").exists()


def test_cli_preview_without_matplotlib(tmp_path, capsys, monkeypatch):
    for name in [m for m in sys.modules if m.split(".")[0] == "matplotlib"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # import matplotlib fails
    assert _preview(tmp_path) == 0
    out = capsys.readouterr().out
    assert "no plot: matplotlib is not installed" in out and "lm_head" in out
    assert not (tmp_path / "pv.png").exists() and (tmp_path / "pv.json").exists()
