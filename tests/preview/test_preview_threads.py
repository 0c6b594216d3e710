"""Concurrent ``emulate`` blocks in several threads: each block records only the modules run
by its own threads, module hooks never fail, and process-wide switches (oneDNN for RNNs,
the MHA fast path) are restored once the last overlapping block or call ends."""
from __future__ import annotations

import threading
import warnings

import pytest
import torch
import torch.nn as nn
from torch.utils._python_dispatch import TorchDispatchMode

from torch_mma_emu.preview import emulate, module_hooks
from helpers import rnd


class _Pause(TorchDispatchMode):
    """Runs ``at_first()`` when the first emulated product reaches it (it sits below
    ``emulate``), then lets everything through."""

    def __init__(self, at_first):
        super().__init__()
        self.at_first, self.done = at_first, False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.done and func is torch.ops.mma_emu.emulated_mm.default:
            self.done = True
            self.at_first()
        return func(*args, **(kwargs or {}))


def _named(cls_name: str, dim: int) -> nn.Module:
    """A small model whose module class names say which thread ran it."""
    block = type(cls_name, (nn.Module,), {
        "__init__": lambda self: (nn.Module.__init__(self), setattr(self, "fc", nn.Linear(dim, dim)),
                                  setattr(self, "out", nn.Linear(dim, 4)))[0],
        "forward": lambda self, x: self.out(torch.relu(self.fc(x)))})
    return block().to(torch.bfloat16)


def test_a_recording_block_ignores_modules_run_by_other_threads():
    torch.manual_seed(0)
    mine, theirs = _named("Mine", 8), _named("Theirs", 8)
    x = rnd(3, 8)
    inside, other_done = threading.Event(), threading.Event()
    errors = []

    def other():
        inside.wait(10)
        try:
            for _ in range(3):
                theirs(x)                  # outside any block, while the block is open
        except Exception as e:             # noqa: BLE001
            errors.append(e)
        other_done.set()

    t = threading.Thread(target=other)
    t.start()
    with emulate("sm90", record=True) as em:
        inside.set()
        other_done.wait(10)
        mine(x)
    t.join(10)
    assert not errors
    assert {r.module for r in em.records} == {"fc", "out"}
    cap = em.layer_tracker.capture
    assert cap.done and type(cap.model).__name__ == "Mine"
    assert set(cap.types.values()) <= {"Mine", "Linear"}
    rep = em.report("fp64")
    assert [r.path for r in rep.rows] == ["fc", "out", "Mine"]
    assert module_hooks.listener_count() == 0          # hooks removed with the last block


def test_concurrent_recording_blocks_keep_their_own_modules():
    n, rounds = 6, 4
    models = [_named(f"Worker{i}", 8 + i) for i in range(n)]
    barrier = threading.Barrier(n)
    results, errors = {}, []

    def work(i):
        try:
            x = rnd(2, 8 + i, seed=i)
            for r in range(rounds):
                barrier.wait(10)
                with emulate("sm80", record=True) as em:
                    models[i](x)
                em.report("fp64")
                results[(i, r)] = em
        except Exception as e:             # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # a hook called the wrong way warns or raises
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert len(results) == n * rounds
    for (i, _), em in results.items():
        assert len(em.records) == 2 and all(r.emulated for r in em.records)
        assert {r.module for r in em.records} == {"fc", "out"}
        assert type(em.layer_tracker.capture.model).__name__ == f"Worker{i}"
    assert module_hooks.listener_count() == 0


def test_threads_adopted_by_a_block_record_their_modules_in_it():
    model = _named("Adopted", 8)
    x = rnd(2, 8)
    with emulate("sm90", record=True) as em:
        t = threading.Thread(target=lambda: model(x))
        t.start()
        t.join(10)
    assert {r.module for r in em.records} == {"fc", "out"}


def test_onednn_restored_after_overlapping_lstm_calls_in_two_blocks():
    """Block B enters its LSTM call first; block A enters while B is inside; B leaves
    first, A last: saving and restoring per call would leave oneDNN off for good."""
    before = torch._C._get_mkldnn_enabled()
    assert before, "oneDNN is expected on in this build"
    lstm_a, lstm_b = nn.LSTM(4, 6), nn.LSTM(4, 6)
    x = torch.randn(3, 1, 4)
    b_inside, a_inside, b_done = threading.Event(), threading.Event(), threading.Event()
    errors = []

    def run_b():
        try:
            with _Pause(lambda: (b_inside.set(), a_inside.wait(10))), emulate("sm80"):
                lstm_b(x)
        except Exception as e:             # noqa: BLE001
            errors.append(e)
        b_done.set()

    t = threading.Thread(target=run_b)
    t.start()
    assert b_inside.wait(10)
    with _Pause(lambda: (a_inside.set(), b_done.wait(10))), emulate("sm90") as em:
        lstm_a(x)
    t.join(10)
    assert not errors
    assert em.recorder.emulated_count > 0
    assert torch._C._get_mkldnn_enabled() == before


@pytest.mark.parametrize("rounds", [3])
def test_onednn_and_fast_path_restored_after_many_concurrent_blocks(rounds):
    before = (torch._C._get_mkldnn_enabled(), torch.backends.mha.get_fastpath_enabled())
    n = 4
    barrier = threading.Barrier(n)
    errors = []

    def work(i):
        lstm = nn.GRU(4, 5)
        try:
            for _ in range(rounds):
                barrier.wait(10)
                with emulate("sm90"):
                    lstm(torch.randn(2, 1, 4))
        except Exception as e:             # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert (torch._C._get_mkldnn_enabled(), torch.backends.mha.get_fastpath_enabled()) == before
