"""Third-party zoo, transformers: tiny Llama, Qwen2, GPT-2, BERT, T5 (encoder-decoder),
Mixtral (MoE) and ViT (vision) built from configs with random weights, run under ``emulate``
with the coarse spec and the spy outside it (tests/thirdparty.py), in eval (grad enabled),
``no_grad``, ``inference_mode``, train (forward + backward of the model's own loss),
``generate`` and ``torch.compile``.  Every case fails on an error, on a product that reached
the spy without a native record, on a native product at all, and on an output equal to the
native one (the spec did not show).  Attention implementations: sdpa (the default), eager
and flex_attention (compiled by transformers with Inductor)."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")
import thirdparty_models as M  # noqa: E402
from helpers import same  # noqa: E402
from thirdparty import (check, differs, first_tensor, native_calls, product_formats,  # noqa: E402
                        run_spied)

MODES = ("eval", "no_grad", "inference_mode", "train")
LMS = ("llama", "qwen2", "gpt2", "t5", "mixtral")


def _model(name, **kw):
    model = M.FACTORIES[name](**kw)
    return model, M.inputs(name)


def _call(model, name, kw, mode):
    """One forward (and backward, in train) in ``mode``; returns the main output tensor."""
    if mode == "no_grad":
        with torch.no_grad():
            return first_tensor(model(**kw))
    if mode == "inference_mode":
        with torch.inference_mode():
            return first_tensor(model(**kw)).clone()
    if mode == "train":
        model.train()
        try:
            out = model(**kw, **M.labels_for(name, kw))
            out.loss.backward()
        finally:
            model.eval()
        return first_tensor(out).detach()
    return first_tensor(model(**kw)).detach()


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _cases():
    for name in M.FACTORIES:
        for mode in MODES:
            yield pytest.param(name, mode, id=f"{name}-{mode}")


@pytest.mark.parametrize("name,mode", list(_cases()))
def test_every_product_emulated(name, mode):
    model, kw = _model(name)
    with torch.no_grad():
        native = first_tensor(model(**kw))
    if mode == "train":
        model.train()
        model(**kw, **M.labels_for(name, kw)).loss.backward()
        model.eval()
        native_grads = _grads(model)
        model.zero_grad(set_to_none=True)
    out, em, spy = run_spied(lambda: _call(model, name, kw, mode))
    check(em, spy, what=f"{name} {mode}")
    if mode == "train":     # dropout draws other masks than the native run: gradients only
        grads = _grads(model)
        assert grads.keys() == native_grads.keys()
        assert any(differs(grads[k], native_grads[k]) for k in grads)
    else:
        assert differs(out, native), f"{name} {mode}: the emulated output is the native one"


def _bf16_cases():
    for name in M.FACTORIES:
        yield pytest.param(name, id=name)


@pytest.mark.parametrize("name", list(_bf16_cases()))
def test_bf16_model_in_bf16_in_every_mode(name):
    """A bf16 model on a real arch: every product emulated as bf16, and the eval forward
    (grad enabled), no_grad and inference_mode give the same bits."""
    model, kw = _model(name)
    model = model.to(torch.bfloat16)
    kw = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in kw.items()}
    outs = {}
    for mode in ("eval", "no_grad", "inference_mode"):
        outs[mode], em, spy = run_spied(lambda: _call(model, name, kw, mode), arch="sm90")
        check(em, spy, what=f"{name} bf16 {mode}")
        formats = product_formats(em)
        assert formats == {"bf16"}, f"{name} {mode}: products in {formats}\n{em.summary()}"
    assert same(outs["no_grad"], outs["inference_mode"])
    assert same(outs["eval"], outs["no_grad"])


@pytest.mark.parametrize("name", LMS)
def test_generate(name):
    model, kw = _model(name)
    kw = dict(kw)
    kw.pop("decoder_input_ids", None)
    gen = dict(max_new_tokens=3, do_sample=False)
    native = model.generate(**kw, **gen)
    out, em, spy = run_spied(lambda: model.generate(**kw, **gen))
    check(em, spy, what=f"{name} generate")
    assert out.shape == native.shape
    scores, em2, spy2 = run_spied(lambda: model.generate(**kw, **gen, output_scores=True,
                                                         return_dict_in_generate=True))
    check(em2, spy2, what=f"{name} generate scores")


@pytest.mark.parametrize("experts", ["eager", "batched_mm", "grouped_mm"])
def test_mixtral_experts(experts):
    """Mixtral's experts implementations: a loop of Linear products, one batched product,
    and ``aten._grouped_mm`` (the default)."""
    model, kw = _model("mixtral", experts=experts)
    assert model.config._experts_implementation == experts
    with torch.no_grad():
        native = first_tensor(model(**kw))
    for mode in MODES:
        out, em, spy = run_spied(lambda: _call(model, "mixtral", kw, mode))
        check(em, spy, what=f"mixtral experts={experts} {mode}")
        if mode != "train":
            assert differs(out, native)


@pytest.mark.parametrize("name,attn", [
    ("llama", "eager"), ("gpt2", "eager"), ("bert", "eager"), ("t5", "eager")])
def test_attention_implementations(name, attn):
    model, kw = _model(name, attn=attn)
    for mode in ("no_grad", "train"):
        out, em, spy = run_spied(lambda: _call(model, name, kw, mode))
        check(em, spy, what=f"{name} attn={attn} {mode}")


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_flex_attention_in_every_mode(name):
    """attn_implementation="flex_attention": transformers calls ``torch.compile(
    flex_attention)`` (Inductor), in training too, with grad enabled on CPU (which PyTorch
    alone refuses).  Emulated forward and backward (a bf16 model gives the same bits in
    eval, no_grad and inference_mode: the slow test below)."""
    model, kw = _model(name, attn="flex_attention")
    with torch.no_grad():
        native = first_tensor(_model(name)[0](**kw))        # the same weights, native SDPA
    for mode in MODES:
        out, em, spy = run_spied(lambda: _call(model, name, kw, mode))
        check(em, spy, what=f"{name} flex {mode}")
        flex = {(op, ph) for (op, ph, _fmt) in em.counts if op.startswith("flex")}
        want = {("flex_attention", "forward")}
        if mode == "train":
            want.add(("flex_attention_backward", "backward"))
        assert flex == want, (mode, em.summary())
        if mode != "train":
            assert differs(out, native), f"{name} flex {mode}: the native output"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_flex_attention_bf16_same_bits_in_every_mode(name):
    model, kw = _model(name, attn="flex_attention")
    model = model.to(torch.bfloat16)
    outs = {}
    for mode in ("eval", "no_grad", "inference_mode"):
        outs[mode], em, spy = run_spied(lambda: _call(model, name, kw, mode), arch="sm90")
        check(em, spy, what=f"{name} flex bf16 {mode}")
        assert product_formats(em) == {"bf16"}, em.summary()
    assert same(outs["eval"], outs["no_grad"]) and same(outs["no_grad"],
                                                        outs["inference_mode"])


# ------------------------------------------------------------------ torch.compile

def _compiled_case(name, backend, experts=None, mode="no_grad"):
    torch._dynamo.reset()
    model, kw = _model(name) if experts is None else _model(name, experts=experts)
    with torch.no_grad():
        eager, em0, _ = run_spied(lambda: first_tensor(model(**kw)))
    compiled = torch.compile(model, backend=backend)
    out, em, spy = run_spied(lambda: _call(compiled, name, kw, mode))
    check(em, spy, what=f"{name} compiled {backend} {mode}")
    return out, eager


def test_compile_aot_eager_gives_eager_bits():
    out, eager = _compiled_case("llama", "aot_eager")
    assert same(out, eager)


def test_compiled_bf16_t5_runs_the_targets_attention():
    """T5's position bias requires grad in a grad-enabled forward: this CPU would take its
    fp32 math path, the GPU a fused kernel.  Compiled code follows the target as eager code
    does: bf16 products only, eager's bits."""
    torch._dynamo.reset()
    model, kw = _model("t5")
    model = model.to(torch.bfloat16)
    outs = {}
    for backend in ("eager", "aot_eager"):
        m = model if backend == "eager" else torch.compile(model, backend=backend)
        outs[backend], em, spy = run_spied(lambda: _call(m, "t5", kw, "eval"), arch="sm90")
        check(em, spy, what=f"t5 bf16 {backend}")
        assert product_formats(em) == {"bf16"}, em.summary()
    assert same(outs["eager"], outs["aot_eager"])


@pytest.mark.slow
@pytest.mark.parametrize("name,backend,mode", [
    ("llama", "inductor", "no_grad"), ("gpt2", "inductor", "no_grad"),
    ("t5", "aot_eager", "no_grad"), ("bert", "aot_eager", "train"),
    ("llama", "aot_eager", "train"), ("vit", "inductor", "no_grad")])
def test_compile(name, backend, mode):
    _compiled_case(name, backend, mode=mode)


@pytest.mark.slow
@pytest.mark.parametrize("experts", ["grouped_mm", "batched_mm"])
def test_compile_mixtral(experts):
    """Compiled fp32 Mixtral: transformers replaces ``_grouped_mm`` by its own custom op
    ``transformers::grouped_mm_fallback`` (fp32 under Dynamo), whose products must be seen."""
    _compiled_case("mixtral", "aot_eager", experts=experts)


def test_the_check_fails_on_native_and_unrecorded_products():
    """The check itself: products left native on purpose (``formats``) are recorded, seen by
    the spy and rejected unless allowed; a product run under the spy but outside emulate is
    an unrecorded escape."""
    model, kw = _model("llama")
    out, em, spy = run_spied(lambda: _call(model, "llama", kw, "no_grad"),
                             formats={"mm": "native"})
    nat = native_calls(em)
    assert nat and dict(spy.seen) == dict(nat)
    check(em, spy, allow_native=True)
    with pytest.raises(AssertionError, match="ran natively"):
        check(em, spy)
    with spy:
        torch.randn(3, 4) @ torch.randn(4, 2)
    with pytest.raises(AssertionError, match="without a record"):
        check(em, spy, allow_native=True)
