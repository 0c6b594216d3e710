"""The emulated RCCL backend (preview/rccl_emu.py) on 3 and 4 gloo ranks: every rank holds
the single-process fold in RCCL's order (order.rccl) or the MSCCL XML's (order.msccl),
which differs from gloo's bits; a DDP model under emulate(collectives="rccl-ring" /
MscclAlgorithm) equals the single-process fold of the ranks' local gradients."""
import os

import gloo_ranks
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu.order import rccl
from torch_mma_emu.order.msccl import MscclAlgorithm
from torch_mma_emu.preview.rccl_emu import RcclCollectives

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HAND = os.path.join(ROOT, "tests", "data", "msccl", "ring-3n-hand.xml")
HAND4 = os.path.join(ROOT, "tests", "data", "msccl", "allpairs-4n-hand.xml")
RING16 = os.path.join(ROOT, "tests", "data", "msccl", "all-reduce-ring-ll.xml.gz")


def fold(ranges, x):
    return torch.from_numpy(rccl.reduce_values(ranges, x))


def check(ws):
    res = gloo_ranks.run_ranks("rccl_emu_worker.py", ws)
    x = torch.stack([r["x"] for r in res])              # (ranks, N) fp16
    N = x.shape[1]
    want = {"ring1": rccl.ring_allreduce(ws, N, "float16"),
            "ring2": rccl.ring_allreduce(ws, N, "float16", proto="ll", nchannels=2),
            "tree": rccl.tree_allreduce(ws, N, "float16", nchannels=2)}
    alg = MscclAlgorithm(HAND if ws == 3 else HAND4)
    want["msccl"] = alg.ranges(N)
    for name, ranges in want.items():
        w = fold(ranges, x).half()
        for r in res:
            assert torch.equal(r[name], w), (name, ws)
    assert f"MSCCL '{alg.name}'" in res[0]["msccl_summary"]
    assert "not run" not in res[0]["msccl_summary"]
    if ws == 4:     # gloo's 3-rank ring cuts the same 3 chunks with the same chains
        assert any(not torch.equal(r["msccl"], r["gloo"]) for r in res)
    # RCCL's orders with fp16 rounding at every hop are not gloo's
    assert any(not torch.equal(r["ring1"], r["gloo"]) for r in res)
    assert not torch.equal(res[0]["ring1"], res[0]["ring2"])
    # DDP: 1/ws into the fp32 bucket, then the all-reduce in RCCL's ring order
    local = torch.stack([r["local"] for r in res]) * (1.0 / ws)
    ring = fold(rccl.ring_allreduce(ws, local.shape[1]), local)
    for r in res:
        assert torch.equal(r["ddp_ring"], ring)
    assert "collectives: RCCL 2.21.5 ring" in res[0]["ddp_summary"]
    assert "all_reduce x1" in res[0]["ddp_summary"]
    ms = fold(alg.ranges(local.shape[1]), local)    # 1608 parameters: 3 and 4 chunks divide
    for r in res:
        assert torch.equal(r["ddp_msccl"], ms)
    assert not torch.equal(ms, ring)
    assert "MSCCL" in res[0]["ddp_msccl_summary"] and "not run" not in \
        res[0]["ddp_msccl_summary"]
    assert not torch.equal(res[0]["ddp_ring"], res[0]["ddp_gloo"])
    return res


@pytest.mark.slow       # about 70 s on the shared 2-core machine
def test_emulated_rccl_3_ranks():
    check(3)


@pytest.mark.slow       # about 90 s
def test_emulated_rccl_4_ranks():
    check(4)


def test_emulate_collectives_rccl_names():
    em = tme.emulate("sm90", collectives="rccl-tree")
    assert isinstance(em.collectives, RcclCollectives) and em.collectives.algo == "tree"
    em = tme.emulate("sm90", collectives=MscclAlgorithm(HAND))
    assert em.collectives.msccl.name == "ring_3n_hand"
    assert "MSCCL 'ring_3n_hand'" in em.summary()
    with pytest.raises(ValueError, match="rccl-ring"):
        tme.emulate("sm90", collectives="rccl")
    with pytest.raises(ValueError, match="not found"):
        RcclCollectives(msccl="/nonexistent.xml")
    with pytest.raises(ValueError, match="nthreads"):
        RcclCollectives(nthreads=0)
    own = RcclCollectives(msccl=HAND)
    assert own.ranges("all_reduce", 3, 6, torch.float32)[1][2] == \
        MscclAlgorithm(HAND).chunk_trees()[1]
    # a count MSCCL cannot run falls back to RCCL's ring, and says so
    assert own.ranges("all_reduce", 3, 7, torch.float32) == rccl.ring_allreduce(3, 7)
    assert "not a multiple" in own.summary_line()
    assert own.ranges("all_reduce", 4, 6, torch.float32) == rccl.ring_allreduce(4, 6)
    assert "MSCCL not run (the algorithm is for 3 ranks, not 4): RCCL ring x1" in \
        own.summary_line()
    assert own.ranges("all_reduce", 3, 6, torch.float32, "avg") == rccl.ring_allreduce(3, 6)
    assert "op avg: MSCCL runs no pre/post op" in own.summary_line()
    few = RcclCollectives(msccl=MscclAlgorithm(HAND4), comm_channels=1)
    assert few.ranges("all_reduce", 4, 8, torch.float32) == \
        MscclAlgorithm(HAND4).ranges(8)                       # 1 channel: enough
    wide = RcclCollectives(msccl=RING16, comm_channels=16)
    assert wide.ranges("all_reduce", 16, 384, torch.float32) == \
        rccl.ring_allreduce(16, 384, nchannels=1)
    assert "NCCL_MAX_NCHANNELS 16 < the algorithm's 24 channels" in wide.summary_line()
    # the communicator's channels: each collective uses collective_channels() of them
    cc = RcclCollectives(algo="tree", comm_channels=4)
    # 16000 B < 2 * 256 * 64: one channel (tree 0); 80000 B keeps all 4
    got = cc.ranges("all_reduce", 4, 4000, torch.float32)
    assert got == rccl.tree_allreduce(4, 4000, nchannels=1, comm_channels=4)
    assert len(got) == 1 and got[0][:2] == (0, 4000)
    assert cc.ranges("all_reduce", 4, 20000, torch.float32) == \
        rccl.tree_allreduce(4, 20000, nchannels=4)
    assert "up to 4 channel(s)" in cc.describe()
    with pytest.raises(ValueError, match="not both"):
        RcclCollectives(nchannels=2, comm_channels=4)
