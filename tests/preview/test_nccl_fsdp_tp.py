"""FSDP2 and tensor parallel under emulate(arch, collectives="nccl-ring") on gloo ranks:
FSDP2's gradient reduce-scatter (ReduceOp.AVG, and PREMUL_SUM with a divide factor) and the
RowwiseParallel output's functional all-reduce are bit-equal to the single-process NCCL
fold (order.nccl) of the ranks' local values, and differ from gloo's bits."""
import gloo_ranks
import pytest
import torch

from torch_mma_emu.order import nccl


def run_ranks(ws, what):
    return gloo_ranks.run_ranks("nccl_fsdp_tp_worker.py", ws, what)


def fsdp_fold(local, ws, op, factor=None):
    """What NCCL's ring reduce-scatter gives each rank of FSDP2: every rank's reduce-scatter
    input is, for shard c = 0..ws-1, shard c (dim-0 rows) of every parameter's gradient;
    rank c gets block c, viewed as its parameter shards."""
    rows = [[g.chunk(ws, 0)[c].reshape(-1) for c in range(ws) for g in grads]
            for grads in local]
    stacked = torch.stack([torch.cat(r) for r in rows])            # (ws, ws * n)
    n = stacked.shape[1] // ws
    got = torch.from_numpy(nccl.reduce_values(nccl.ring_reduce_scatter(ws, n), stacked,
                                              torch.float32, op, factor=factor))
    shapes = [g.chunk(ws, 0)[0].shape for g in local[0]]
    out = []
    for c in range(ws):
        parts = got[c * n:(c + 1) * n].split([s.numel() for s in shapes])
        out.append([p.reshape(s) for p, s in zip(parts, shapes)])
    return out


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def check_fsdp(ws):
    res = run_ranks(ws, "fsdp")
    local = [r["local"] for r in res]
    want, premul = fsdp_fold(local, ws, "avg"), fsdp_fold(local, ws, "premul_sum", 0.5)
    for r, w, p in zip(res, want, premul):
        assert same(r["nccl"], w) and same(r["premul"], p)
    assert not all(same(r["gloo"], w) for r, w in zip(res, want))    # NCCL's bits, not gloo's
    s = res[0]["summary"]
    assert "reduce_scatter x1" in s and "all_gather (native, no arithmetic) x1" in s


def check_tp(ws):
    res = run_ranks(ws, "tp")
    partial = torch.stack([r["partial"].reshape(-1) for r in res])
    want = torch.from_numpy(nccl.reduce_values(nccl.ring_allreduce(ws, partial.shape[1]),
                                               partial)).reshape(res[0]["nccl"].shape)
    tree = torch.from_numpy(nccl.reduce_values(nccl.tree_allreduce(
        ws, partial.shape[1], torch.float32, nchannels=2), partial)).reshape(want.shape)
    for r in res:
        assert torch.equal(r["nccl"], want) and torch.equal(r["tree"], tree)
        assert torch.equal(r["gloo"], res[0]["gloo"])
    assert not torch.equal(want, partial.sum(0).reshape(want.shape))   # the order shows
    # gloo's 3-rank ring gives NCCL's ring bits here (as in test_nccl_ddp); NCCL's tree differs
    assert not torch.equal(res[0]["gloo"], tree)
    if ws > 3:
        assert not torch.equal(res[0]["gloo"], want)
    assert "all_reduce x1" in res[0]["summary"] and "all_gather (native" not in res[0]["summary"]


@pytest.mark.slow           # about 60 s on the shared 2-core machine
def test_fsdp2_under_emulate_nccl_3_ranks():
    check_fsdp(3)


@pytest.mark.slow
def test_tensor_parallel_under_emulate_nccl_3_ranks():
    check_tp(3)


def test_premul_sum_arithmetic_by_hand():
    """PREMUL_SUM(factor): each input times T(float(factor)), rounded in T, then the sum
    rounded in T (2 ranks: one addition, so the order cannot hide an error)."""
    x = torch.tensor([[1.0, 3.0, -7.0, 1000.0], [2.0, 5.0, 0.1, 3.0]]).half()
    got = nccl.reduce_values(nccl.ring_allreduce(2, 4, "float16"), x, torch.float16,
                             "premul_sum", factor=0.1)
    s = torch.tensor(0.1, dtype=torch.float32).half()          # double -> float -> half
    want = (x[0] * s) + (x[1] * s)                              # torch half ops round each
    assert torch.equal(torch.from_numpy(got), want)
    avg = nccl.reduce_values(nccl.ring_allreduce(2, 4, "float16"), x, torch.float16, "avg")
    assert torch.equal(torch.from_numpy(avg), x[0] * torch.tensor(0.5).half()
                       + x[1] * torch.tensor(0.5).half())
    with pytest.raises(ValueError, match="factor"):
        nccl.reduce_values(nccl.ring_allreduce(2, 4), x.float(), op="premul_sum")
    with pytest.raises(ValueError, match="factor"):
        nccl.reduce_values(nccl.ring_allreduce(2, 4), x.float(), op="sum", factor=2.0)
    with pytest.raises(ValueError, match="floating"):
        nccl.reduce_values(nccl.ring_allreduce(2, 4), x.int(), torch.int32, "premul_sum",
                           factor=2.0)


def test_reduce_ops_and_groups_refused_clearly():
    import torch.distributed as dist
    from torch_mma_emu.preview.nccl_emu import NcclCollectives, reduce_op
    assert reduce_op(dist.ReduceOp.AVG) == ("avg", None)
    assert reduce_op(dist.ReduceOp.PREMUL_SUM(0.25)) == ("premul_sum", 0.25)
    with pytest.raises(ValueError, match="SUM, AVG and PREMUL_SUM"):
        reduce_op(dist.ReduceOp.MAX)
    with pytest.raises(ValueError, match="'sum' and 'avg'"):
        NcclCollectives().functional_all_reduce(torch.ones(2), "max", None)


@pytest.mark.slow           # 4 gloo ranks, about 90 s on the shared 2-core machine
def test_tensor_parallel_under_emulate_nccl_4_ranks_ring_is_not_gloo():
    check_tp(4)
