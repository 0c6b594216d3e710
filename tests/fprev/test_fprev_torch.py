"""torch.sum / dot / mv / matmul and NumPy on this CPU: revealed, then checked by replay.

A revealed tree must reproduce the implementation bit for bit on random inputs (replay
sums in the tree's order with IEEE additions).  For dot/mv/matmul the random inputs are
chosen so that every product is exact in float32 (12-bit significands times powers of two),
which makes FMA and separate multiply-add agree and isolates the summation order.
"""
import numpy as np
import pytest
import torch

from torch_mma_emu import fprev
from torch_mma_emu.fprev import FPRevError, RowsTarget, replay

G = torch.Generator().manual_seed(0)


def short_floats(*shape):
    """Random float32 with 12-bit significands: products of two are exact in float32."""
    sig = torch.randint(2 ** 11, 2 ** 12, shape, generator=G) * (
        torch.randint(0, 2, shape, generator=G) * 2 - 1)
    return (sig * 2.0 ** torch.randint(-20, -5, shape, generator=G)).float()


def pow2(*shape):
    return (2.0 ** torch.randint(-3, 4, shape, generator=G)).float()


def same_bits(a, b) -> bool:
    return np.array_equal(np.asarray(a, np.float64), np.asarray(b, np.float64))


@pytest.mark.parametrize("n", [1, 2, 3, 7, 33, 100, 1024, 8192, 65536])
def test_torch_sum_float32_replays_exactly(n):
    tree = fprev.reveal_sum(n)
    assert tree.n == n and tree.meta["probes"] >= n - 1
    x = torch.randn(8, n, generator=G)
    want = torch.stack([torch.sum(r) for r in x])
    assert same_bits(replay(tree, x), want)


def test_torch_sum_verified():
    tree = fprev.reveal_sum(4096, verify=True)
    assert tree.meta["verified"]
    assert tree == fprev.reveal_sum(4096, algorithm="fprev")


@pytest.mark.parametrize("dtype, n", [(torch.float16, 4096), (torch.bfloat16, 1024),
                                      (torch.float64, 2048)])
def test_narrow_and_wide_sums(dtype, n):
    """fp16/bf16 outputs count at most 2048/256 units exactly: the saturated probes are
    re-run on smaller subtrees.  torch accumulates them in float32."""
    tree = fprev.reveal_sum(n, dtype=dtype)
    x = torch.randn(8, n, generator=G).to(dtype)
    want = torch.stack([torch.sum(r) for r in x]).double()
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    got = torch.from_numpy(replay(tree, x.to(acc))).to(acc).to(dtype).double()
    assert torch.equal(got, want)


@pytest.mark.parametrize("shape, dim", [((16, 1000), 1), ((1000, 16), 0), ((4, 64, 8), 1)])
def test_sum_over_a_dim(shape, dim):
    tree = fprev.reveal_sum(shape=shape, dim=dim)
    assert tree.meta["calls"] < tree.meta["probes"]  # several probes per call
    T = torch.randn(shape, generator=G)
    want = torch.sum(T, dim=dim).reshape(-1)
    x = T.movedim(dim, -1).reshape(-1, shape[dim])
    assert same_bits(replay(tree, x), want)


@pytest.mark.parametrize("n", [16, 100, 1024])
def test_dot_replays_exactly(n):
    tree = fprev.reveal_dot(n)
    x, y = short_floats(8, n), pow2(8, n)
    want = torch.stack([torch.dot(a, b) for a, b in zip(x, y)])
    assert same_bits(replay(tree, x * y), want)


@pytest.mark.parametrize("m, n", [(32, 64), (64, 1024)])
def test_mv_replays_exactly(m, n):
    tree = fprev.reveal_mv(m, n)
    A, v = short_floats(m, n), pow2(n)
    assert same_bits(replay(tree, A * v), torch.mv(A, v))


@pytest.mark.parametrize("n", [64, 256, 1024])
def test_matmul_replays_exactly(n):
    tree = fprev.reveal_matmul(n, n, n)
    assert tree.meta["calls"] < 20  # n probes per matmul
    A, B = short_floats(n, n), pow2(n, n)
    D = A @ B
    for j in (0, n // 2, n - 1):  # the tree of column 0 holds for the other columns too
        assert same_bits(replay(tree, A * B[:, j]), D[:, j])


def test_matmul_with_c_places_the_accumulator():
    tree = fprev.reveal_matmul(32, 8, 64, with_c=True)
    A, B, C = short_floats(32, 64), pow2(64, 8), short_floats(32, 8)
    D = torch.addmm(C, A, B)
    x = torch.cat([A * B[:, 0], C[:, :1]], dim=1)
    assert tree.n == 65 and same_bits(replay(tree, x), D[:, 0])


def test_numpy_sum_and_dot():
    s = fprev.reveal_sum(300, library="numpy", verify=True)
    x = torch.randn(4, 300, generator=G)
    assert same_bits(replay(s, x), [np.sum(r.numpy()) for r in x])
    d = fprev.reveal_dot(300, library="numpy")
    a, b = short_floats(4, 300), pow2(4, 300)
    assert same_bits(replay(d, a * b), [np.dot(p.numpy(), q.numpy()) for p, q in zip(a, b)])


def test_numpy_float32_sum_is_8_way_for_small_n():
    # seed 001 section 6.1: NumPy sums 8 <= n <= 128 float32 numbers in 8 ways, pairwise
    assert fprev.reveal_sum(32, library="numpy") == fprev.strided(32, 8, "pairwise")


class _RowDependent(RowsTarget):
    """Row i sums in a different order than row 0: Step 1 must catch it."""

    def __init__(self):
        vals = fprev.ProbeValues.for_dtype(torch.float32)
        super().__init__(8, 4, torch.float32, "cpu", vals, "row-dependent")

    def eval_rows(self, X):
        out = [X[0].sum()] + [X[i].flip(0).cumsum(0)[-1] for i in range(1, len(X))]
        return torch.stack(out)


def test_step1_rejects_rows_that_differ():
    with pytest.raises(FPRevError, match="Step 1"):
        fprev.reveal_target(_RowDependent())
