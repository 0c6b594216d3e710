"""Atomics and the interpreter gaps met on third-party kernels (gaps.py), each reproduced
with a minimal kernel: fla's tensor loop variables, FlagGems' LibTuner (an Autotuner whose
``run`` benchmarks on the GPU driver) and LibEntry (a cache that relaunches the first
launch's return value)."""
import warnings

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402
from triton.runtime.autotuner import Autotuner  # noqa: E402

import torch_mma_emu.triton as tmt  # noqa: E402

BLOCKS = [("emulate", lambda: tmt.emulate("H100")), ("interpret", tmt.interpret)]


@triton.jit
def atomic_sum(X, OUT, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(OUT, tl.sum(tl.load(X + o), axis=0))


@triton.jit
def chunked(X, Y, NT: tl.constexpr, BT: tl.constexpr):
    o = tl.arange(0, BT)
    for i_t in range(NT):                    # fla: i_t.to(tl.int64) * stride
        off = i_t.to(tl.int64) * BT
        tl.store(Y + off + o, tl.load(X + off + o) * 2 + i_t)
    for j in tl.range(0, NT, 2):
        tl.store(Y + NT * BT + j.to(tl.int64), j * 10)
    for s in tl.static_range(2):             # stays a Python int
        tl.store(Y + NT * BT + NT + s, s + 0.5)


@triton.jit
def scale(X, Y, N, alpha, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < N
    tl.store(Y + o, tl.load(X + o, mask=m) * alpha, mask=m)


@pytest.mark.parametrize("name,block", BLOCKS)
def test_atomics_are_recorded_and_warned_once(name, block):
    x = torch.randn(4 * 64)
    out = torch.zeros(1)
    with pytest.warns(UserWarning, match="atomic_fadd on fp32.*order") as rec:
        with block() as em:
            atomic_sum[(4,)](x, out, BLOCK=64)
            atomic_sum[(4,)](x, out, BLOCK=64)
    assert sum("atomic" in str(w.message) for w in rec) == 1
    assert "8 x atomic_fadd fp32" in em.summary() and "grid order" in em.summary()
    parts = [x[i * 64:(i + 1) * 64].sum() for i in range(4)] * 2
    ref = torch.zeros(1)
    for p in parts:                          # program order, one addition at a time
        ref = ref + p.reshape(1)
    assert torch.allclose(out, ref)


@pytest.mark.parametrize("name,block", BLOCKS)
def test_loop_variables_are_tensors(name, block):
    x = torch.randn(4 * 16)
    y = torch.zeros(4 * 16 + 6)
    with block():
        chunked[(1,)](x, y, NT=4, BT=16)
    want = torch.cat([x[i * 16:(i + 1) * 16] * 2 + i for i in range(4)])
    assert torch.equal(y[:64], want)
    assert y[64:].tolist() == [0.0, 0.0, 20.0, 0.0, 0.5, 1.5]


class BenchmarkingTuner(Autotuner):
    """FlagGems' LibTuner in miniature: its own run, which times configs on the driver."""
    def run(self, *args, **kwargs):
        triton.runtime.driver.active.get_current_device()
        raise RuntimeError("benchmarked on the GPU")


def test_autotuner_subclass_overriding_run():
    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})],
                            key=["N"])(scale)
    tuned.__class__ = BenchmarkingTuner
    x, y = torch.randn(100), torch.empty(100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tmt.emulate("H100"):
            tuned[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x, y, 100, 3.0)
    assert torch.equal(y, x * 3.0) and tuned.best_config.kwargs == {"BLOCK": 32}


class FirstLaunchCache:
    """FlagGems' LibEntry in miniature: keeps what the first launch returns and relaunches
    it with the non-constexpr arguments afterwards."""
    def __init__(self, fn):
        self.fn, self.cache = fn, {}

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            key = (args[2], tuple(sorted(kwargs.items())))
            if key not in self.cache:
                self.cache[key] = self.fn.run(*args, grid=grid, warmup=False, **kwargs)
            else:
                self.cache[key][grid](*args)
        return launch


@pytest.mark.parametrize("name,block", BLOCKS)
def test_cached_launch_result_relaunches(name, block):
    k = FirstLaunchCache(scale)
    x1, x2, y = torch.randn(64), torch.randn(64), torch.empty(64)
    with block():
        k[(2,)](x1, y, 64, 2.0, BLOCK=32)
        k[(2,)](x2, y, 64, 0.5, BLOCK=32)
    assert torch.equal(y, x2 * 0.5)


def test_driver_queries_answer_as_the_block_arch(tmp_path, monkeypatch):
    """A library that asks Triton's driver for the target at import (FlagGems does) fails
    on a CPU with '0 active drivers'; imported inside a block it sees the emulated GPU."""
    if torch.cuda.is_available():
        pytest.skip("a real driver answers here")
    mod = tmp_path / "asks_at_import.py"
    mod.write_text("import triton\n"
                   "TARGET = triton.runtime.driver.active.get_current_target()\n"
                   "PROPS = triton.runtime.driver.active.utils.get_device_properties(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RuntimeError, match="active drivers"):
        triton.runtime.driver.active.get_current_target()
    with tmt.emulate("H100"):
        import asks_at_import
    assert (asks_at_import.TARGET.backend, asks_at_import.TARGET.arch) == ("cuda", 90)
    assert asks_at_import.PROPS["multiprocessor_count"] == 132
    with tmt.emulate("MI300X"):
        t = triton.runtime.driver.active.get_current_target()
        with pytest.raises(RuntimeError, match="cannot be timed"):
            triton.runtime.driver.active.get_benchmarker()(lambda: None)
    assert (t.backend, t.arch, t.warp_size) == ("hip", "gfx942", 64)
