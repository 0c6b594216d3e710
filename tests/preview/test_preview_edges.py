"""Preview edge cases found in review: conv bias rounding, transposed-conv gradients with
output_padding, non-contiguous Linear inputs, revert/re-convert, modules convert cannot swap,
policy corner cases, clear errors."""
import threading
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_mma_emu as tme
from torch_mma_emu.preview import Policy, convert, emulate, revert
from torch_mma_emu.preview.model_preview import runs_for


def _rnd(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def test_conv_bias_is_added_after_rounding_in_both_routes():
    x, w, b = _rnd(2, 3, 8, 8, dtype=torch.bfloat16), _rnd(4, 3, 3, 3, dtype=torch.bfloat16,
                                                            seed=1), _rnd(4, seed=2).bfloat16()
    with emulate("sm90"):
        y = F.conv2d(x, w, b)
        y0 = F.conv2d(x, w)
    assert torch.equal(y, y0 + b.view(1, -1, 1, 1))
    m = nn.Conv2d(3, 4, 3).bfloat16()
    m.weight.data, m.bias.data = w, b
    assert torch.equal(convert(nn.Sequential(m), "sm90")(x), y)


@pytest.mark.parametrize("kw", [dict(stride=1, dilation=2, output_padding=1),
                                dict(stride=2, padding=1, output_padding=1),
                                dict(stride=3, padding=2, output_padding=2, dilation=2)])
def test_transposed_conv_gradients_with_output_padding(kw):
    x = _rnd(2, 2, 5, 6, dtype=torch.float64).requires_grad_()
    w = _rnd(2, 3, 3, 3, dtype=torch.float64, seed=1).requires_grad_()
    with emulate("sm90"):               # fp64: the IEEE FMA chain, equal to native up to order
        F.conv_transpose2d(x, w, **kw).square().sum().backward()
    gx, gw = x.grad, w.grad
    x2, w2 = x.detach().requires_grad_(), w.detach().requires_grad_()
    F.conv_transpose2d(x2, w2, **kw).square().sum().backward()
    assert torch.allclose(gx, x2.grad, rtol=1e-12, atol=1e-12)
    assert torch.allclose(gw, w2.grad, rtol=1e-12, atol=1e-12)


def test_linear_on_non_contiguous_nd_input_matches_emulate():
    lin = nn.Linear(64, 16).bfloat16()
    x = _rnd(4, 8, 64, dtype=torch.bfloat16).transpose(0, 1)      # matmul + add_: 2 roundings
    with emulate("sm90"):
        ye = lin(x)
    assert torch.equal(convert(nn.Sequential(lin), "sm90")(x), ye)


def test_revert_keeps_reassigned_parameters_and_convert_retargets():
    m = nn.Sequential(nn.Linear(4, 4))
    convert(m, "sm90")
    p = nn.Parameter(torch.ones(4, 4))
    m[0].weight = p
    convert(m, "gfx942")
    assert m[0].policy.arch == "gfx942" and m[0].weight is p
    revert(m)
    assert type(m[0]) is nn.Linear and m[0].weight is p


def test_convert_names_the_modules_it_leaves_native():
    with pytest.warns(UserWarning, match=r"self_attn \(MultiheadAttention"):
        layer = convert(nn.TransformerEncoderLayer(16, 4, 32), "sm90")
    assert type(layer.linear1).__name__ == "EmulatedLinear"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        wn = nn.utils.weight_norm(nn.Conv1d(4, 3, 3))
    with pytest.warns(UserWarning, match="weight_norm"):
        m = convert(nn.Sequential(wn), "sm90")
    assert m[0] is wn                              # untouched: its hook still runs
    with warnings.catch_warnings():
        warnings.simplefilter("error")               # transposed convolutions are converted
        m = convert(nn.Sequential(nn.ConvTranspose2d(2, 2, 3)), "sm90")
    assert isinstance(m[0], nn.ConvTranspose2d) and type(m[0]).__name__ == \
        "EmulatedConvTranspose2d"


def test_conv_shape_errors_are_clear():
    with pytest.raises(ValueError, match="expects 3 input channels, got 2"):
        with emulate("sm90"):
            F.conv2d(_rnd(1, 2, 5, 5), _rnd(4, 3, 3, 3))
    with pytest.raises(ValueError, match="expects 3 input channels, got 2"):
        convert(nn.Conv2d(3, 4, 3), "sm90")(_rnd(1, 2, 5, 5))


def test_policy_corners():
    fp16 = torch.float16
    with_acc = Policy("sm80", fp16_accumulation=True)
    assert with_acc.plan("mm", fp16, fp16).label == "fp16 (fp16 acc)"
    assert with_acc.plan("conv", fp16, fp16).label == "fp16"          # cuBLAS-only switch
    own = Policy("gfx90a", formats={"conv": "fp16"}, fp16_alt_impl="backward")
    auto = Policy("gfx90a", fp16_alt_impl="backward")
    assert own.plan("conv", fp16, fp16, backward=True).label == \
        auto.plan("conv", fp16, fp16, backward=True).label
    two = tme.spec("sm90", "fp8_e4m3", "fp32", in_format_b="fp8_e5m2")
    with pytest.raises(ValueError, match="one input format"):
        Policy(two).plan("mm", torch.bfloat16, torch.bfloat16)


def test_autocast_leaves_fp64_alone():
    lin = nn.Linear(8, 4).double()
    m = convert(nn.Sequential(lin), "sm90")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert m(_rnd(2, 8, dtype=torch.float64)).dtype == torch.float64
        assert m[0].weight.dtype == torch.float64


def test_preview_runs_take_aliases_and_refuse_empty_formats():
    runs = runs_for(["H100", "MI300X"], ["bf16"])
    assert {r.arch for r in runs} == {"native", "sm90", "gfx942"}
    with pytest.raises(ValueError, match="unknown arch"):
        runs_for(["sm91"], ["bf16"])
    with pytest.raises(ValueError, match="has a tf32 instruction"):
        runs_for(["sm70"], ["tf32"])


def test_unrouted_matrix_ops_are_recorded():
    bil = nn.Bilinear(3, 4, 2)
    with emulate("sm90", record=True) as em:
        bil(_rnd(5, 3), _rnd(5, 4, seed=1))
    assert any(r.kind == "other" and "trilinear" in r.op for r in em.records)


def test_out_dtype_mismatch_raises_as_pytorch_does():
    A = _rnd(4, 8, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="expected out tensor to have dtype"):
        with emulate("sm90"):
            torch.mm(A, A.t(), out=torch.empty(4, 4))


def test_fast_path_restored_after_overlapping_threads():
    before = torch.backends.mha.get_fastpath_enabled()
    inside, release = threading.Event(), threading.Event()

    def worker():
        with emulate("sm90"):
            inside.set()
            release.wait(10)
    t = threading.Thread(target=worker)
    with emulate("sm80"):
        t.start()
        inside.wait(10)
    assert torch.backends.mha.get_fastpath_enabled() is False    # the thread is still inside
    release.set()
    t.join(10)
    assert torch.backends.mha.get_fastpath_enabled() == before
