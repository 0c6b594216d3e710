"""torch.distributed collectives with gloo: per-position trees for world sizes 2 to 8.

Each revelation also runs collectives on random data and checks that every rank's result
is the replay of the tree revealed for its element position.
"""
import pytest
import torch.distributed as dist

from torch_mma_emu import fprev
pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")


@pytest.fixture(scope="module")
def allreduce_2_to_8():
    # one process start for all world sizes (sub-groups of an 8-process world)
    return fprev.reveal_allreduce(list(range(2, 9)), numel=48)


@pytest.mark.parametrize("ws", range(2, 9))
def test_allreduce_trees_per_chunk(allreduce_2_to_8, ws):
    res = allreduce_2_to_8[ws]
    assert res.world_size == ws and res.checked > 0
    covered = [p for s, e, _ in res.ranges for p in range(s, e)]
    assert covered == list(range(48))
    for _, _, tree in res.ranges:
        assert tree.n == ws
        # a ring passes each chunk around once: a chain over all ranks
        assert tree.describe() in ("sequential", "reversed") or \
            tree.describe().startswith("sequential in order")
    if ws > 2:
        assert len(res.trees()) > 1  # different chunks, different orders


def test_allreduce_single_world_size_with_verify():
    res = fprev.reveal_allreduce(4, numel=8, verify=True)
    assert res.probes == 2 * 6
    assert res.checked > 0 and "4 ranks" in res.describe()
    chain = res.tree_at(0)  # a chain over the 4 ranks, the order gloo's ring gives chunk 0
    assert chain.depth() == 3 and chain.arities() == {("add", 2): 3}


def test_reduce_scatter():
    res = fprev.reveal_allreduce(3, op="reduce_scatter", numel=6)
    assert res.checked > 0 and [(s, e) for s, e, _ in res.ranges][0][0] == 0
    assert res.ranges[-1][1] == 6
