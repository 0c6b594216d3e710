"""Ops of other libraries under ``emulate``: a custom op with a Python kernel runs its own
kernel with the mode on (the products inside are emulated), eager and under torch.compile,
forward and backward; an opaque compiled kernel is recorded and warned about by name."""
from __future__ import annotations

import warnings

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu.preview import emulate
from helpers import rnd, same
from spy_below import BelowSpy, coarse

MODES = ("train", "no_grad", "inference_mode", "autocast")


@torch.library.custom_op("mma_emu_test::two_products", mutates_args=())
def two_products(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return (a @ b) @ c


@two_products.register_fake
def _(a, b, c):
    return a.new_empty(a.shape[0], c.shape[1])


@torch.library.custom_op("mma_emu_test::mm_backward", mutates_args=())
def _mm_backward(a: torch.Tensor, b: torch.Tensor, g: torch.Tensor) -> list[torch.Tensor]:
    return [g @ b.t(), a.t() @ g]


@torch.library.custom_op("mma_emu_test::mm_with_grad", mutates_args=())
def mm_with_grad(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


@mm_with_grad.register_fake
def _(a, b):
    return a.new_empty(a.shape[0], b.shape[1])


def _setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _backward(ctx, g):
    a, b = ctx.saved_tensors
    ga, gb = torch.ops.mma_emu_test.mm_backward(a, b, g)
    return ga, gb


mm_with_grad.register_autograd(_backward, setup_context=_setup)

_lib = torch.library.Library("mma_emu_test", "DEF")
_lib.define("impl_mm(Tensor a, Tensor b) -> Tensor")
_lib.impl("impl_mm", lambda a, b: torch.mm(a, b), "CPU")


def _ctx(mode):
    return {"no_grad": torch.no_grad(), "inference_mode": torch.inference_mode(),
            "autocast": torch.autocast("cpu", dtype=torch.bfloat16)}.get(mode,
                                                                         torch.enable_grad())


def _e(a, b, spec):
    return tme.emulated_mm(a, b, arch=spec).to(a.dtype)


@pytest.mark.parametrize("mode", MODES)
def test_custom_op_python_kernel_products_are_emulated(mode):
    spec = coarse()
    a, b, c = rnd(4, 32), rnd(32, 16, seed=1), rnd(16, 3, seed=2)
    with BelowSpy() as spy, _ctx(mode), emulate(spec, record=True) as em:
        y = two_products(a, b, c)
        z = torch.ops.mma_emu_test.impl_mm(a, b)
    assert same(y, _e(_e(a, b, spec), c, spec)) and same(z, _e(a, b, spec))
    assert not same(y, (a @ b) @ c)
    assert not spy.escaped, spy.escaped
    assert em.recorder.emulated_count == 3 and em.recorder.native_count == 0


@pytest.mark.parametrize("mode", ["train", "autocast"])
def test_custom_op_backward_op_products_are_emulated(mode):
    spec = coarse()
    a = rnd(4, 32).requires_grad_()
    b = rnd(32, 5, seed=1).requires_grad_()
    g = rnd(4, 5, seed=3)
    with BelowSpy() as spy, _ctx(mode), emulate(spec, record=True) as em:
        y = mm_with_grad(a, b)
        y.backward(g)
    assert not spy.escaped, spy.escaped
    assert same(y, _e(a.detach(), b.detach(), spec))
    assert same(a.grad, _e(g, b.detach().t(), spec))
    assert same(b.grad, _e(a.detach().t(), g, spec))
    assert sorted(r.phase for r in em.records) == ["backward", "backward", "forward"]


def test_custom_op_under_torch_compile_is_emulated():
    spec = coarse()
    a, b, c = rnd(4, 32), rnd(32, 16, seed=1), rnd(16, 3, seed=2)
    f = torch.compile(lambda a, b, c: two_products(a, b, c) + 1, backend="aot_eager",
                      fullgraph=True)
    with BelowSpy() as spy, emulate(spec, record=True) as em:
        y = f(a, b, c)
    assert same(y, _e(_e(a, b, spec), c, spec) + 1)
    assert not spy.escaped, spy.escaped
    assert em.recorder.emulated_count == 2


def test_opaque_compiled_kernel_of_another_library_is_recorded_and_warned():
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        pytest.skip("no fbgemm in this build")
    W, x = torch.randn(6, 16), torch.randn(3, 16)
    packed = torch.ops._quantized.wrapped_fbgemm_pack_gemm_matrix_fp16(W)
    with pytest.warns(UserWarning, match="wrapped_fbgemm_linear_fp16_weight.*natively"):
        with emulate("sm90", record=True) as em:
            torch.ops._quantized.wrapped_fbgemm_linear_fp16_weight(x, packed, torch.zeros(6), 6)
    assert any("wrapped_fbgemm_linear_fp16_weight" in r.op and not r.emulated
               for r in em.records)


def test_collectives_and_profiler_ops_pass_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with emulate("sm90", record=True) as em:
            with torch.profiler.record_function("region"):
                rnd(2, 2) + 1
    assert {r.op for r in em.records} <= {"aten.mul.Tensor", "aten.add.Tensor"}   # the arithmetic


# -- transformers' MoE fallback (a custom op looping over experts with torch.mm(out=)) -----
@pytest.mark.parametrize("compiled", [False, True])
def test_transformers_grouped_mm_fallback_is_emulated(compiled):
    pytest.importorskip("transformers")
    from transformers.integrations import moe
    x = rnd(9, 24, dtype=torch.float32, seed=1)
    w = rnd(3, 24, 5, dtype=torch.float32, seed=2)
    offs = torch.tensor([3, 3, 9], dtype=torch.int32)
    spec = coarse(fmt="bf16")

    def experts(x, w, offs):
        # what transformers' _grouped_mm falls back to under torch.compile for fp32 weights
        return moe._grouped_mm(x, w, offs)
    f = torch.compile(experts, backend="aot_eager", fullgraph=True) if compiled else \
        (lambda x, w, offs: torch.ops.transformers.grouped_mm_fallback(x, w, offs))
    with BelowSpy() as spy, emulate(spec, record=True) as em:
        y = f(x, w, offs)
    assert not spy.escaped, spy.escaped
    assert spy.other.get("transformers::grouped_mm_fallback", 0) == 0
    ref = torch.zeros(9, 5)
    for lo, hi, g in ((0, 3, 0), (3, 9, 2)):      # fp32 operands cast to the spec's bf16
        ref[lo:hi] = tme.emulated_mm(x[lo:hi].bfloat16(), w[g].bfloat16(), arch=spec)
    assert same(y, ref)
    assert em.recorder.emulated_count == 2
