"""NCCL's orders (torch_mma_emu.order.nccl, NCCL 2.30.7) against hand-derived cases."""
import numpy as np
import pytest
import torch

from torch_mma_emu.order import SumTree, nccl


def texts(ranges):
    return [(s, e, t.to_text()) for s, e, t in ranges]


def test_ring_allreduce_fp32_count_10_on_3_ranks():
    # one loop; chunk = alignUp(divUp(10, 3), 16 / 4) = 4: chunk c ends at ring position c
    assert texts(nccl.ring_allreduce(3, 10)) == [
        (0, 4, "((1+2)+0)"), (4, 8, "((2+0)+1)"), (8, 10, "((0+1)+2)")]


def test_trailing_chunks_can_be_empty():
    # fp16: chunks align to 8 elements: 10 on 3 ranks -> [0, 8), [8, 10), an empty third
    assert texts(nccl.ring_allreduce(3, 10, "float16")) == [
        (0, 8, "((1+2)+0)"), (8, 10, "((2+0)+1)")]
    # fp32, 5 on 4 ranks: alignUp(2, 4) = 4 -> chunks 0 and 1 only
    assert texts(nccl.ring_allreduce(4, 5)) == [
        (0, 4, "(((1+2)+3)+0)"), (4, 5, "(((2+3)+0)+1)")]


def test_ring_order_from_the_log_line_sets_the_chain():
    ring = "NCCL INFO Channel 00/02 : 0 2 1 3"
    assert nccl.parse_ring(ring) == [0, 2, 1, 3]
    # chunk 0 ends at R[0] = 0 and starts at R[1] = 2
    assert texts(nccl.ring_allreduce(4, 4, rings=[ring]))[0] == (0, 4, "(((2+1)+3)+0)")
    with pytest.raises(ValueError, match="ring line"):
        nccl.parse_ring("Ring 00 : 3 -> 0 -> 1")
    with pytest.raises(ValueError, match="every rank once"):
        nccl.parse_ring("Channel 00/02 : 0 2 2")


def test_two_channels_split_the_tensor_where_the_cells_say():
    # fp32 allreduce of 12288 on 2 channels: cells of 16 KiB (32 KiB traffic / 2 per byte);
    # 3 cells, 2 per channel -> channel 0 holds [0, 8192), channel 1 [8192, 12288)
    parts = nccl.channel_parts("all_reduce", 12288, "float32", 3, "simple", 2)
    assert [(c, o, n) for c, o, n, _ in parts] == [(0, 0, 8192), (1, 8192, 4096)]
    assert parts[0][3] == 2 ** 21 // 4            # Simple ring chunk: 4 steps of 512 KiB
    r = nccl.ring_allreduce(3, 12288, nchannels=2, rings=[[0, 1, 2], [0, 2, 1]])
    # channel 0: chunks of alignUp(divUp(8192, 3), 4) = 2732; channel 1 (ring 0 2 1):
    # alignUp(1366, 4) = 1368
    assert texts(r) == [
        (0, 2732, "((1+2)+0)"), (2732, 5464, "((2+0)+1)"), (5464, 8192, "((0+1)+2)"),
        (8192, 9560, "((2+1)+0)"), (9560, 10928, "((1+0)+2)"), (10928, 12288, "((0+2)+1)")]


def test_loops_repeat_the_chunk_pattern():
    # LL: chunk = 512 KiB / 8 / 2 = 32 KiB = 8192 fp32; one channel: a loop of 3 * 8192;
    # the last loop: alignUp(divUp(30000 - 24576, 3), 4) = 1808
    r = nccl.ring_allreduce(3, 30000, proto="ll")
    assert [(s, e) for s, e, _ in r][:4] == [(0, 8192), (8192, 16384), (16384, 24576),
                                              (24576, 26384)]
    assert r.tree_at(0) == r.tree_at(24576)       # loop 2 starts again at chunk 0


def test_reduce_scatter_and_reduce_chains():
    rs = nccl.ring_reduce_scatter(3, 2)
    assert texts(rs) == [(0, 2, "((1+2)+0)"), (2, 4, "((2+0)+1)"), (4, 6, "((0+1)+2)")]
    assert texts(nccl.ring_reduce(4, 3, root=2)) == [(0, 3, "(((3+0)+1)+2)")]
    with pytest.raises(ValueError, match="root"):
        nccl.ring_reduce(4, 3, root=4)


@pytest.mark.parametrize("n", range(2, 10))
def test_double_binary_tree_mirrors_or_shifts(n):
    t0 = [nccl.dtree(n, k)[0] for k in range(n)]
    t1 = [nccl.dtree(n, k)[1] for k in range(n)]
    m = (lambda v: -1 if v == -1 else n - 1 - v) if n % 2 == 0 else \
        (lambda v: -1 if v == -1 else (v + 1) % n)
    src = (lambda k: n - 1 - k) if n % 2 == 0 else (lambda k: (k - 1) % n)
    for k in range(n):
        assert t1[k] == tuple(m(v) for v in t0[src(k)])
    pair = nccl.default_trees(n)
    for tree in pair:                                # a whole tree: every rank reached once
        r = nccl.tree_allreduce(n, 64, nchannels=2, trees={0: tree, 1: tree})
        assert sorted(r.tree_at(0).leaves()) == list(range(n))


def test_btree_by_hand():
    # 4 nodes: 0 is the root with child 2; 2 has children 1 and 3
    assert [nccl.btree(4, k) for k in range(4)] == [(-1, -1, 2), (2, -1, -1), (0, 1, 3),
                                                    (2, -1, -1)]
    # 5 nodes: 0 -> 4 -> 2 -> (1, 3)
    assert [nccl.btree(5, k)[0] for k in range(5)] == [-1, 2, 4, 2, 0]


def test_tree_allreduce_own_value_first_then_children_in_order():
    r = nccl.tree_allreduce(4, 100000, nchannels=2)
    assert texts(r)[0][2] == "(0+((2+1)+3))"         # tree 0 on channel 0
    assert texts(r)[1][2] == "(3+((1+2)+0))"         # tree 1 (mirrored) on channel 1
    # two GPUs per node: the node head adds its chain child first, then the node children
    two = nccl.default_trees(2, 2)[0]
    assert two == {0: (-1, [1, 2]), 1: (0, []), 2: (0, [3]), 3: (2, [])}
    lines = ["Trees [0] 1/2/-1->0->-1", "Trees [0] -1/-1/-1->1->0",
             "Trees [0] 3/-1/-1->2->0", "Trees [0] -1/-1/-1->3->2"]
    assert nccl.parse_trees(lines) == {0: two}
    got = nccl.tree_allreduce(4, 8, nchannels=1, trees=nccl.parse_trees(lines))
    assert texts(got) == [(0, 8, "((0+1)+(2+3))")]
    with pytest.raises(ValueError, match="parent"):
        nccl.parse_trees(["Trees [0] 1/-1/-1->0->-1", "Trees [0] -1/-1/-1->1->2",
                          "Trees [0] -1/-1/-1->2->0"])


def test_hop_rounding_fp16_bf16_and_fp32():
    r = nccl.ring_allreduce(3, 10, "float16")       # [0, 8): (1+2)+0, [8, 10): (2+0)+1
    x = torch.tensor([[2048.0] * 10, [1.0] * 10, [1.0] * 10])
    got = nccl.reduce_values(r, x.half())
    assert got.tolist() == [2050.0] * 8 + [2048.0] * 2   # 2048 + 1 rounds to 2048 each hop
    assert nccl.reduce_values(r, x.bfloat16()).tolist() == [2048.0] * 10
    f = nccl.reduce_values(nccl.ring_allreduce(3, 10), x.float() * 8192)
    assert f.dtype == np.float32 and f.tolist() == [2050.0 * 8192] * 10


def test_avg_is_premulsum_on_floats_and_sumpostdiv_on_ints():
    r = nccl.ring_allreduce(3, 8, "float16")
    x = torch.tensor([[1.0] * 8, [2.0] * 8, [4.0] * 8], dtype=torch.float16)
    s = torch.tensor(float(np.float32(1 / 3)), dtype=torch.float16)   # f16(f32(1/3))
    want = ((x[1] * s + x[2] * s) + x[0] * s)                          # chain (1+2)+0
    got = nccl.reduce_values(r, x, op="avg")
    assert torch.equal(torch.from_numpy(got.astype(np.float16)), want)
    ints = np.array([[-7] * 8, [0] * 8, [0] * 8], np.int32)
    assert nccl.reduce_values(nccl.ring_allreduce(3, 8, "int32"), ints, op="avg").tolist() \
        == [-2] * 8                                                     # C division: to 0
    with pytest.raises(ValueError, match="op"):
        nccl.reduce_values(r, x, op="max")


def test_bad_arguments_say_what_is_allowed():
    with pytest.raises(ValueError, match="protocol"):
        nccl.ring_allreduce(3, 10, proto="ll256")
    with pytest.raises(ValueError, match="nranks"):
        nccl.ring_allreduce(1, 10)
    with pytest.raises(ValueError, match="dtype"):
        nccl.ring_allreduce(3, 10, "complex64")
    with pytest.raises(ValueError, match="MAXCHANNELS"):
        nccl.ring_allreduce(3, 10, nchannels=65)
    with pytest.raises(ValueError, match="even"):
        nccl.tree_allreduce(4, 10, nchannels=3)
    assert isinstance(nccl.ring_allreduce(2, 1).tree_at(0), SumTree)
