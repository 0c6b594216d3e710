"""The CPU kernel on torch's intra-op pool (csrc/torch_stable.h parallel_for): the bits never
depend on the thread count.  Every registry row, the vector kernels and the scalar path, plain,
batched (one product per thread), strided, short-wide (column panels split) and in tiny K
blocks, and the schedule path, at 1, 2, 3 and 8 threads.  MMA_EMU_CPU_TASK_WORK=1 makes every
loop split even these small shapes (the default grain keeps products this small on one
thread).  The rest of the suite runs with one torch thread (conftest.py)."""
import contextlib

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu.inputs import operands
from torch_mma_emu.registry import ROWS
from torch_mma_emu.schedule import Schedule
from helpers import assert_same_bits, cpu_path, env, fast_path, row_id, seeded

ROW_SPECS = [r.first_spec() for r in ROWS]
THREADS = (2, 3, 8)


@contextlib.contextmanager
def threads(n):
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _cases(spec, g):
    """(name, emulated_mm kwargs) for the shapes each loop splits differently."""
    instr = spec.L * spec.passes
    K = 3 * instr + 1
    kw = operands(spec, 21, 40, K, "bitstream", g)            # row blocks x panels
    wide = operands(spec, 3, 64, K, "bitstream", g)            # one row block: panels split
    batch = operands(spec, 5, 9, K, "normal", g, batch=(4,))   # one product per thread
    strided = dict(kw, A=kw["A"].t().contiguous().t(), B=kw["B"].t().contiguous().t())
    return [("plain", kw), ("wide", wide), ("batch", batch), ("strided", strided)]


@pytest.mark.parametrize("spec", ROW_SPECS, ids=row_id)
def test_bits_do_not_depend_on_the_thread_count(spec):
    fast = fast_path(spec) != "scalar"
    for name, kw in _cases(spec, seeded(spec.to_string(), "threads")):
        # the scalar path's loops are the same for every row: the plain shape is enough
        paths = ([None] if fast else []) + (["scalar"] if name == "plain" or not fast else [])
        for path in paths:
            with cpu_path(path), threads(1):
                want = tme.emulated_mm(**kw)
            blocks = (None, 1) if name == "plain" else (None,)
            with cpu_path(path), env(MMA_EMU_CPU_TASK_WORK="1"):
                for budget in blocks:
                    with env(MMA_EMU_CPU_BLOCK_BYTES=budget):
                        for n in THREADS:
                            with threads(n):
                                got = tme.emulated_mm(**kw)
                            assert_same_bits(got, want, f"{row_id(spec)} {name} {path or 'fast'}"
                                             f" {n} threads, block budget {budget}")


@pytest.mark.parametrize("arch,fmt", [("sm90", "fp16"), ("sm80", "bf16"), ("gfx942", "fp16")])
@pytest.mark.parametrize("sched", [Schedule(split_k=2), Schedule(split_k=3)],
                         ids=lambda s: s.describe())
def test_schedule_bits_do_not_depend_on_the_thread_count(arch, fmt, sched):
    spec = tme.spec(arch, fmt)
    kw = operands(spec, 37, 40, 8 * spec.L + 3, "normal", seeded(arch, fmt, "sched-threads"))
    run = lambda: tme.emulated_mm(kw["A"], kw["B"], kw["C"], arch=spec,  # noqa: E731
                                  out_dtype=kw["out_dtype"], schedule=sched)
    with threads(1):
        want = run()
    with env(MMA_EMU_CPU_TASK_WORK="1"):
        for budget in (None, 4000):
            with env(MMA_EMU_CPU_BLOCK_BYTES=budget):
                for n in THREADS:
                    with threads(n):
                        assert_same_bits(run(), want, f"{arch} {fmt} {sched.describe()} "
                                         f"{n} threads, budget {budget}")


def test_suite_runs_on_one_thread():
    """conftest.py: tests that do not test threading run with one torch thread (pool threads
    waiting on two busy shared cores made the CPU kernel's tests three times slower)."""
    assert torch.get_num_threads() == 1
