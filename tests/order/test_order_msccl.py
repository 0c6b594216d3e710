"""MSCCL allreduce XML -> per-chunk reduction trees (torch_mma_emu.order.msccl): RCCL
2.21.5's own XML files and a hand-written 3-rank ring."""
from pathlib import Path

import numpy as np
import pytest

from torch_mma_emu.order import rccl
from torch_mma_emu.order.msccl import MscclAlgorithm, MscclError
from torch_mma_emu.order.tree import SumTree

DATA = Path(__file__).resolve().parent.parent / "data" / "msccl"
RING3 = DATA / "ring-3n-hand.xml"


def T(text, n):
    return SumTree.parse(text, n)


def test_hand_ring_three_ranks():
    # chunk c starts at GPU c+1, then c+2 adds its own value first, c finishes
    alg = MscclAlgorithm(RING3)
    assert (alg.ngpus, alg.nchunks, alg.proto) == (3, 3, "simple")
    assert alg.chunk_trees() == [T("(0+(2+1))", 3), T("(1+(0+2))", 3), T("(2+(1+0))", 3)]
    r = alg.ranges(6)
    assert [(s, e) for s, e, _ in r] == [(0, 2), (2, 4), (4, 6)]
    # its tree for chunk 1 is RCCL ring's chunk 1 (((2+0)+1)); the ring puts 6 fp32 in
    # chunk 0 whole (alignCount 2048), MSCCL in three chunks
    assert rccl.ring_allreduce(3, 6)[0][2] == T("((1+2)+0)", 3)
    assert alg.ranges(6)[1][2] == T("((2+0)+1)", 3)


def test_hand_allpairs_four_ranks():
    # GPU g adds its own chunk g, then the other ranks' copies in ascending order ('re'
    # steps fused after three waits); 'r' into scratch, 's' back, 'nop' dependencies
    alg = MscclAlgorithm(DATA / "allpairs-4n-hand.xml")
    assert alg.chunk_trees() == [T("(((0+1)+2)+3)", 4), T("(((1+0)+2)+3)", 4),
                                 T("(((2+0)+1)+3)", 4), T("(((3+0)+1)+2)", 4)]
    # RCCL refuses nop waits followed by an instruction that waits on nothing
    text = (DATA / "allpairs-4n-hand.xml").read_text()
    gpu2 = text.index('<gpu id="2"')
    cut = text.index('type="re" srcbuf="s" srcoff="0" dstbuf="i" dstoff="2" cnt="1" '
                     'depid="2" deps="1"', gpu2)
    bad = text[:cut] + text[cut:].replace('depid="2" deps="1"', 'depid="-1" deps="-1"', 1)
    with pytest.raises(MscclError, match="without a wait of its own"):
        MscclAlgorithm(bad)


def test_rccl_allpairs_in_place():
    # tools/msccl-algorithms/allreduce-allpairs-8n-ll-32tb.xml: GPU g owns chunks
    # 32g'..: it adds its own copy, then the scratch copies of the other GPUs in
    # ascending order ('re' steps srcoff 0, 8, ..., 48), and sends the sum back
    alg = MscclAlgorithm(DATA / "allreduce-allpairs-8n-ll-32tb.xml.gz")
    assert (alg.ngpus, alg.nchunks, alg.nchannels, alg.proto, alg.outofplace) == \
        (8, 256, 4, "ll", False)
    trees = alg.chunk_trees()
    assert trees[0] == T("(((((((0+1)+2)+3)+4)+5)+6)+7)", 8)
    assert trees[32] == T("(((((((4+0)+1)+2)+3)+5)+6)+7)", 8)
    assert len(set(trees)) == 7         # 8 owners; owners 0 and 1 give the same tree
    op = MscclAlgorithm(DATA / "allreduce-allpairs-8n-ll-32tb-op.xml.gz")
    assert op.outofplace and op.chunk_trees() == trees
    with pytest.raises(MscclError, match="out-of-place only"):
        op.chunk_trees(inplace=True)
    with pytest.raises(MscclError, match="in-place only"):
        alg.chunk_trees(inplace=False)
    assert alg.applies(8, 256 * 16, 256 * 16 * 4) is None
    assert "outside" in alg.applies(8, 256 * 128, 256 * 128 * 4)
    assert "multiple" in alg.applies(8, 100, 400)
    assert "ranks" in alg.applies(4, 256, 1024)


def test_rccl_ring_sixteen_gpus():
    # tools/msccl-unit-test-algorithms/all-reduce-ring-ll.xml: 24 rings over 16 GPUs;
    # every chunk is a chain (rrs / rrcs: own value + what came in), ending where rrcs ran
    alg = MscclAlgorithm(DATA / "all-reduce-ring-ll.xml.gz")
    assert (alg.ngpus, alg.nchunks, alg.nchannels) == (16, 384, 24)
    trees = alg.chunk_trees()
    assert trees[0] == T("(1+(9+(8+(12+(13+(15+(14+(10+(11+(3+(2+(6+(7+(5+(4+0)))))))))))))))",
                         16)
    assert all(t.depth() == 15 for t in trees)         # chains over 16 ranks
    assert alg.chunk_trees(inplace=False) == trees      # both modes, the same sums
    r = alg.ranges(384 * 3)
    assert r.numel == 1152


def test_fold_in_chunk_order():
    alg = MscclAlgorithm(RING3)
    x = np.array([[1e8, 1e8, 1.0], [1.0, -1e8, 1.0], [-1e8, 1.0, 1e8]], np.float32)
    got = rccl.reduce_values(alg.ranges(3), x)
    # chunk 0: (x1 + x2) + x0 = (1 - 1e8) + 1e8 = 0; chunk 1: (x2 + x0) + x1 = 0 (rank
    # order would give 1); chunk 2: (x0 + x1) + x2 = 1e8
    assert got.tolist() == [0.0, 0.0, 1e8]


BAD = [
    ("<algo", "does not parse"),
    ("<foo/>", "not <algo>"),
    ('<algo name="a" proto="LL" nchannels="1" nchunksperloop="2" ngpus="2" coll="alltoall" '
     'inplace="1" outofplace="0" minBytes="0" maxBytes="0"/>', "only allreduce"),
    ('<algo name="a" proto="XL" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" '
     'inplace="1" outofplace="0" minBytes="0" maxBytes="0"/>', "proto"),
    ('<algo name="a" proto="LL" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" '
     'inplace="1" outofplace="0" minBytes="0" maxBytes="0"/>', "gpu"),
]


@pytest.mark.parametrize("text, msg", BAD)
def test_bad_xml(text, msg):
    with pytest.raises(MscclError, match=msg):
        MscclAlgorithm(text)


def _edit(old, new):
    return RING3.read_text().replace(old, new, 1)


@pytest.mark.parametrize("old, new, msg", [
    ('type="rrs" srcbuf="i" srcoff="1"', 'type="xx" srcbuf="i" srcoff="1"', "step types"),
    ('srcoff="2" dstbuf="i" dstoff="2" cnt="1"', 'srcoff="5" dstbuf="i" dstoff="2" cnt="1"',
     "reaches chunks"),
    ('<step s="4" type="r"', '<step s="5" type="r"', "numbers its steps"),
    ('depid="1" deps="0"', 'depid="3" deps="0"', "does not have"),
    ('depid="1" deps="0" hasdep="0"', 'depid="1" deps="0" hasdep="2"', "hasdep"),
    ('<tb id="0" send="1" recv="2"', '<tb id="0" send="-1" recv="2"', "send=-1"),
    # GPU 2 never sends its first message: the ring stalls
    ('<step s="0" type="s" srcbuf="i" srcoff="1"', '<step s="0" type="nop" srcbuf="i" srcoff="1"',
     "deadlocks"),
    # GPU 0 finishes chunk 0 without adding its own value: rank 0 missing
    ('type="rrcs" srcbuf="i" srcoff="0"', 'type="rcs" srcbuf="i" srcoff="0"', "every rank"),
])
def test_bad_schedule(old, new, msg):
    text = _edit(old, new)
    assert text != RING3.read_text()
    with pytest.raises(MscclError, match=msg):
        MscclAlgorithm(text).chunk_trees()


def test_missing_file():
    with pytest.raises(MscclError, match="not found"):
        MscclAlgorithm("/nonexistent/algo.xml")
    with pytest.raises(ValueError, match="multiple"):
        MscclAlgorithm(RING3).ranges(4)
