"""FPRev agreement for softmax's denominator and layer_norm / rms_norm's block reduction
(issue 39 item 5): the tree FPRev reveals from the model's own reduction code equals the
tree the model states.

Why not reveal through ``torch.softmax`` / ``F.layer_norm`` themselves: FPRev's probes need
signed summands (+big, -big, units), and softmax sums ``exp(x - max) > 0`` while rms_norm
sums ``x * x >= 0`` and layer_norm's m2 is a Welford combine, not a sum of the inputs.  So
the probes go into the functions the routed ops run: ``softmax.row_sum`` (the lane loop and
XOR butterflies; ``evaluate`` calls it on ``exp(x - max)``) and ``norms.block_sum`` (the
thread layout and lane / warp halving that ``norms.stats`` runs with the Welford update and
combine).  The route tests below check that the ops under ``emulate`` go through those
functions.  Limitation: this checks the emulation against the model's stated order, not
against a GPU."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import torch_mma_emu as tme
from torch_mma_emu.aten_cuda import norms
from torch_mma_emu.aten_cuda import softmax as sm
from torch_mma_emu.fprev import reveal


def _denominator(v):
    X = v.numpy()[None].astype(np.float32)
    return float(sm.row_sum(sm.lanes(X, np.float32(0)))[0])


@pytest.mark.parametrize("n", [2, 7, 32, 33, 100, 257, 1000])
def test_softmax_denominator_tree(n):
    got = reveal(_denominator, n)
    assert got == sm.tree(n)
    if n > 32:          # lanes strided by 32, then a halving tree: not a left-to-right sum
        assert got != reveal(lambda v: float(np.cumsum(v.numpy())[-1]), n)


def test_softmax_route_uses_row_sum(monkeypatch):
    if sm.device_math() is None:
        pytest.skip("no CUDA expf / logf model in this checkout")
    calls = []
    real = sm.row_sum

    def spy(e, *a, **k):
        calls.append(e.shape)
        return real(e, *a, **k)
    monkeypatch.setattr(sm, "row_sum", spy)
    x = torch.randn(3, 100, generator=torch.Generator().manual_seed(0))
    with tme.emulate("sm90"):
        y = torch.softmax(x, -1)
    assert calls == [(3, 4, 32)]
    assert torch.equal(y, sm.softmax(x))


def _block(v):
    return float(norms.block_sum(v.numpy()[None].astype(np.float32))[0])


@pytest.mark.parametrize("n", [4, 12, 128, 516, 1040])
def test_norm_block_reduction_tree(n):
    got = reveal(_block, n)
    assert got == norms.tree(n)


def test_norm_tree_is_the_statistics_order():
    """``stats(rms=True)`` sums x*x in ``tree``'s order: replaying the tree on the squares
    with fma-per-thread rounding is what block_sum does on the exact squares (checked on
    inputs whose squares are exact in float32, where fma(x, x, m2) == m2 + x*x)."""
    rng = np.random.default_rng(0)
    X = np.ldexp(rng.integers(-2048, 2048, (4, 1040)).astype(np.float32),
                 rng.integers(-12, 0, (4, 1040))).astype(np.float32)     # 11-bit: exact x*x
    sq = (X.astype(np.float64) ** 2).astype(np.float32)
    assert np.array_equal(sq.astype(np.float64), X.astype(np.float64) ** 2)   # exact squares
    _, ms = norms.stats(X, rms=True)
    want = (norms.block_sum(sq) / np.float32(1040)).astype(np.float32)
    assert np.array_equal(ms.view(np.int32), want.view(np.int32))
    assert not np.array_equal(ms, (sq.sum(1, dtype=np.float32) / np.float32(1040)))


def test_layer_norm_route_uses_the_block_order(monkeypatch):
    calls = []
    real = norms.stats

    def spy(X, **k):
        calls.append((X.shape, k))
        return real(X, **k)
    monkeypatch.setattr(norms, "stats", spy)
    x = torch.randn(5, 512, generator=torch.Generator().manual_seed(1))
    with tme.emulate("sm90"):
        F.layer_norm(x, (512,))
    assert calls and calls[0][0] == (5, 512)
