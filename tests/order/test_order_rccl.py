"""RCCL 2.21.5's ring / tree orders and arithmetic (torch_mma_emu.order.rccl), hand-derived
from the RCCL sources cited in the module."""
import numpy as np
import pytest
import torch

from torch_mma_emu.order import nccl, rccl
from torch_mma_emu.order.tree import SumTree


def _texts(ranges):
    return [(s, e, t) for s, e, t in ranges]


def T(text, n):
    return SumTree.parse(text, n)


def test_small_message_is_one_chunk_where_nccl_has_three():
    # Simple, fp32: alignCount = 64*8*16 B / 4 = 2048 elements, so lastChunkCount =
    # alignUp(ceil(10/3), 2048) = 2048: chunk 0 holds all 10 (chain R1 + R2 + R0);
    # NCCL 2.30.7 aligns to 16 B: chunks of 4, 4, 2.
    got = rccl.ring_allreduce(3, 10)
    assert _texts(got) == [(0, 10, T("((1+2)+0)", 3))]
    ref = nccl.ring_allreduce(3, 10)
    assert _texts(ref) == [(0, 4, T("((1+2)+0)", 3)), (4, 8, T("((2+0)+1)", 3)),
                           (8, 10, T("((0+1)+2)", 3))]


def test_ll_three_channels_counts_that_do_not_divide():
    # LL: alignCount = 8/4 * 256 = 512; maxBytesPerChannel = alignUp(12000/3, 16) = 4000 B
    # = 1000 elements -> 1024 per channel: 1024, 1024, 952.  LL chunk: 256 KiB / 8 steps
    # / 2 = 16384 B = 4096 elements, more than a channel's count: one last loop each,
    # lastChunkCount = alignUp(ceil(1024/4), 512) = 512 (and for 952 too): chunks 0, 1.
    assert rccl.channel_parts(3000, "float32", 4, "ll", 3) == [
        (0, 0, 1024, 4096, 512), (1, 1024, 1024, 4096, 512), (2, 2048, 952, 4096, 512)]
    c0, c1 = T("(((1+2)+3)+0)", 4), T("(((2+3)+0)+1)", 4)
    assert _texts(rccl.ring_allreduce(4, 3000, proto="ll", nchannels=3)) == [
        (0, 512, c0), (512, 1024, c1), (1024, 1536, c0), (1536, 2048, c1),
        (2048, 2560, c0), (2560, 3000, c1)]


def test_two_channels_two_rings():
    # Simple fp32, 4 ranks, count 5000, 2 channels: 10000 B per channel = 2500 elements
    # -> 4096 (alignCount 2048); channel 1 gets 904.  Channel 0: lastChunkCount =
    # alignUp(1024, 2048) = 2048: chunks 0 and 1.  Channel 1 (ring 0 2 1 3): chunk 0 only.
    rings = ["Channel 00/02 : 0 1 2 3", "Channel 01/02 : 0 2 1 3"]
    got = rccl.ring_allreduce(4, 5000, nchannels=2, rings=rings)
    assert _texts(got) == [(0, 2048, T("(((1+2)+3)+0)", 4)),
                           (2048, 4096, T("(((2+3)+0)+1)", 4)),
                           (4096, 5000, T("(((2+1)+3)+0)", 4))]


def test_large_message_chunks():
    # 3e6 fp32 on 4 ranks, 3 channels: 4e6 B per channel = 1e6 elements -> 1001472
    # (489 * 2048); chunk 2 MiB = 524288 elements, one (last) loop of 4 * 251904.
    parts = rccl.channel_parts(3_000_000, "float32", 4, "simple", 3)
    assert [p[:3] for p in parts] == [(0, 0, 1001472), (1, 1001472, 1001472),
                                      (2, 2002944, 997056)]
    assert parts[0][3:] == (524288, 251904)
    got = rccl.ring_allreduce(4, 3_000_000, nchannels=3)
    assert [(s, e) for s, e, _ in got][:4] == [(0, 251904), (251904, 503808),
                                               (503808, 755712), (755712, 1001472)]
    # full loops: 5e6 elements on one channel, 3 ranks (loop 3 * 524288)
    got = rccl.ring_allreduce(3, 5_000_000, nchannels=1)
    assert [(s, e) for s, e, _ in got][:4] == [(0, 524288), (524288, 1048576),
                                               (1048576, 1572864), (1572864, 2097152)]
    assert got[0][2] == got[3][2]


def test_tree_eight_ranks_mirror_and_split():
    # ncclGetBtree over 8 nodes: 0 -> 4 -> (2 -> 1, 3), (6 -> 5, 7); tree 1 mirrors it.
    t0 = T("(0+((4+((2+1)+3))+((6+5)+7)))", 8)
    t1 = T("(7+((3+((5+6)+4))+((1+2)+0)))", 8)
    got = rccl.tree_allreduce(8, 5000, nchannels=2)
    assert _texts(got) == [(0, 4096, t0), (4096, 5000, t1)]


def test_tree_three_nodes_shift():
    # odd node count: tree 1 is tree 0 shifted by one; 10 fp32 stay on channel 0
    got = rccl.tree_allreduce(3, 10, nchannels=2)
    assert _texts(got) == [(0, 10, T("(0+(2+1))", 3))]
    got = rccl.tree_allreduce(3, 3000, nchannels=2)
    assert _texts(got) == [(0, 2048, T("(0+(2+1))", 3)), (2048, 3000, T("(1+(0+2))", 3))]


def test_small_messages_use_fewer_channels():
    # getChannnelThreadInfo: drop a channel while bytes < nc * 256 threads * threshold
    # (Simple 64; ring LL 8 * nranks): 20000 fp32 = 80000 B < 5 * 16384 -> 4 of 16 ...
    assert rccl.collective_channels(20000, "float32", 4, "ring", "simple", 16) == 4
    # ... and < 10 * 256 * 32 = 81920 -> 9 for LL on 4 ranks; tiny messages keep one
    assert rccl.collective_channels(20000, "float32", 4, "ring", "ll", 16) == 9
    assert rccl.collective_channels(1000, "float32", 4, "tree", "simple", 16) == 1
    assert rccl.collective_channels(10**6, "float32", 4, "ring", "simple", 16) == 16
    # 3 channels of a 4-channel communicator: 8192, 8192, 3616; tree 1 starts at channel 2
    got = rccl.tree_allreduce(4, 20000, nchannels=3, comm_channels=4)
    assert _texts(got) == [(0, 16384, T("(0+((2+1)+3))", 4)),
                           (16384, 20000, T("(3+((1+2)+0))", 4))]
    with pytest.raises(ValueError, match="even"):
        rccl.tree_allreduce(4, 20000, nchannels=3, comm_channels=5)


def test_reduce_values_differs_from_nccl_on_some_seed():
    # same arithmetic, RCCL's one chunk against NCCL's three: some fp32 bits differ
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 10)) * np.array([[1e8], [1.0], [-1e8]])).astype(np.float32)
    a = rccl.reduce_values(rccl.ring_allreduce(3, 10), x)
    b = nccl.reduce_values(nccl.ring_allreduce(3, 10), x)
    assert not np.array_equal(a, b)
    assert np.array_equal(a[:4], b[:4])           # chunk 0 agrees


def test_fp8_clips_and_rounds_every_hop():
    r = rccl.ring_allreduce(3, 2, "float8_e4m3fnuz")   # chain x1 + x2 + x0
    x = np.array([[-32.0, 0.0625], [240.0, 1.0], [16.0, 0.0625]])
    got = rccl.reduce_values(r, x, "float8_e4m3fnuz")
    # 240 + 16 = 256 clipped to 240, then - 32 = 208 (exact sum: 224);
    # 1 + 0.0625 = 1.0625 rounds (tie, even) to 1, then + 0.0625 -> 1 again
    assert got.tolist() == [208.0, 1.0]
    xt = torch.tensor(x, dtype=torch.float8_e4m3fnuz)
    assert rccl.reduce_values(r, xt).tolist() == [208.0, 1.0]
    # e5m2 FNUZ: 40000 + 30000 saturates at 57344
    got = rccl.reduce_values(rccl.ring_allreduce(3, 1, "float8_e5m2fnuz"),
                             np.array([[0.0], [40960.0], [28672.0]]), "float8_e5m2fnuz")
    assert got.tolist() == [57344.0]


def test_fp8_avg_premultiplies():
    r = rccl.ring_allreduce(3, 1, "float8_e4m3fnuz")
    # RN(1/3) in e4m3fnuz = 0.34375; 3 * 0.34375 = 1.03125 -> 1.0 (RN at 1.0: step 0.125)
    got = rccl.reduce_values(r, np.array([[1.0], [1.0], [1.0]]), "float8_e4m3fnuz", "avg")
    assert got.tolist() == [1.0]


def test_bf16_matches_nccl_arithmetic():
    r = rccl.ring_allreduce(4, 64, "bfloat16")
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    got = rccl.reduce_values(r, x)
    ref = nccl.reduce_values(r, x)
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("kw, msg", [
    (dict(proto="fast"), "protocol"),
    (dict(nchannels=129), "MAXCHANNELS"),
    (dict(nchannels=0), "nchannels"),
])
def test_bad_input(kw, msg):
    with pytest.raises(ValueError, match=msg):
        rccl.ring_allreduce(4, 100, **kw)
    with pytest.raises(ValueError, match="count"):
        rccl.ring_allreduce(4, 0)
    with pytest.raises(ValueError, match="dtype"):
        rccl.ring_allreduce(4, 10, "complex64")


def test_rccl_trees_log_lines_parse():
    # RCCL 2.21.5 src/init.cc 1644-1652 prints NCCL's "Trees [c] d0/d1/d2->r->up" line,
    # followed by "comm %p nRanks %02d busId %lx"; 3 ranks, 2 channels (tree 0, tree 1)
    lines = ["NCCL INFO Trees [0] 2/-1/-1->0->-1 [1] 2/-1/-1->0->1 comm 0x5 nRanks 03 busId c1000",
             "NCCL INFO Trees [0] -1/-1/-1->1->2 [1] 0/-1/-1->1->-1 comm 0x6 nRanks 03 busId c2000",
             "NCCL INFO Trees [0] 1/-1/-1->2->0 [1] -1/-1/-1->2->0 comm 0x7 nRanks 03 busId c3000"]
    trees = nccl.parse_trees(lines)
    assert rccl.tree_allreduce(3, 3000, nchannels=2, trees=trees) == \
        rccl.tree_allreduce(3, 3000, nchannels=2)
