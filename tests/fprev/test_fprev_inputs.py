"""FPRev's bad inputs get clear errors (found in review): malformed trees, builder
arguments, devices, dims, CLI paths and backends."""
import numpy as np
import pytest
import torch

from torch_mma_emu import fprev
from torch_mma_emu.cli import main
from torch_mma_emu.fprev import builders
from torch_mma_emu.order import SumTree


def test_an_add_node_has_two_children():
    with pytest.raises(ValueError, match="'add' node has 2 children"):
        SumTree.parse("(0+1+2)")


def test_lca_size_takes_leaves_only():
    t = builders.sequential(4)
    for i, j in ((-1, 2), (0, 10), (0.5, 1)):
        with pytest.raises(ValueError, match="lca_size takes leaves 0..3"):
            t.lca_size(i, j)
    assert t.lca_size(0, 3) == 4


@pytest.mark.parametrize("text,msg", [("[]", "not a serialised SumTree"),
                                      ('{"format": "x"}', "not a serialised SumTree")])
def test_bad_json_trees(text, msg):
    with pytest.raises(ValueError, match=msg):
        SumTree.from_json(text)


def test_bad_tree_text_and_replay_input():
    with pytest.raises(ValueError, match="every leaf"):
        SumTree.parse("(0+99999999999)")
    with pytest.raises(ValueError, match="scalar"):
        builders.sequential(4).replay(np.float32(1))


@pytest.mark.parametrize("make,msg", [(lambda: builders.strided(8, 0), "ways"),
                                      (lambda: builders.blocked(8, 0), "block"),
                                      (lambda: builders.blocked(8, -2), "block"),
                                      (lambda: builders.fused_chain(8, 0), "L"),
                                      (lambda: builders.sequential(0), "n")])
def test_builders_check_their_arguments(make, msg):
    with pytest.raises(ValueError, match=f"{msg} must be a positive int"):
        make()


def test_reveal_checks_device_n_and_dim():
    with pytest.raises(ValueError, match="device must be cpu or cuda"):
        fprev.reveal(torch.sum, 8, device="meta")
    with pytest.raises(ValueError, match="n must be a positive int"):
        fprev.reveal(torch.sum, True)
    with pytest.raises(ValueError, match="dim=5 is not a dimension"):
        fprev.reveal_sum(4, shape=(4, 8), dim=5)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="cuda"):
            fprev.reveal(torch.sum, 8, device="cuda")


@pytest.mark.parametrize("argv,msg", [
    (["reveal", "sum", "--n", "16", "--out", "t.jpg"], "must end with one of"),
    (["reveal", "sum", "--n", "16", "--out", "/no/such/folder/t.png"], "no folder"),
    (["reveal", "allreduce", "--world-size", "2", "--backend", "foo"], "invalid choice: 'foo'"),
    (["reveal", "sum", "--shape", "4,8", "--dim", "5"], "not a dimension"),
    (["reveal", "sum", "--n", "4", "--shape", "4,8", "--dim", "1"], "not both")])
def test_cli_errors_before_any_work(capsys, argv, msg):
    assert main(argv) == 2
    assert msg in capsys.readouterr().err


def test_chains_with_a_short_last_chunk_or_c_first_are_described():
    assert builders.fused_chain(9, 4).describe() == \
        "chain of (4+1)-term fused sums over consecutive chunks, the last adding 1"
    t = fprev.reveal_matmul(4, 4, 16, mm="emulated", arch="sm80", dtype=torch.float16,
                            with_c=True)
    assert t.describe() == "chain of (8+1)-term fused sums, the first fusing 9"
