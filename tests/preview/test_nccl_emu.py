"""The emulated NCCL backend (preview/nccl_emu.py) on 3 and 4 gloo ranks: every rank holds
the single-process fold in NCCL's order (order.nccl), which differs from gloo's bits."""
import gloo_ranks
import numpy as np
import pytest
import torch

from torch_mma_emu.order import nccl


def run_ranks(ws):
    return gloo_ranks.run_ranks("nccl_emu_worker.py", ws)


@pytest.mark.slow     # about 80 s per world size (gloo worker processes)
@pytest.mark.parametrize("ws", [3, 4])
def test_emulated_nccl_equals_the_single_process_fold_and_not_gloo(ws):
    res = run_ranks(ws)
    x = torch.stack([r["x"] for r in res])              # (ranks, N) fp16
    N = x.shape[1]
    for name, make in (("ring1", lambda: nccl.ring_allreduce(ws, N, "float16")),
                       ("ring2", lambda: nccl.ring_allreduce(ws, N, "float16", nchannels=2)),
                       ("tree", lambda: nccl.tree_allreduce(ws, N, "float16", nchannels=2))):
        want = torch.from_numpy(nccl.reduce_values(make(), x)).half()
        for r in res:
            assert torch.equal(r[name], want), (name, ws)
    # NCCL's order with fp16 rounding at every hop is not gloo's
    assert any(not torch.equal(res[0]["ring1"], r["gloo"]) for r in res)
    assert not torch.equal(res[0]["ring1"], res[0]["tree"])
    rs = nccl.reduce_values(nccl.ring_reduce_scatter(ws, N // ws), x[:, :(N // ws) * ws])
    for k, r in enumerate(res):
        n = N // ws
        assert torch.equal(r["rs"], torch.from_numpy(rs[k * n:(k + 1) * n]).half())
    avg = nccl.reduce_values(nccl.ring_allreduce(ws, N, "float16"), x, op="avg")
    assert torch.equal(res[1]["avg"], torch.from_numpy(avg).half())
    # DDP: the hook scales the bucket by 1/ws in fp32 and sums in NCCL's ring order
    b = torch.stack([r["bucket"] for r in res]) * (1.0 / ws)
    want = torch.from_numpy(nccl.reduce_values(nccl.ring_allreduce(ws, b.shape[1]), b))
    for r in res:
        assert torch.equal(r["grads"], want)
