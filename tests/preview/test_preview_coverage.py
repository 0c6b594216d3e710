"""No product runs natively unseen: ops without emulation warn once by name, threads started
in a block run under it, attention with dropout is emulated in the flash form."""
from __future__ import annotations

import math
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_mma_emu as tme
from torch_mma_emu.preview import emulate
from helpers import rnd, same


def test_native_matrix_ops_are_recorded_and_warned_once_by_name():
    A, v = rnd(4, 8), rnd(8)
    with pytest.warns(UserWarning, match=r"aten\.mv\.default multiplies matrices and runs "
                                         r"natively") as rec:
        with emulate("sm90", record=True) as em:
            torch.mv(A, v)
            torch.mv(A, v)
            torch.dot(v, v)
    msgs = [str(w.message) for w in rec if "multiplies matrices" in str(w.message)]
    assert len(msgs) == 2 and any("aten.dot" in m for m in msgs)        # once per op
    assert [r.op for r in em.records] == ["aten.mv.default"] * 2 + ["aten.dot.default"]
    assert all(not r.emulated for r in em.records)


def test_policy_native_is_not_warned():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with emulate("sm90", formats={"mm": "native"}, record=True) as em:
            rnd(3, 4) @ rnd(4, 5)
    (mm,) = [r for r in em.records if r.product]          # (rnd's scaling is a kernel record)
    assert mm.format == "native" and mm.note == "policy: native"


def test_inference_mode_repro_gives_emulated_bits():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)).bfloat16()
    x = rnd(4, 32)
    with torch.inference_mode(), tme.emulate("sm90", record=True) as em:
        y = model(x)
    assert em.summary() != "(no matrix products seen)"
    assert [r.op for r in em.records] == ["aten.addmm.default"] * 2
    with torch.no_grad(), tme.emulate("sm90"):
        y_ng = model(x)
    assert same(y, y_ng)
    h = (tme.emulated_mm(x, model[0].weight.detach().t(), arch="sm90")
         + model[0].bias.detach().float()).bfloat16().relu()
    ref = (tme.emulated_mm(h, model[2].weight.detach().t(), arch="sm90")
           + model[2].bias.detach().float()).bfloat16()
    assert same(y, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_lstm_is_emulated_forward_and_backward_and_onednn_restored(dtype):
    torch.manual_seed(0)
    lstm = nn.LSTM(8, 16, batch_first=True).to(dtype)
    x = rnd(2, 3, 8, dtype=dtype)
    before = torch._C._get_mkldnn_enabled()
    with tme.emulate("sm80", record=True) as em:
        out, _ = lstm(x)
        out.float().sum().backward()
    assert torch._C._get_mkldnn_enabled() == before
    ops = {(r.op, r.phase) for r in em.records}
    assert ("aten.addmm.default", "forward") in ops and ("aten.mm.default", "backward") in ops
    assert all(r.emulated for r in em.records)
    assert not any("mkldnn" in r.op for r in em.records)
    assert {r.module for r in em.records if not r.kernel} == {"LSTM"}


def test_threads_started_inside_the_block_are_emulated():
    A, B = rnd(4, 64), rnd(64, 3, seed=1)
    ref = tme.emulated_mm(A, B, arch="gfx90a").bfloat16()
    got = {}

    def work(key):
        got[key] = A @ B
    with emulate("gfx90a", record=True) as em:
        t = threading.Thread(target=work, args=("thread",))
        t.start()
        t.join()
        with ThreadPoolExecutor(2) as pool:
            pool.submit(work, "pool").result()
    assert same(got["thread"], ref) and same(got["pool"], ref)
    assert len(em.records) == 2 and all(r.emulated for r in em.records)
    # after the block, new threads run natively again
    t = threading.Thread(target=work, args=("after",))
    t.start()
    t.join()
    assert same(got["after"], A @ B)


def _dropout_reference(q, k, v, p, seed, arch, causal=False):
    torch.manual_seed(seed)
    L, S = q.shape[-2], k.shape[-2]
    # the mask's generator is seeded from PyTorch's default generator (sdpa_route.py)
    g = torch.Generator().manual_seed(int(torch.randint(0, 2 ** 62, ())))
    keep = torch.rand((*q.shape[:-1], S), generator=g) >= p
    scale = 1 / math.sqrt(q.shape[-1])
    Sc = tme.emulated_mm(q, k.transpose(-2, -1), arch=arch) * scale
    if causal:
        Sc = Sc.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    m = Sc.amax(-1, keepdim=True)
    P = torch.exp(Sc - m)
    l = P.sum(-1, keepdim=True)
    Pd = torch.where(keep, P * (1.0 / (1.0 - p)), torch.zeros_like(P))
    return (tme.emulated_mm(Pd.to(q.dtype), v, arch=arch) / l).to(q.dtype)


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_with_dropout_is_emulated_in_the_flash_form(causal):
    q, k, v = (rnd(1, 2, 5, 8, seed=s) for s in range(3))
    with emulate("sm90", record=True) as em:
        torch.manual_seed(7)
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.25, is_causal=causal)
    assert same(out, _dropout_reference(q, k, v, 0.25, 7, "sm90", causal))
    assert [r.note for r in em.records] == ["flash form, dropout_p=0.25 (flash on sm90)"]
    assert [r.op for r in em.records] == ["aten._scaled_dot_product_efficient_attention.default"]
    assert not any(r.op == "aten.bmm.default" for r in em.records)  # not the fp32 math path


def test_sdpa_dropout_gradients_match_finite_differences_on_the_fp64_path():
    q, k, v = (torch.randn(1, 1, 3, 4, dtype=torch.float64, requires_grad=True)
               for _ in range(3))

    def f(q, k, v):
        with emulate("sm90"):
            torch.manual_seed(3)                      # the same mask at every evaluation
            return F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    assert torch.autograd.gradcheck(f, (q, k, v))
    with emulate("sm90", record=True) as em:
        torch.manual_seed(3)
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.3).sum().backward()
    assert [r.phase for r in em.records if not r.kernel] == ["forward", "backward"]


@pytest.mark.parametrize("mask_shape", [(1, 2, 3, 3), (3, 3), (2, 1, 3)])
def test_sdpa_dropout_gives_the_additive_mask_its_gradient(mask_shape):
    """T5's position bias is an additive mask that requires grad: with dropout in training
    its gradient used to be dropped silently (None), so the bias never learned."""
    q, k, v = (torch.randn(1, 2, 3, 4, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    mask = torch.randn(mask_shape, dtype=torch.float64, requires_grad=True)

    def f(q, k, v, mask):
        with emulate("sm90"):
            torch.manual_seed(5)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.3)
    assert torch.autograd.gradcheck(f, (q, k, v, mask))
    f(q, k, v, mask).sum().backward()
    assert mask.grad is not None and mask.grad.shape == mask.shape and mask.grad.abs().sum() > 0


def test_sdpa_dropout_bad_probability_is_a_clear_error():
    q = rnd(1, 1, 3, 4)
    with pytest.raises((ValueError, RuntimeError)):
        with emulate("sm90"):
            F.scaled_dot_product_attention(q, q, q, dropout_p=1.5)


def _tiny_products(a, b, x, y, c, w):
    # what Inductor's decompositions would turn into generated code: a K = 1 outer product
    # (bmm), a CPU 1 x K @ K x 1 dot product (mm) and a CPU addmm with M = 1, K, N <= 16
    return a[:, :, None] @ b[:, None, :], x @ y, torch.addmm(c, x, w)


def _tiny_args():
    return (rnd(2, 5), rnd(2, 4, seed=1), rnd(1, 8, seed=2), rnd(8, 1, seed=3),
            rnd(1, 4, seed=4), rnd(8, 4, seed=5))


def test_inductor_keeps_tiny_products_for_the_mode_inside_a_block():
    # docs/preview.md "torch.compile": compiled inside a block, Inductor's mm / bmm / addmm
    # decompositions step aside, so every product reaches the mode with eager's bits
    from torch._dynamo.utils import counters
    import torch._inductor.config as ind
    args = _tiny_args()
    torch._dynamo.reset()
    with emulate("gfx90a", record=True) as em:
        assert ind.max_autotune_gemm_backends == "ATEN" and not ind.fx_graph_cache
        out = torch.compile(_tiny_products, fullgraph=True)(*args)
    assert sorted(r.op for r in em.records) == ["aten.addmm.out", "aten.bmm.out", "aten.mm.out"]
    assert all(r.emulated for r in em.records)
    with emulate("gfx90a"):
        ref = _tiny_products(*args)
    assert all(same(o, r) for o, r in zip(out, ref))
    # outside a block Inductor decomposes as before, and its settings are back
    assert ind.max_autotune_gemm_backends != "ATEN"
    torch._dynamo.reset()
    counters.clear()
    torch.compile(_tiny_products, fullgraph=True)(*args)
    assert counters["inductor"]["decompose_mm"] == 1
    assert counters["inductor"]["decompose_addmm"] == 1


@pytest.mark.slow
def test_inductor_max_autotune_and_code_compiled_before_the_block_are_emulated():
    x, w = rnd(64, 64), rnd(64, 64, seed=1)
    torch._dynamo.reset()
    with emulate("sm90", record=True) as em:    # max-autotune may pick only the library call
        out = torch.compile(lambda x, w: x @ w, mode="max-autotune-no-cudagraphs")(x, w)
    assert [r.op for r in em.records] == ["aten.mm.out"]
    assert same(out, tme.emulated_mm(x, w, arch="sm90").to(x.dtype))
    # code compiled before the block (with the decompositions): entering the block changes
    # the torch-function mode stack (the router), which Dynamo guards on, so it recompiles
    torch._dynamo.reset()
    g = torch.compile(_tiny_products, fullgraph=True)
    g(*_tiny_args())
    with emulate("gfx90a", record=True) as em:
        out = g(*_tiny_args())
    assert sorted(r.op for r in em.records) == ["aten.addmm.out", "aten.bmm.out", "aten.mm.out"]
    with emulate("gfx90a"):
        ref = _tiny_products(*_tiny_args())
    assert all(same(o, r) for o, r in zip(out, ref))
