"""CUTLASS residue-tile schedules (the four cublas_cutlass_* presets) on the CPU run as two
CHAIN ops per slice (schedule_split.residue_program): the residue tile [k0, k0 + r) from C
or +0, its short group last and zero-padded, then the chain over [k0 + r, k1) going on from
that accumulator (CHAIN flag 2), both off the instruction grid where r or the slice start
is (csrc/cpu/sched_cpu.cpp run_streamed gives such a chain a K window of its own).  The
per-element NODE program (the earlier route, kept for CUDA and behind
``schedule_run._RESIDUE_CHAINS``) is the reference: same bits for every K around the tile and
the grain, NaN / Inf / signed zeros / subnormals / cancellation, C in the chain or the
epilogue, tiny and default K windows; and K past MMA_EMU_SCHED_MAX_NODE_PRODUCTS runs.
tests/test_schedule_blocks.py compares the presets over every registry row as well."""
import contextlib
import zlib

import pytest
import torch

import torch_mma_emu as tme
import torch_mma_emu.schedule_run as sched_mod
from torch_mma_emu.inputs import operands
from torch_mma_emu.schedule import Schedule
from torch_mma_emu.schedule_split import ScheduleRowError, residue_program
from helpers import bits
from test_schedule_blocks import _plant, env

CUTLASS = ["cublas_cutlass_residue_32", "cublas_cutlass_split_k_4_fp32",
           "cublas_cutlass_split_k_4_fp16_partials", "cublas_cutlass_split_k_4_fp16_serial"]


@contextlib.contextmanager
def node_route():
    old = sched_mod._RESIDUE_CHAINS
    sched_mod._RESIDUE_CHAINS = False
    try:
        yield
    finally:
        sched_mod._RESIDUE_CHAINS = old


def _run(kw, arch, s):
    return tme.emulated_mm(kw["A"], kw["B"], kw["C"], arch=arch, out_dtype=kw["out_dtype"],
                           schedule=s)


def _same(kw, arch, schedules, tag):
    for s in schedules:
        try:
            with node_route():
                want = _run(kw, arch, s)
        except ScheduleRowError as e:
            with pytest.raises(type(e)):
                _run(kw, arch, s)
            continue
        for budget in (None, 1):
            with env(MMA_EMU_CPU_BLOCK_BYTES=budget):
                got = _run(kw, arch, s)
            d = (bits(got) != bits(want)).nonzero()
            assert d.numel() == 0, f"{arch} {tag} {s} budget {budget}: {d.shape[0]} differ"


def _custom(L):
    return CUTLASS + [
        Schedule(residue_tile=2 * L),
        Schedule(residue_tile=4 * L, c_mode="epilogue", alpha=0.5, beta=-2.0),
        Schedule(residue_tile=2 * L, split_k=3, split_grain="8", reduce="pairwise"),
        Schedule(residue_tile=L, split_k=5, split_grain="3", workspace="fp64",
                 epilogue="mul_add", alpha=1.5, beta=0.25),
        Schedule(residue_tile=2 * L, split_k=7),           # instruction grain, empty slices
    ]


@pytest.mark.parametrize("arch,fmt", [("sm80", "fp16"), ("sm90", "fp16"), ("sm90", "fp8_e4m3"),
                                      ("sm70", "fp16"), ("sm100", "bf16"), ("cdna3", "fp16")])
def test_chains_give_the_bits_of_node_programs(arch, fmt):
    spec = tme.spec(arch, fmt)
    L = spec.L
    for K in sorted({1, 3, L - 1, L, L + 1, 2 * L + 5, 31, 33, 8 * L + 7, 97}):
        if K < 1:
            continue
        for family in ("normal", "cancel", "bitstream", "planted"):
            g = torch.Generator().manual_seed(zlib.crc32(f"{arch}{fmt}{K}{family}".encode()))
            kw = operands(spec, 5, 6, max(K, 4) if family == "planted" else K,
                          "normal" if family == "planted" else family, g)
            if family == "planted":
                kw = _plant(kw, spec, g)
            _same(kw, spec, _custom(L), f"K={kw['A'].shape[-1]} {family}")


def test_program_is_two_chains_per_slice():
    """A few words per slice, whatever K (the NODE program grows ~2.3 words per product)."""
    assert residue_program(8, 8 + 1000, 16, 16, 32, True, chains=True) == \
        [sched_mod._CHAIN, 8, 16, 1, sched_mod._CHAIN, 16, 1008, 2]
    assert residue_program(0, 64, 16, 16, 32, False, chains=True) == \
        [sched_mod._CHAIN, 0, 32, 0, sched_mod._CHAIN, 32, 64, 2]   # r = a whole tile
    assert residue_program(5, 5, 16, 16, 32, True, chains=True) == [sched_mod._C]
    assert residue_program(0, 20, 16, 16, 32, False, chains=True) == [sched_mod._CHAIN, 0, 20, 0]


def test_past_the_node_bound_the_chains_run():
    """K above MMA_EMU_SCHED_MAX_NODE_PRODUCTS: the NODE route refuses, the CPU chain route
    runs and equals the NODE route's bits computed with the bound raised."""
    g = torch.Generator().manual_seed(3)
    A = (torch.randn(2, 301, generator=g) * 8).half()
    B = torch.randn(301, 3, generator=g).half()
    for s in CUTLASS:
        with env(MMA_EMU_SCHED_MAX_NODE_PRODUCTS=300):
            with node_route(), pytest.raises(ValueError, match="MMA_EMU_SCHED_MAX_NODE"):
                tme.emulated_mm(A, B, arch="sm80", schedule=s)
            got = tme.emulated_mm(A, B, arch="sm80", schedule=s)
        with node_route():
            want = tme.emulated_mm(A, B, arch="sm80", schedule=s)
        assert torch.equal(bits(got), bits(want)), s


def test_malformed_chain_flags_are_refused():
    """The C++ op checks CHAIN's flag (0: +0, 1: C, 2: go on from the top value) and that
    flag 2 has a value to go on from; a range off the grid is fine for unscaled ops."""
    from torch_mma_emu import cpp
    spec = tme.spec("sm90", "fp16")
    a = torch.zeros(1, 2, 40, dtype=torch.int16)
    b = torch.zeros(1, 40, 3, dtype=torch.int16)
    c = torch.zeros(1, 2, 3)
    params = list(cpp.params(spec, "chain"))
    run = lambda prog: torch.ops.mma_emu._sched(a, b, c, c.new_empty((0, 2, 3)), params, prog,
                                                [0.0, 1.0, 1.0])
    ch = sched_mod._CHAIN
    with pytest.raises(ValueError, match="flag 0, 1 or 2"):
        run([ch, 0, 8, 3])
    with pytest.raises(ValueError, match="flag 2 needs a value"):
        run([ch, 0, 8, 2])
    with pytest.raises(ValueError, match="must lie in"):
        run([ch, 7, 41, 0])
    assert torch.equal(run([ch, 3, 7, 1, ch, 7, 39, 2]), torch.zeros(1, 2, 3))
