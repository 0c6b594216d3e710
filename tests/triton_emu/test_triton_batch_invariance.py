"""tme.batch_invariance: a matmul kernel with fixed tiles is batch-invariant on every arch;
one that splits K for small batches (as libraries do to fill the GPU) changes exactly the
rows the small batches hold, and the report names the split; torch code under tme.emulate
is checked the same way."""
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import torch_mma_emu as tme  # noqa: E402
import torch_mma_emu.triton as tmt  # noqa: E402


@triton.jit
def rows_mm(X, W, P, M, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr,
            SPLIT: tl.constexpr):
    """Split-K: program (i, s) writes the partial product of the s-th K slice to P[s]."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    s = tl.program_id(1)
    rn = tl.arange(0, N)
    m = rm[:, None] < M
    part: tl.constexpr = K // SPLIT
    rk = s * part + tl.arange(0, part)
    x = tl.load(X + rm[:, None] * K + rk[None, :], mask=m, other=0.0)
    w = tl.load(W + rk[:, None] * N + rn[None, :])
    tl.store(P + s * M * N + rm[:, None] * N + rn[None, :], tl.dot(x, w), mask=m)


def launcher(split_for_small):
    def run(x, w):
        M, K = x.shape
        N = w.shape[1]
        split = 2 if split_for_small and M <= 4 else 1     # chosen from the batch size
        p = torch.empty(split, M, N, dtype=torch.float32)
        rows_mm[(triton.cdiv(M, 16), split)](x, w, p, M, N=N, K=K, BM=16, SPLIT=split)
        return p[0] if split == 1 else p[0] + p[1]       # the fix-up adds the partials
    return run


def _data():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(12, 128, generator=g).half(), torch.randn(128, 32, generator=g).half())


@pytest.mark.parametrize("arch", ["H100", "A100", "MI300X"])
def test_fixed_tiles_are_batch_invariant(arch):
    rep = tme.batch_invariance(launcher(False), _data(), [1, 3, 8, 12], arch)
    assert rep.invariant and rep.rows == [] and "every row has the same bits" in str(rep)
    assert any(k.startswith("tl.dot") for k in rep.configs[12])
    assert not [k for k in rep.differences if "SPLIT" in k]


@pytest.mark.parametrize("arch", ["H100", "MI300X"])
def test_split_for_small_batches_changes_exactly_their_rows(arch):
    rep = tme.batch_invariance(launcher(True), _data(), [2, 4, 8, 12], arch)
    assert rep.rows == [0, 1, 2, 3]          # rows 4-11 only ran unsplit
    assert rep.changes[0].groups == [[2, 4], [8, 12]]
    assert rep.changes[3].groups == [[4], [8, 12]]
    split = rep.differences["launch rows_mm#1 SPLIT"]
    assert split == {2: 2, 4: 2, 8: 1, 12: 1}
    assert "SPLIT" in str(rep) and "row 3" in str(rep)
    x, w = _data()                         # the small batches' bits are the split's own
    with tmt.emulate(arch):
        small = launcher(True)(x[:2], w)
        plain = launcher(False)(x[:2], w)
    assert not torch.equal(small, plain)
    assert "tl.dot" in " ".join(rep.configs[2]) and "tl.dot" in " ".join(rep.configs[12])


def test_torch_code_under_emulate():
    x = torch.randn(9, 64, generator=torch.Generator().manual_seed(1))
    W = torch.randn(64, 16, generator=torch.Generator().manual_seed(2))
    rep = tme.batch_invariance(lambda a, b: a @ b, (x, W), [1, 5, 9], "H100")
    assert rep.invariant
    assert any(k.startswith("torch aten.mm") for k in rep.configs[9]), rep.configs[9]

    def chunked(a, b):       # small batches sum K in two halves: another order
        if a.shape[0] <= 4:
            return a[:, :32] @ b[:32] + a[:, 32:] @ b[32:]
        return a @ b
    rep = tme.batch_invariance(chunked, (x, W), [1, 4, 9], "H100")
    assert rep.rows == [0, 1, 2, 3]
    assert any("aten.add" in k or "[(4, 32)" in k or "32" in k for k in rep.differences)


def test_bad_input_is_named():
    x, w = _data()
    with pytest.raises(ValueError, match="two distinct batch sizes"):
        tme.batch_invariance(launcher(False), (x, w), [4], "H100")
    with pytest.raises(ValueError, match="largest batch size"):
        tme.batch_invariance(launcher(False), (x, w), [1, 64], "H100")
    with pytest.raises(ValueError, match="rows"):
        tme.batch_invariance(lambda a, b: (a @ b).sum(), (x[:2].float(), w.float()), [1, 2],
                             "H100")


@pytest.mark.slow          # two FPRev reveals of a 128-term emulated sum (~30 s)
def test_fprev_trees_name_the_split():
    x, w = _data()
    rep = tme.batch_invariance(launcher(True), (x[:8], w), [2, 8], "H100", trees=(0, 1))
    assert rep.rows == [0, 1]
    t = rep.trees[0]
    assert set(t) == {2, 8}
    assert t[2].startswith("2 blocks of 64") and t[8].startswith("chain of")
    assert "summation tree of row 0 (FPRev)" in str(rep)


def test_trees_argument_is_checked():
    x, w = _data()
    with pytest.raises(ValueError, match="trees=\\(x, w\\)"):
        tme.batch_invariance(launcher(True), (x[:8], w), [2, 8], "H100", trees=(0, 5))
