"""Distributed training code under emulation, on 2 gloo ranks of this CPU
(tests/parallel_worker.py): tensor parallel (``parallelize_module`` with ``ColwiseParallel``
then ``RowwiseParallel``) on the ``tme.convert`` route (the DTensor rule of
``mma_emu::emulated_mm``, torch_mma_emu/sharding.py) and on the ``emulate`` route, DDP and
FSDP2 (``fully_shard``) under ``emulate`` with the spy outside it.

Tensor parallel must give the bits of one process doing the same partial products and the
same all-reduce; DDP and FSDP2 the bits of one process computing each rank's emulated
gradients and averaging them.  One spawn of the two ranks runs every scenario (the start-up
is most of the cost)."""
from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp

import torch_mma_emu as tme
from helpers import same

if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

import parallel_worker as W  # noqa: E402
from thirdparty import COARSE  # noqa: E402

WORLD = 2


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("gloo")
    mp.start_processes(W.main, args=(WORLD, _port(), str(out), list(W.SCENARIOS)),
                       nprocs=WORLD, join=True, start_method="spawn")
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


def _result(ranks, name):
    res = [r[name] for r in ranks]
    for r in res:
        if isinstance(r, str):
            pytest.fail(f"{name} failed on a rank:\n{r}")
    return res


def _emu(A, B):
    """One emulated Linear product as EmulatedLinear runs it: fp32 accumulator, bf16 out."""
    return tme.emulated_mm(A, B, arch=COARSE, out_dtype=torch.float32).to(torch.bfloat16)


def test_tensor_parallel_convert_route_gives_the_partial_products_bits(ranks):
    res = _result(ranks, "tp_convert")
    model, x = W._mlp(), W._x()
    w1, w2 = model[0].weight.detach(), model[2].weight.detach()
    n = W.D_HID // WORLD
    parts = []
    for r in range(WORLD):          # rank r: rows r of W1 (column-wise), columns r of W2
        h = torch.relu(_emu(x, w1[r * n:(r + 1) * n].t()))
        parts.append(_emu(h, w2[:, r * n:(r + 1) * n].t()))
    want = parts[0] + parts[1]      # the all-reduce of the bf16 partial outputs
    for r in range(WORLD):
        assert same(res[r]["y"], want), (res[r]["y"] - want).abs().max()
    whole = _emu(torch.relu(_emu(x, w1.t())), w2.t())
    assert not same(want, whole)    # the split is visible: K-split partials differ
    assert res[0]["w0_grad"].shape == (n, W.D_IN)


def test_sharding_rule_k_split_and_batch_split(ranks):
    res = _result(ranks, "dtensor_rule")
    A, B, C, bA, bB = res[0]["inputs"]
    h = A.shape[1] // WORLD
    parts = [tme.emulated_mm(A[:, r * h:(r + 1) * h], B[r * h:(r + 1) * h], arch=COARSE)
             for r in range(WORLD)]
    whole = tme.emulated_mm(A, B, C, arch=COARSE)
    for r in range(WORLD):
        assert res[r]["ksplit_placement"] == "(Partial(sum),)"
        assert same(res[r]["ksplit"], parts[0] + parts[1])    # partials, then all-reduce
        assert same(res[r]["with_c"], whole)                   # with C: gathered, one product
        assert res[r]["batch_placement"] == "(Shard(dim=0),)"
        assert same(res[r]["batch"], tme.emulated_mm(bA, bB, arch=COARSE))
    assert not same(res[0]["ksplit"], tme.emulated_mm(A, B, arch=COARSE))


def test_tensor_parallel_emulate_route(ranks):
    """DTensor's aten.mm reaches the mode, whose emulated_mm on DTensors then takes the rule
    (or, once the mode steps aside for tensor subclasses, DTensor's local products come
    back): either way the products of the convert route."""
    res = _result(ranks, "tp_emulate")
    conv = _result(ranks, "tp_convert")
    for r in range(WORLD):
        assert not res[r]["unseen"] and not res[r]["native"] and res[r]["emulated"] > 0
        assert same(res[r]["y"], conv[r]["y"])      # the same products as the convert route


def _averaged_grads(bias=True):
    """Each rank's emulated gradients computed here, then averaged as DDP / FSDP2 do."""
    per_rank = []
    for r in range(WORLD):
        model = W._mlp(bias=bias)
        with tme.emulate(COARSE):
            model(W._x(seed=10 + r)).float().square().mean().backward()
        per_rank.append([p.grad for p in model.parameters()])
    return [(a + b) / WORLD for a, b in zip(*per_rank)]


@pytest.mark.parametrize("name", ["ddp", "fsdp2"])
def test_data_parallel_under_emulate(ranks, name):
    res = _result(ranks, name)
    want = _averaged_grads()
    for r in range(WORLD):
        assert not res[r]["unseen"], res[r]["unseen"]
        assert not res[r]["native"] and res[r]["emulated"] > 0
        model = W._mlp(bias=True)
        with tme.emulate(COARSE):
            y = model(W._x(seed=10 + r))
        assert same(res[r]["y"], y.detach())
        for got, exp in zip(res[r]["grads"], want):
            torch.testing.assert_close(got, exp, rtol=0, atol=0)
