"""FPRev reveals exactly the modelled RCCL trees through the emulated backend (gloo
processes summing in order.rccl's or an MSCCL XML's order): RCCL's channel split and
alignment, and the per-chunk trees of a hand-written MSCCL ring."""
import os
import pytest

from torch_mma_emu import fprev
from torch_mma_emu.cli import main
from torch_mma_emu.order import nccl, rccl
from torch_mma_emu.order.msccl import MscclAlgorithm

HAND = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                    "msccl", "ring-3n-hand.xml")


def same(revealed, modelled):
    return [(s, e, t) for s, e, t in revealed] == [(s, e, t) for s, e, t in modelled]


@pytest.mark.slow     # about 3 minutes: 10 worker processes
def test_reveal_finds_the_modelled_rccl_and_msccl_trees():
    # LL, 2 channels, 1200 fp32 on 3 ranks: alignCount 512, channel 0 holds 1024 (chunks of
    # 512), channel 1 the other 176 in chunk 0; NCCL cuts the same call elsewhere
    res = fprev.reveal_allreduce(3, backend="rccl-emu", numel=1200, checks=2,
                                 nccl_emu=dict(proto="ll", nchannels=2))
    want = rccl.ring_allreduce(3, 1200, proto="ll", nchannels=2)
    assert [(s, e) for s, e, _ in want] == [(0, 512), (512, 1024), (1024, 1200)]
    assert same(res.ranges, want)
    assert not same(want, nccl.ring_allreduce(3, 1200, proto="ll", nchannels=2))
    res = fprev.reveal_allreduce(3, backend="rccl-emu", numel=6, checks=2,
                                 nccl_emu=dict(msccl=MscclAlgorithm(HAND)))
    assert same(res.ranges, MscclAlgorithm(HAND).ranges(6))
    # tree, 4 ranks, 2 channels: 2048 (a multiple of alignCount) on tree 0, 52 on tree 1
    res = fprev.reveal_allreduce(4, backend="rccl-emu", numel=2100, checks=2,
                                 nccl_emu=dict(algo="tree", nchannels=2))
    want = rccl.tree_allreduce(4, 2100, nchannels=2)
    assert [(s, e) for s, e, _ in want] == [(0, 2048), (2048, 2100)]
    assert same(res.ranges, want)


def _cli(capsys, *args):
    code = main(["reveal", "allreduce", "--world-size", "3", *args])
    return code, capsys.readouterr().err


def test_cli_msccl_errors(tmp_path, capsys):
    bad = tmp_path / "bad.xml"
    bad.write_text("<algo")
    code, err = _cli(capsys, "--msccl", str(bad))
    assert code == 2 and "does not parse" in err and len(err.strip().splitlines()) == 1
    stuck = tmp_path / "stuck.xml"      # parses, but GPU 2 never sends: it deadlocks
    with open(HAND) as f:
        stuck.write_text(f.read().replace('<step s="0" type="s" srcbuf="i" srcoff="1"',
                                          '<step s="0" type="nop" srcbuf="i" srcoff="1"'))
    code, err = _cli(capsys, "--msccl", str(stuck))
    assert code == 2 and "deadlocks" in err and len(err.strip().splitlines()) == 1
    code, err = _cli(capsys, "--msccl", HAND, "--backend", "gloo")
    assert code == 2 and "rccl-emu" in err
    code, err = _cli(capsys, "--backend", "gloo", "--nchannels", "2")
    assert code == 2 and "rccl-emu" in err
    with pytest.raises(ValueError, match="nthreads"):
        fprev.reveal_allreduce(3, backend="rccl-emu", nccl_emu=dict(nthreads=0))
    with pytest.raises(ValueError, match="apply to backend"):
        fprev.reveal_allreduce(3, backend="gloo", nccl_emu=dict(algo="tree"))
