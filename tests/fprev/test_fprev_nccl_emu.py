"""FPRev reveals exactly the modelled NCCL trees through the emulated backend (gloo
processes summing in order.nccl's order): uneven counts, two channels, ring and tree."""
import subprocess
import sys

import pytest

from torch_mma_emu import fprev
from torch_mma_emu.order import nccl


def same(revealed, modelled):
    return [(s, e, t) for s, e, t in revealed] == [(s, e, t) for s, e, t in modelled]


@pytest.mark.slow     # about 3 minutes: 7 worker processes, 3000 positions
def test_reveal_finds_the_modelled_ring_and_tree_trees():
    # LL, 2 channels, 3000 fp32 on 3 ranks: channel 0 holds 2048 (chunks of 684), channel 1
    # 952 (chunks of 320): the revealed ranges move where the partition says
    res = fprev.reveal_allreduce(3, backend="nccl-emu", numel=3000, checks=2,
                                 nccl_emu=dict(proto="ll", nchannels=2))
    want = nccl.ring_allreduce(3, 3000, proto="ll", nchannels=2)
    assert [(s, e) for s, e, _ in want] == [(0, 684), (684, 1368), (1368, 2048),
                                            (2048, 2368), (2368, 2688), (2688, 3000)]
    assert same(res.ranges, want)
    res = fprev.reveal_allreduce(4, backend="nccl-emu", numel=10, checks=2,
                                 nccl_emu=dict(algo="tree", nchannels=2))
    assert same(res.ranges, nccl.tree_allreduce(4, 10, nchannels=2))


def test_cli_options_belong_to_nccl_emu():
    r = subprocess.run([sys.executable, "-m", "torch_mma_emu", "reveal", "allreduce",
                        "--world-size", "3", "--algo", "tree"], capture_output=True, text=True)
    assert r.returncode == 2 and "--backend nccl-emu" in r.stderr


@pytest.mark.slow     # about a minute: 5 worker processes
def test_reveal_finds_the_pat_trees():
    from torch_mma_emu.order import nccl_pat
    res = fprev.reveal_allreduce(5, op="reduce_scatter", backend="nccl-emu", numel=10,
                                 checks=2, nccl_emu=dict(algo="pat"))
    assert same(res.ranges, nccl_pat.pat_reduce_scatter(5, 2))
    assert not same(res.ranges, nccl.ring_reduce_scatter(5, 2))
