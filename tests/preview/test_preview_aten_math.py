"""Under emulate: PyTorch's CUDA elementwise math gives the modelled bits (aten_math.py, the
models checked against nvcc's PTX in tests/test_aten_elementwise.py), and every other op that
computes natively is named once in em.summary() (census.py): a Linear -> LayerNorm -> GELU
-> Linear -> softmax -> sum model, TinyGPT and (where transformers imports) a small Llama and
Qwen2, each checked against an independent spy that lists every aten op the model runs."""
from collections import Counter

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from torch_mma_emu.aten_cuda import elementwise as ew
from torch_mma_emu.preview import aten_math, emulate
from torch_mma_emu.preview.census import is_bookkeeping
from torch_mma_emu.preview.records import format_natives
from torch_mma_emu.preview.tiny_gpt import tiny_gpt
from helpers import same

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
CALLS = {
    "exp": torch.exp, "log": torch.log, "tanh": torch.tanh, "erf": torch.erf,
    "rsqrt": torch.rsqrt, "sigmoid": torch.sigmoid, "silu": F.silu, "gelu": F.gelu,
    "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"),
}


def _x(dtype, n=4096, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * 4
    x[:4] = torch.tensor([0.0, -0.0, float("inf"), float("nan")])
    return x.to(dtype)


def _want(name, x):
    """The model on x's values, through aten_cuda directly (not the handler)."""
    d = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}[x.dtype]
    a = x.contiguous().view(torch.int16).numpy().view(np.uint16) if d == "bfloat16" \
        else x.contiguous().numpy()
    y = ew.evaluate(name, a, d)
    if d == "bfloat16":
        return torch.from_numpy(y.view(np.int16)).view(torch.bfloat16).reshape(x.shape)
    return torch.from_numpy(y).reshape(x.shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(CALLS))
def test_each_op_gives_the_modelled_bits_and_is_recorded(name, dtype):
    x = _x(dtype)
    if name in ("log", "rsqrt"):
        x = x.abs()
    with emulate("sm90", record=True) as em:
        got = CALLS[name](x)
    assert same(got, _want(name, x))
    assert len(em.records) == 1 and em.records[0].kind == "elementwise"
    assert em.records[0].format == f"torch {ew.TORCH_VERSION} CUDA kernel"
    assert "2.13.0" in em.summary() and not em.recorder.natives


def test_the_gpu_bits_are_not_the_cpu_bits():
    x = _x(torch.float32, 20000)
    with emulate("sm80"):
        got = torch.exp(x), F.gelu(x)
    assert (got[0] != torch.exp(x)).float().mean() > 0.05
    assert (got[1] != F.gelu(x)).float().mean() > 0.02


def test_out_inplace_and_strided_forms():
    x = _x(torch.float32, 64).reshape(8, 8).t()           # not contiguous
    want = _want("tanh", x.contiguous())
    with emulate("sm90", record=True) as em:
        y = torch.tanh(x)
        out = torch.empty(8, 8)
        torch.tanh(x, out=out)
        z = x.clone()
        z.tanh_()
        s = torch.sigmoid(torch.arange(5))                # integer input: float kernel
    assert same(y, want) and same(out, want) and same(z, want)
    assert y.stride() == x.stride()                        # laid out as the input
    assert same(s, _want("sigmoid", torch.arange(5).float()))
    assert [r.op for r in em.records if r.op != "aten.arange.default"] == [
        "aten.tanh.default", "aten.tanh.out", "aten.tanh_.default", "aten.sigmoid.default"]


def test_amd_targets_and_float64_stay_native_and_are_named():
    x = _x(torch.float32, 256)
    with emulate("gfx942", record=True) as em:
        y = torch.exp(x)
    assert same(y, torch.exp(x)) and not em.records
    assert em.recorder.natives == Counter({"aten.exp": 1})
    with emulate("sm90") as em:
        y = torch.exp(x.double())
    assert same(y, torch.exp(x.double()))
    assert em.recorder.natives == Counter({"aten.exp": 1})


# ------------------------------------------------------------------------ the census

class Spy(TorchDispatchMode):
    """Counts every aten op a model sends (run natively, no emulate)."""

    def __init__(self):
        super().__init__()
        self.ops: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if isinstance(func, torch._ops.OpOverload) and not is_bookkeeping(func):
            self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def test_view_backwards_only_move_bits():
    """slice / select / diagonal backward are bookkeeping: zeros with the gradient's bits
    copied in (compared bit for bit with such a tensor built by hand)."""
    g = torch.randn(3, 4, dtype=torch.float32)
    shape = [5, 4]
    cases = [
        (torch.ops.aten.slice_backward.default, (g, shape, 0, 1, 4, 1), (slice(1, 4), slice(None))),
        (torch.ops.aten.select_backward.default, (g[0], shape, 0, 2), (2,)),
        (torch.ops.aten.diagonal_backward.default, (g[0, :4], [4, 4], 0, 0, 1), None),
    ]
    for func, args, where in cases:
        assert is_bookkeeping(func), func
        got = func(*args)
        want = torch.zeros(args[1])
        if where is None:
            want.diagonal().copy_(args[0])
        else:
            want[where] = args[0]
        assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    # their neighbours that sum stay counted
    assert not is_bookkeeping(torch.ops.aten.unfold_backward.default)
    assert not is_bookkeeping(torch.ops.aten.sum.dim_IntList)


def _attention_as_one(ops: Counter) -> Counter:
    """SDPA calls counted as one family: under emulate the op is the target GPU's choice
    (sdpa_route.py), natively the CPU's."""
    out = Counter()
    for op, n in ops.items():
        key = "attention" + ("_backward" if op.endswith("backward") else "") \
            if "scaled_dot_product" in op else op
        out[key] += n
    return out


def _census_holds(step, arch):
    """Every computing op of ``step`` is either recorded or counted in the census, at least
    as many times as it runs natively; returns the block."""
    spy = Spy()
    with spy:
        step()
    with emulate(arch, record=True) as em:
        step()
    recorded = Counter(str(r.op).rsplit(".", 1)[0] for r in em.records)
    seen = _attention_as_one(recorded + em.recorder.natives)
    ran = _attention_as_one(spy.ops)
    # every call the model makes is recorded or counted; emulate may run more of an op
    # than the CPU (the target's attention op without GQA sums its expanded heads' grads)
    assert not (ran - seen) and set(seen) == set(ran), (seen - ran, ran - seen)
    for op in em.recorder.natives:                         # named once, in the summary
        assert em.summary().count(f"{op} x") == 1
    return em


def test_the_issue_model_names_every_native_op():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 8))
    x = torch.randn(4, 16)

    def step():
        m.zero_grad()
        m(x).softmax(-1).sum().backward()
    em = _census_holds(step, "sm90")
    text = em.summary()
    assert "aten.gelu.default" in text and "CUDA kernel" in text        # modelled
    # forward and backward are modelled, layer_norm's dgamma / dbeta included; nothing is
    # left for the "ran natively" line (the census)
    assert "ran natively, in the CPU's order:" not in text and not em.recorder.natives
    pairs = {(r.op, r.format) for r in em.records}
    assert ("aten.native_layer_norm_backward.default (dgamma, dbeta)",
            "torch 2.13.0 CUDA kernel") in pairs
    assert ("aten.native_layer_norm_backward.default", "torch 2.13.0 CUDA kernel") in pairs
    modelled = {r.op for r in em.records if r.kernel}
    assert {"aten._softmax.default", "aten.native_layer_norm.default"} <= modelled
    # the backward kernels are modelled too (aten_cuda/backward.py, softmax_backward.py)
    assert {"aten._softmax_backward_data.default", "aten.gelu_backward.default"} <= {
        r.op for r in em.records if r.format.startswith("torch ")}
    for op in ("aten._softmax_backward_data", "aten.gelu_backward"):
        assert op not in em.recorder.natives, text


def test_cumsum_is_named_with_its_count():
    x = torch.randn(5, 3)
    with emulate("sm80") as em:
        for _ in range(3):
            torch.cumsum(x, 0)
    assert "ran natively, in the CPU's order: aten.cumsum x3" in em.summary()


def test_format_natives_wraps_and_orders():
    text = format_natives(Counter({f"aten.op{i}": i for i in range(1, 30)}), width=60)
    assert text.startswith("ran natively, in the CPU's order: aten.op29 x29,\n    aten.op28 x28")
    assert all(len(line) <= 60 for line in text.splitlines()) and text.endswith("aten.op1 x1")
    assert format_natives(Counter()) == ""


@pytest.mark.parametrize("arch", ["sm80", "sm90"])
def test_tiny_gpt_every_op_modelled_or_named(arch):
    model = tiny_gpt(seed=1, n_layer=1, d_model=32, d_ff=64, vocab=64, seq=8)
    idx = model.example_inputs(2)

    def step():
        model.zero_grad()
        model(idx).float().logsumexp(-1).sum().backward()
    em = _census_holds(step, arch)
    assert any(r.op == "aten.gelu.default" for r in em.records)


def _transformers_models():
    pytest.importorskip("transformers")
    try:
        from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    except Exception:
        # a torchvision built for another torch breaks transformers' image helpers, which
        # the language models do not use: tell transformers it is absent and import again
        import transformers.utils as tu
        import transformers.utils.import_utils as iu
        iu.is_torchvision_available = tu.is_torchvision_available = lambda: False
        try:
            from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config,
                                      Qwen2ForCausalLM)
        except Exception as e:
            pytest.skip(f"transformers does not import: {type(e).__name__}: {e}")
    kw = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return {"llama": lambda: LlamaForCausalLM(LlamaConfig(**kw)),
            "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**kw))}


@pytest.mark.parametrize("arch", ["sm80", "sm90"])
@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_transformers_llm_every_op_modelled_or_named(name, arch):
    torch.manual_seed(0)
    model = _transformers_models()[name]().eval()
    ids = torch.randint(0, 64, (2, 8))

    def step():
        model.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
    em = _census_holds(step, arch)
    ops = {r.op for r in em.records}
    assert {"aten.silu.default", "aten.rsqrt.default"} <= ops
    assert "aten.pow" in em.recorder.natives           # RMSNorm's x^2: named, not modelled
