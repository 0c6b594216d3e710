"""The CPU kernel runs split-K slices and promotion blocks itself (CHAIN ops of the schedule
program, csrc/cpu/sched_cpu.cpp): straight into its reduction, through the vectorised FDPA /
FMA / FTZ kernels where the arch has one, else through the core chain per element.  Elsewhere
(CUDA, tf32x3) the chains come from _gemm as PARTIALs.  Both routes must give the same
bits for every registry row (fp32 and fp64 workspaces), on every CPU path (AVX-512, AVX2, scalar), over the
three input families (NaN, Inf, subnormals and out-of-window exponents in 'bitstream'), for
shapes that fill no register block evenly.  test_schedule.py checks the result itself against
the exact reference and an independent composition."""
import contextlib
import dataclasses
import math
import zlib

import pytest
import torch

import torch_mma_emu as tme
import torch_mma_emu.schedule_run as sched_mod
from torch_mma_emu import cpp
from torch_mma_emu.inputs import FAMILIES, operands
from torch_mma_emu.registry import ROWS
from torch_mma_emu.schedule import Schedule
from helpers import bits, cpu_path, fast_path, row_id, row_specs


@contextlib.contextmanager
def route(chains: bool):
    """chains=True: the CHAIN route, and _gemm partials are an error; False: _gemm + PARTIAL."""
    old_flag, old_run = sched_mod._CPU_CHAINS, sched_mod.run_chains

    def no_partials(*a, **k):
        raise AssertionError("the CPU CHAIN route computed partials with _gemm")
    sched_mod._CPU_CHAINS = chains
    if chains:
        sched_mod.run_chains = no_partials
    try:
        yield
    finally:
        sched_mod._CPU_CHAINS, sched_mod.run_chains = old_flag, old_run


_probe = tme.spec("sm90", "fp16")
PATHS = [None] + [i for i in ("avx2",) if fast_path(_probe, i).startswith(i)] + ["scalar"]
SPECS = row_specs()      # every unscaled row; the block-scaled rows at each block size


def schedules(L):
    return [
        Schedule(split_k=3, reduce="pairwise"),
        Schedule(promote_every=2 * L, c_mode="chain"),
        Schedule(split_k=2, promote_every=L),
        Schedule(split_k=9),                            # more slices than chunks: empty ones
        Schedule(c_mode="epilogue", alpha=0.5, beta=-2.0, epilogue="mul_add"),
        Schedule(alpha=-0.75),                          # C in the chain, alpha after
        Schedule(split_k=2, c_mode="epilogue", alpha=1.5, beta=0.25),  # fma epilogue
        Schedule(split_k=3, reduce="pairwise", workspace="fp64", alpha=0.75, beta=-1.25),
        Schedule(promote_every=L, workspace="fp64", c_mode="epilogue", epilogue="mul_add",
                 alpha=0.1, beta=3.0),
    ]


def test_every_path_is_listed():
    assert len(SPECS) > 40 and {s.op for s in SPECS} >= {"t_fdpa", "fma", "ftz_addmul",
                                                          "tr_fdpa", "gtr_fdpa", "e_fdpa"}
    assert any(s.passes > 1 for s in SPECS) and any(s.out_format == "fp16" for s in SPECS)
    assert any(s.out_format == "fp64" for s in SPECS)
    assert {s.op for s in SPECS if s.scaled} == {"st_fdpa", "gst_fdpa"}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec", SPECS, ids=row_id)
def test_chain_route_equals_partials_route(spec, family):
    # slices and blocks start on the instruction's K and on scale blocks
    L = math.lcm(spec.L, spec.block_size) if spec.scaled else spec.L
    K = 5 * L + 3 if L > 1 else 37
    g = torch.Generator().manual_seed(zlib.crc32(f"{row_id(spec)}{family}".encode()))
    kw = operands(spec, 37, 45, K, family, g, batch=(2,))
    A, B, C = kw["A"], kw["B"], kw["C"]
    C = C[0]  # broadcast over the batch
    sc = {k: kw[k] for k in ("scale_a", "scale_b") if k in kw}
    for s in schedules(L):
        with route(False):
            want = tme.emulated_mm(A, B, C, arch=spec, out_dtype=kw["out_dtype"], schedule=s,
                                   **sc)
        for mode in PATHS:
            with route(True), cpu_path(mode):
                got = tme.emulated_mm(A, B, C, arch=spec, out_dtype=kw["out_dtype"],
                                      schedule=s, **sc)
            diff = (bits(got) != bits(want)).nonzero()
            assert diff.numel() == 0, (f"{diff.shape[0]} mismatches, {row_id(spec)} {family} "
                                       f"{mode or 'default'} {s.describe()}; first at "
                                       f"{diff[0].tolist()}")


def test_large_promotion_block_count():
    """K = 4096 promoted every 128 (32 CHAIN blocks per output) on a 16 x 40 product."""
    spec = tme.spec("sm90", "fp8_e4m3")
    g = torch.Generator().manual_seed(11)
    kw = operands(spec, 16, 40, 4096, "normal", g)
    s = "deepseek_v3_promote_128"
    with route(False):
        want = tme.emulated_mm(kw["A"], kw["B"], kw["C"], arch=spec, schedule=s)
    with route(True):
        got = tme.emulated_mm(kw["A"], kw["B"], kw["C"], arch=spec, schedule=s)
    assert torch.equal(bits(got), bits(want))


def test_routes_taken():
    """The CPU takes the CHAIN route where it can and the _gemm route where it must."""
    A, B = torch.randn(8, 64).half(), torch.randn(64, 8).half()
    calls = []
    old = sched_mod.run_chains
    sched_mod.run_chains = lambda *a, **k: calls.append(1) or old(*a, **k)
    try:
        tme.emulated_mm(A, B, arch="sm90", schedule="cublas_split_k_4")
        assert calls == []
        tme.emulated_mm(A.float(), B.float(), arch="sm80",
                        schedule="schedule:split_k=2,input_precision=tf32x3")
        assert len(calls) == 1
        tme.emulated_mm(A, B, arch="sm90", schedule="schedule:split_k=2,workspace=fp64")
        tme.emulated_mm(A.double(), B.double(), arch="sm80", schedule="cublas_split_k_4")
        assert len(calls) == 1
    finally:
        sched_mod.run_chains = old


def test_the_op_checks_chain_ops():
    spec = tme.spec("sm90", "fp16")   # L = 16
    a = torch.zeros(1, 2, 20, dtype=torch.int16)
    b = torch.zeros(1, 20, 3, dtype=torch.int16)
    c = torch.ones(1, 2, 3)
    parts = torch.zeros(0, 2, 3)
    run = lambda prog, params=list(cpp.params(spec)), consts=(0.0, 1.0, 1.0): \
        torch.ops.mma_emu._sched(a, b, c, parts, params, prog, list(consts))
    assert torch.equal(run([8, 0, 20, 1]), c)           # zero operands from C: C
    assert torch.equal(run([8, 20, 20, 0, 1, 3]), c)    # an empty range is +0
    # unscaled chains may start and end off the instruction grid (residue tiles, i32c):
    # groups counted from k0; flag 2 goes on from the top value
    assert torch.equal(run([8, 8, 20, 0]), torch.zeros(1, 2, 3))
    assert torch.equal(run([8, 0, 8, 1, 8, 8, 20, 2]), c)
    for prog, msg in [([8, 0, 21, 0], "must lie in"), ([8, 9, 8, 0], "must lie in"),
                      ([8, 0, 8, 0, 8, 8, 20, 0, 3, 3], "ADD needs two values"),
                      ([8, 0, 20, 3], "must lie in"), ([8, 0, 20, 2], "flag 2 needs a value"),
                      ([8, 0, 16], "truncated")]:
        with pytest.raises(ValueError, match=msg):
            run(prog)
    with pytest.raises(ValueError, match="chain-mode"):
        run([8, 0, 20, 0], params=list(cpp.params(spec, "epilogue")))
    assert torch.equal(run([8, 0, 20, 1], consts=(1.0, 1.0, 1.0)), c)   # fp64 workspace
    with pytest.raises(ValueError, match="no tree NODEs"):
        run([8, 0, 16, 0, 4, 1, 1, 16, 16, 0])    # a CHAIN feeding a tree node


def test_the_op_checks_block_scaled_chain_ops():
    row = next(r for r in ROWS if r.arch == "sm100" and r.op == "st_fdpa")
    spec = dataclasses.replace(row.make_spec("fp8_e4m3", "fp8_e4m3", 32), L=16)
    a = torch.zeros(1, 2, 64, dtype=torch.uint8)
    b = torch.zeros(1, 64, 3, dtype=torch.uint8)
    c = torch.ones(1, 2, 3)
    parts = torch.zeros(0, 2, 3)
    sa = torch.full((1, 2, 2), 127, dtype=torch.uint8)   # 2^0 in ue8m0
    sb = torch.full((1, 2, 3), 127, dtype=torch.uint8)
    pv = list(cpp.params(spec))
    run = lambda prog, *scales: torch.ops.mma_emu._sched(a, b, c, parts, pv, prog,
                                                          [0.0, 1.0, 1.0], *scales)
    assert torch.equal(run([8, 0, 32, 1, 8, 32, 64, 0, 3], sa, sb), c)
    with pytest.raises(ValueError, match="must start on the instruction's K .* scale block"):
        run([8, 0, 16, 0, 8, 16, 64, 0, 3], sa, sb)
    with pytest.raises(ValueError, match="needs scales"):
        run([8, 0, 64, 0])
    with pytest.raises(ValueError, match="scale_a must have shape"):
        run([8, 0, 64, 0], sa[:, :, :1], sb)
    with pytest.raises(ValueError, match="CHAIN programs only"):
        torch.ops.mma_emu._sched(a[:, :, :0], b[:, :0], c, torch.zeros(1, 2, 3),
                                 list(cpp.params(spec)), [0, 0], [0.0, 1.0, 1.0], sa, sb)
