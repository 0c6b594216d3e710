"""Third-party zoo, torchao: float8 training (tensorwise, rowwise scales), MX QAT (MXFP8,
MXFP4), NVFP4 QAT, MX and NVFP4 ``quantize_`` inference and float8 inference, on a small
bf16 MLP, under ``emulate`` with the spy outside it (tests/thirdparty.py).  The scaled
products need a real arch with those instructions (H100: fp8; B200: MX / NVFP4), so the
coarse spec is not used here; where this CPU can run the recipe natively (float8), the
emulated output must differ from the native one, and where it cannot (MX, NVFP4: PyTorch's
CPU ``_scaled_mm`` has no block scales) it must agree with torchao's own dequantize-then-
matmul emulation to a few bf16 ulps (same quantized operands, other accumulation)."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import thirdparty_models  # noqa: F401  (torchvision guard: transformers may be imported)
from thirdparty import check, differs, product_formats, run_spied

pytest.importorskip("torchao")
from torchao.quantization import quantize_  # noqa: E402

import torch_mma_emu as tme  # noqa: E402

def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64, bias=False), nn.ReLU(),
                         nn.Linear(64, 32, bias=False)).to(torch.bfloat16)


def _x(train=False):
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    return x.requires_grad_(train)


def _run(model, mode):
    if mode == "no_grad":
        with torch.no_grad():
            return model(_x())
    if mode == "inference_mode":
        with torch.inference_mode():
            return model(_x()).clone()
    x = _x(train=True)
    y = model(x)
    y.float().square().mean().backward()
    return y.detach()


def _scaled_counts(em):
    return {k: n for k, n in em.counts.items() if "scaled_mm" in k[0]}


# --------------------------------------------------------------- float8 training
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_float8_training(recipe):
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    model = convert_to_float8_training(_mlp(),
                                       config=Float8LinearConfig.from_recipe_name(recipe))
    try:
        native = _run(model, "train")
    except RuntimeError as e:      # torch 2.11/2.12's CPU _scaled_mm: per-tensor scales only
        if "per-tensor scaling for CPU" not in str(e):
            raise
        native = None
    out, em, spy = run_spied(lambda: _run(model, "train"), arch="H100")
    check(em, spy, what=f"float8 training {recipe}")
    phases = {ph for (op, ph, fmt) in _scaled_counts(em)}
    assert phases == {"forward", "backward"}, em.summary()     # every _scaled_mm emulated
    assert native is None or differs(out, native)


# --------------------------------------------------------------- QAT
def _qat(base):
    from torchao.quantization.qat import QATConfig
    model = _mlp()
    quantize_(model, QATConfig(base, step="prepare"))
    return model


def _mx_config(dtype, kernel="auto"):
    from torchao.prototype.mx_formats import MXDynamicActivationMXWeightConfig
    from torchao.quantization.quantize_.common.kernel_preference import KernelPreference
    return MXDynamicActivationMXWeightConfig(activation_dtype=dtype, weight_dtype=dtype,
                                             kernel_preference=KernelPreference(kernel))


def _nvfp4_config():
    from torchao.prototype.mx_formats import NVFP4DynamicActivationNVFP4WeightConfig
    return NVFP4DynamicActivationNVFP4WeightConfig(use_triton_kernel=False)


QAT = {"mxfp8": lambda: _mx_config(torch.float8_e4m3fn),
       "mxfp4": lambda: _mx_config(torch.float4_e2m1fn_x2),
       "nvfp4": _nvfp4_config}
LABEL = {"mxfp8": "MX fp8_e4m3", "mxfp4": "MX fp4_e2m1", "nvfp4": "NVFP4"}


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "train"])
@pytest.mark.parametrize("recipe", list(QAT))
def test_qat(recipe, mode):
    """The forward is torchao's block-scaled ``_scaled_mm`` on plain tensors (emulated as the
    B200 instruction), the backward its dequantized high-precision products."""
    model = _qat(QAT[recipe]())
    out, em, spy = run_spied(lambda: _run(model, mode), arch="B200")
    check(em, spy, what=f"{recipe} QAT {mode}")
    fmts = {fmt for (op, ph, fmt) in _scaled_counts(em)}
    assert fmts == {LABEL[recipe]}, em.summary()
    if recipe != "nvfp4":   # torchao's own emulation: dequantize, then a bf16 matmul
        ref = _run(_qat(_mx_config(QAT[recipe]().activation_dtype, "emulated")), "no_grad")
        torch.testing.assert_close(out.float(), ref.float(), rtol=2 ** -6, atol=2 ** -6)


def test_mx_qat_cannot_run_natively_on_this_cpu():
    """What emulate adds: PyTorch's CPU _scaled_mm has no block scales."""
    model = _qat(QAT["mxfp8"]())
    with pytest.raises((ValueError, RuntimeError, NotImplementedError)):
        _run(model, "no_grad")


# --------------------------------------------------------------- quantize_ inference
@pytest.mark.parametrize("dtype", [pytest.param(torch.float8_e4m3fn, id="mxfp8"),
                                   pytest.param(torch.float4_e2m1fn_x2, id="mxfp4")])
def test_mx_quantize_inference(dtype):
    model = _mlp()
    quantize_(model, _mx_config(dtype))
    for mode in ("no_grad", "inference_mode"):
        out, em, spy = run_spied(lambda: _run(model, mode), arch="B200")
        check(em, spy, what=f"MX quantize_ {dtype} {mode}")
        assert _scaled_counts(em)


@pytest.mark.parametrize("granularity", ["PerTensor", "PerRow"])
def test_float8_inference_with_gpu_checks_passed(granularity):
    import torchao.quantization as tq
    cfg = tq.Float8DynamicActivationFloat8WeightConfig(granularity=getattr(tq, granularity)())
    with pytest.raises(AssertionError, match="compute capability"):
        quantize_(_mlp(), cfg)                          # torchao's own check refuses here
    model = _mlp()
    native = _run(_mlp(), "no_grad")
    with tme.preview.gpu_checks_pass("H100"):
        quantize_(model, cfg)
    assert torch.cuda.is_available() is False or torch.cuda.device_count() > 0   # restored
    for mode in ("no_grad", "inference_mode"):
        out, em, spy = run_spied(lambda: _run(model, mode), arch="H100")
        check(em, spy, what=f"float8 inference {granularity} {mode}")
        assert sum(_scaled_counts(em).values()) == 2
        assert differs(out, native)


def test_nvfp4_inference_with_gpu_checks_passed():
    with pytest.raises(AssertionError, match="sm100"):
        quantize_(_mlp(), _nvfp4_config())
    model = _mlp()
    with tme.preview.gpu_checks_pass("B200"):
        quantize_(model, _nvfp4_config())
    out, em, spy = run_spied(lambda: _run(model, "no_grad"), arch="B200")
    check(em, spy, what="NVFP4 inference")


def test_gpu_checks_pass_answers_as_the_arch_and_restores():
    import torchao.utils as tu
    before = (tu.is_sm_at_least_89(), tu.is_sm_at_least_100(), torch.cuda.is_available())
    with tme.preview.gpu_checks_pass("H100"):
        assert tu.is_sm_at_least_89() and tu.is_sm_at_least_90()
        assert not tu.is_sm_at_least_100()
        assert torch.cuda.is_available()
    with tme.preview.gpu_checks_pass("sm120"):
        assert tu.is_sm_at_least_100()
    assert (tu.is_sm_at_least_89(), tu.is_sm_at_least_100(),
            torch.cuda.is_available()) == before
    with pytest.raises(ValueError, match="not an NVIDIA arch"):
        with tme.preview.gpu_checks_pass("MI300X"):
            pass


@pytest.mark.slow
def test_qat_compiled():
    torch._dynamo.reset()
    model = _qat(QAT["mxfp8"]())
    eager, *_ = run_spied(lambda: _run(model, "no_grad"), arch="B200")
    compiled = torch.compile(model, backend="aot_eager")
    out, em, spy = run_spied(lambda: _run(compiled, "no_grad"), arch="B200")
    check(em, spy, what="MX QAT compiled")
    assert torch.equal(out, eager)


def test_mxfp8_linear_needs_torchaos_triton_cast():
    """torchao's MXFP8Linear (moe_training) casts to MXFP8 with its own Triton kernel in the
    forward (kernel_preference AUTO): it refuses before any product, and no check can be
    passed for it.  Its EMULATED preference dequantizes first: bf16 products, emulated as
    such (not as the MX instruction)."""
    from torchao.prototype.moe_training.mxfp8_linear import MXFP8Linear
    from torchao.quantization.quantize_.common.kernel_preference import KernelPreference
    x = _x()
    torch.manual_seed(0)
    auto = MXFP8Linear(64, 32, bias=False).to(torch.bfloat16)
    with pytest.raises(AssertionError, match="needs triton"):
        run_spied(lambda: auto(x), arch="B200")
    emu = MXFP8Linear(64, 32, bias=False,
                      kernel_preference=KernelPreference.EMULATED).to(torch.bfloat16)
    out, em, spy = run_spied(lambda: emu(x), arch="B200")
    check(em, spy, what="MXFP8Linear EMULATED")
    assert product_formats(em) == {"bf16"}
