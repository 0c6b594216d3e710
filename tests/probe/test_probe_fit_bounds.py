"""``fit`` on tiny and degenerate sample files: it says when the samples cannot decide
between the models that reproduce them, stops the search once ``max_consistent`` fit (a
one-sample file used to run every one of ~10^4 candidates: 82 s), and refuses samples
longer than ``MMA_EMU_FIT_MAX_K`` products before any work (2 samples of K = 10^6 ran past
120 s at 2 GB).  Sample files are synthetic: random fp16 inputs, the answers of the sm90
model, written in the tests/data/hwdata convention (uint32 fp32 bit patterns)."""
import warnings

import numpy as np
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu.cli import main
from torch_mma_emu.probe import search
from torch_mma_emu.probe.fit import FitUndecidedWarning, fit

SPEC = tme.spec("sm90", "fp16")   # fp16 inputs, fp32 output


def _samples(S, K, seed=0):
    """a (S, K), b (S, K), c (S,), d (S,) uint32 fp32 bit patterns answered by SPEC."""
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(S, K, generator=g) * 4).half()
    b = (torch.randn(S, K, generator=g) * 4).half()
    c = torch.randn(S, generator=g).float()
    d = torch.stack([tme.emulated_mm(a[i:i + 1], b[i:i + 1].T, c[i:i + 1, None], arch=SPEC)[0]
                     for i in range(S)]).reshape(S)

    def u32(t):
        return t.float().view(torch.int32).numpy().astype(np.int64) & 0xFFFFFFFF
    return {"a": u32(a), "b": u32(b), "c": u32(c), "d": u32(d)}


def _save(tmp_path, name, arrays):
    p = tmp_path / name
    np.savez(p, **{k: v.astype(np.uint32) for k, v in arrays.items()})
    return p


def test_one_sample_file_is_undecided_and_stops_early(tmp_path):
    path = _save(tmp_path, "one.npz", _samples(1, 16))
    with pytest.warns(FitUndecidedWarning, match="cannot decide") as rec:
        res = fit(path, "fp16", "fp32", ops=["t_fdpa", "e_fdpa"], max_consistent=8)
    assert res.undecided and res.stopped_early
    assert res.consistent >= 2 and res.checked < res.space
    msg = str(rec[0].message)
    assert "1 sample" in msg and "more samples" in msg and f"{res.checked} of {res.space}" in msg
    text = res.describe()
    assert "undecided: at least" in text and "more samples" in text


def test_undecided_without_early_stop_still_says_so():
    """Two samples and no bound: every candidate runs, the count is exact (no 'at least')
    and describe() says the samples cannot decide; no warning (the search ran in full)."""
    arrays = _samples(2, 8, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FitUndecidedWarning)
        res = fit(tuple(arrays[k] for k in "abcd"), "fp16", "fp32", ops=["t_fdpa"],
                  passes=False, max_consistent=None)
    assert not res.stopped_early and res.checked == res.space
    assert res.undecided and res.consistent == len(res.candidates) >= 2
    assert f"undecided: {res.consistent} models reproduce all 2 samples" in res.describe()


def test_enough_samples_decide_and_do_not_warn():
    """Random samples of the sm90 model: the search runs in full, and the registry's model
    is among the few that fit."""
    arrays = _samples(300, 16, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FitUndecidedWarning)
        res = fit(tuple(arrays[k] for k in "abcd"), "fp16", "fp32", ops=["t_fdpa"],
                  passes=False)
    assert not res.stopped_early and res.checked == res.space
    assert res.consistent < 8, res.describe()
    def shape(sp):
        return sp.op, sp.in_format, sp.in_format_b or sp.in_format, sp.out_format, sp.L
    assert any(shape(c.spec) == shape(SPEC) for c in res.candidates)


def test_long_samples_are_refused_before_any_work(tmp_path, monkeypatch):
    arrays = _samples(2, 64, seed=3)
    monkeypatch.setenv("MMA_EMU_FIT_MAX_K", "32")
    with pytest.raises(ValueError, match=r"K = 64 .*MMA_EMU_FIT_MAX_K=64"):
        fit(tuple(arrays[k] for k in "abcd"), "fp16", "fp32")
    path = _save(tmp_path, "long.npz", arrays)
    assert main(["fit", str(path), "--format", "fp16", "--out", "fp32"]) == 2
    for bad in ("1e3", "-5", "0", "٣٢"):
        monkeypatch.setenv("MMA_EMU_FIT_MAX_K", bad)
        with pytest.raises(ValueError, match="positive decimal integer"):
            fit(tuple(arrays[k] for k in "abcd"), "fp16", "fp32")
    monkeypatch.setenv("MMA_EMU_FIT_MAX_K", "64")      # raised: runs
    with pytest.warns(FitUndecidedWarning):
        res = fit(tuple(arrays[k] for k in "abcd"), "fp16", "fp32", ops=["t_fdpa"],
                  passes=False, max_consistent=4)
    assert res.consistent >= 1


def test_default_bound_refuses_a_million_products(monkeypatch):
    monkeypatch.delenv("MMA_EMU_FIT_MAX_K", raising=False)
    z = np.zeros((2, 10 ** 6), np.uint32)
    with pytest.raises(ValueError, match="over the limit of 4096"):
        fit((z, z, np.zeros(2, np.uint32), np.zeros(2, np.uint32)), "fp16", "fp32")


@pytest.mark.parametrize("bad", [1, 0, -3, True, 2.5, "8"])
def test_max_consistent_is_checked(bad):
    arrays = _samples(1, 4)
    with pytest.raises(ValueError, match="max_consistent"):
        fit(tuple(arrays[k] for k in "abcd"), "fp16", "fp32", max_consistent=bad)
