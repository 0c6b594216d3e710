"""The CPU schedule kernel runs K in windows (csrc/cpu/sched_cpu.cpp run_streamed): when the
chains' operands do not fit the MMA_EMU_CPU_BLOCK_BYTES budget, each CHAIN runs piece by
piece over the K windows it crosses, its accumulators going on from piece to piece, and
the program runs op by op over all rows.  Differential tests, for every registry row (fp32
and fp64 workspaces), every schedule preset and custom schedules:

- one window (the row-block kernel, unchanged) == tiny windows (MMA_EMU_CPU_BLOCK_BYTES=1:
  one instruction or scale block per window, so every chain crosses many) == a middle
  budget == the _gemm + PARTIAL route (chains computed by the plain kernel);
- inputs: the three families (NaN / Inf / subnormal bit patterns in 'bitstream',
  cancellation) plus NaN, infinities, signed zeros and subnormals planted late in K and in
  C; K a multiple of nothing;
- split_k far beyond the number of instructions in K (empty slices, a program of hundreds
  of thousands of chains) and the bound on the PARTIAL route's per-chain results;
- the memory of a K = 10^7 GEMV for every preset (scripts/gemv_memory.py, slow).
"""
import contextlib
import json
import math
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch

import torch_mma_emu as tme
import torch_mma_emu.schedule_run as sched_mod
from torch_mma_emu.inputs import FAMILIES, operands
from torch_mma_emu.schedule import PRESETS, Schedule
from helpers import bits, env, row_id, row_specs

ROOT = Path(__file__).resolve().parents[1]
SPECS = row_specs()


@contextlib.contextmanager
def partials_route():
    old = sched_mod._CPU_CHAINS
    sched_mod._CPU_CHAINS = False
    try:
        yield
    finally:
        sched_mod._CPU_CHAINS = old


def custom(L):
    return [
        Schedule(split_k=3, reduce="pairwise"),
        Schedule(promote_every=2 * L, c_mode="chain"),
        Schedule(split_k=2, promote_every=L),
        Schedule(split_k=9),                            # more slices than chunks: empty ones
        Schedule(c_mode="epilogue", alpha=0.5, beta=-2.0, epilogue="mul_add"),
        Schedule(split_k=2, c_mode="epilogue", alpha=1.5, beta=0.25),  # fma epilogue
        Schedule(split_k=3, reduce="pairwise", workspace="fp64", alpha=0.75, beta=-1.25),
        Schedule(promote_every=L, workspace="fp64", c_mode="epilogue", epilogue="mul_add",
                 alpha=0.1, beta=3.0),
        Schedule(split_k=1000000),                      # far more slices than products
    ]


def _plant(kw, spec, g):
    """NaN / Inf / signed zeros / subnormals late in K and in C (float dtypes only)."""
    A, B, C = kw["A"].clone(), kw["B"].clone(), kw["C"].clone()
    K = A.shape[-1]
    if A.dtype.is_floating_point and A.element_size() > 1 or A.dtype in (
            torch.float8_e4m3fn, torch.float8_e5m2):
        Af = A.float()
        Af[..., 0, K - 1] = float("nan")
        Af[..., 1, K // 2] = float("inf")
        Af[..., 2, :] = -0.0
        tiny = torch.finfo(A.dtype).smallest_normal / 4 if A.dtype.is_floating_point else 0.0
        Af[..., 3, ::3] = tiny
        A = Af.to(A.dtype)
    if B.dtype.is_floating_point:
        Bf = B.float()
        Bf[..., K - 2, 1] = -float("inf")
        Bf[..., :, 2] = -Bf[..., :, 3]            # columns 2 and 3 cancel against row 2..
        B = Bf.to(B.dtype)
    if C.dtype.is_floating_point:
        Cf = C.clone()
        Cf[..., 0, 0] = -0.0
        Cf[..., 1, 1] = float("nan")
        Cf[..., 2, 2] = float("-inf")
        Cf[..., 3, 3] = torch.finfo(C.dtype).smallest_normal / 2
        C = Cf
    return dict(kw, A=A, B=B, C=C)


def _run(kw, spec, s, sc):
    return tme.emulated_mm(kw["A"], kw["B"], kw["C"], arch=spec, out_dtype=kw["out_dtype"],
                           schedule=s, **sc)


def _check(spec, kw, schedules, tag):
    sc = {k: kw[k] for k in ("scale_a", "scale_b") if k in kw}
    for s in schedules:
        try:
            with partials_route():
                want = _run(kw, spec, s, sc)
        except (TypeError, ValueError) as e:   # a preset that does not apply to this row
            with pytest.raises(type(e)):
                _run(kw, spec, s, sc)
            continue
        for budget in (None, 1, 4000):
            with env(MMA_EMU_CPU_BLOCK_BYTES=budget):
                got = _run(kw, spec, s, sc)
            diff = (bits(got) != bits(want)).nonzero()
            name = s if isinstance(s, str) else s.describe()
            assert diff.numel() == 0, (f"{diff.shape[0]} mismatches, {row_id(spec)} {tag} "
                                       f"budget {budget} {name}; first at {diff[0].tolist()}")


@pytest.mark.parametrize("family", list(FAMILIES) + ["planted"])
@pytest.mark.parametrize("spec", SPECS, ids=row_id)
def test_windows_give_the_bits_of_one_window(spec, family):
    L = math.lcm(spec.L, spec.block_size) if spec.scaled else spec.L
    K = max(5 * L + 3, 2 * 128 + 37) if L > 1 else 293      # a multiple of nothing
    if spec.scaled:
        K = 5 * L                                           # whole scale blocks
    g = torch.Generator().manual_seed(zlib.crc32(f"{row_id(spec)}{family}".encode()))
    kw = operands(spec, 7, 37, K, "normal" if family == "planted" else family, g, batch=(2,))
    if family == "planted":
        kw = _plant(kw, spec, g)
    kw = dict(kw, C=kw["C"][0])     # broadcast over the batch
    presets = [n for n in PRESETS if n != "plain"]
    _check(spec, kw, custom(L) + presets, family)


def test_split_k_beyond_k_makes_no_per_slice_state():
    """split_k = 10^6 on K = 40 and on K = 300000: the CPU route keeps a few stack entries,
    however many slices; the bits equal the partials route's and the one-window run's."""
    spec = tme.spec("sm90", "fp16")
    g = torch.Generator().manual_seed(5)
    for K in (40, 300000):
        kw = operands(spec, 1, 1, K, "normal", g)
        s = Schedule(split_k=1000000)
        with partials_route():
            want = _run(kw, spec, s, {})
        for budget in (None, 1 << 16):
            with env(MMA_EMU_CPU_BLOCK_BYTES=budget):
                assert torch.equal(bits(_run(kw, spec, s, {})), bits(want))


def test_partials_route_is_bounded():
    """The _gemm + PARTIAL route (CUDA, tf32x3) keeps one result per chain: past
    MMA_EMU_SCHED_PARTIAL_BYTES it refuses before the work, naming the bound."""
    A, B = torch.randn(16, 512).half(), torch.randn(512, 16).half()
    with partials_route(), env(MMA_EMU_SCHED_PARTIAL_BYTES=16 * 16 * 4 * 8):
        tme.emulated_mm(A, B, arch="sm90", schedule=Schedule(split_k=8))    # 8 fit
        with pytest.raises(ValueError, match="MMA_EMU_SCHED_PARTIAL_BYTES"):
            tme.emulated_mm(A, B, arch="sm90", schedule=Schedule(split_k=16))   # 16 slices
    with partials_route(), env(MMA_EMU_SCHED_PARTIAL_BYTES="1e9"):
        with pytest.raises(ValueError, match="positive decimal integer"):
            tme.emulated_mm(A, B, arch="sm90", schedule=Schedule(split_k=2))
    # the CPU CHAIN route holds no partials: the bound does not apply
    with env(MMA_EMU_SCHED_PARTIAL_BYTES=1):
        tme.emulated_mm(A, B, arch="sm90", schedule=Schedule(split_k=16))


def _gemv(args):
    e = dict(os.environ)
    e.pop("MMA_EMU_CPU_BLOCK_BYTES", None)
    r = subprocess.run([sys.executable, str(ROOT / "scripts/gemv_memory.py"), "--json", *args],
                       capture_output=True, text=True, env=e, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_every_preset_gemv_stays_within_the_plain_path_memory():
    """K = 3 * 10^6 GEMV: every preset and split_k = 10^6 grow the peak by no more than the
    plain path's growth plus a few MB (before: ~170 bytes per k, 0.5 GB here)."""
    res = _gemv(["--schedules", "--k", "3000000"])
    plain = res["plain"]
    for r in res["schedules"]:
        assert "error" not in r, r     # residue_tile presets too: CHAIN ops since i32c
        base = plain[r["format"]]["peak_growth_mb"]
        assert r["peak_growth_mb"] <= base + 16, (r, base)


@pytest.mark.parametrize("arch", ["sm80", "sm90"])
def test_tf32x3_parts_per_block_give_the_bits_of_one_block(arch):
    """tf32x3 (the _gemm route) splits hi / lo per K block: tiny blocks, a middle budget and
    the default agree, with NaN, Inf, signed zeros, subnormals and a wide exponent spread."""
    g = torch.Generator().manual_seed(7)
    M, N, K = 3, 5, 301
    A = torch.randn(M, K, generator=g) * torch.exp2(torch.randint(-30, 30, (M, K), generator=g).float())
    B = torch.randn(K, N, generator=g)
    A[0, K - 1], A[1, 7], A[2, :] = float("nan"), float("inf"), -0.0
    B[5, 1], B[:, 3] = 1e-41, -B[:, 2]
    C = torch.randn(M, N, generator=g)
    for s in ["triton_tf32x3", "schedule:input_precision=tf32x3,dot_k=32",
              "schedule:input_precision=tf32x3,split_k=3,c_mode=epilogue"]:
        want = tme.emulated_mm(A, B, C, arch=arch, schedule=s)
        for budget in (1, 4000):
            with env(MMA_EMU_CPU_BLOCK_BYTES=budget):
                got = tme.emulated_mm(A, B, C, arch=arch, schedule=s)
            assert torch.equal(bits(got), bits(want)), (arch, s, budget)


def test_residue_tile_programs_are_bounded():
    """residue_tile schedules as per-element NODE ops (CUDA, multi-pass instructions; a
    program word count proportional to K): past MMA_EMU_SCHED_MAX_NODE_PRODUCTS they are
    refused before the work (the CPU's CHAIN route: tests/test_schedule_residue.py)."""
    A, B = torch.randn(1, 300).half(), torch.randn(300, 1).half()
    old, sched_mod._RESIDUE_CHAINS = sched_mod._RESIDUE_CHAINS, False
    try:
        _node_route_bound(A, B)
    finally:
        sched_mod._RESIDUE_CHAINS = old


def _node_route_bound(A, B):
    with env(MMA_EMU_SCHED_MAX_NODE_PRODUCTS=299):
        with pytest.raises(ValueError, match="K = 300 is over the limit of 299.*MMA_EMU_SCHED_MAX"):
            tme.emulated_mm(A, B, arch="sm90", schedule="cublas_cutlass_residue_32")
    with env(MMA_EMU_SCHED_MAX_NODE_PRODUCTS=300):
        tme.emulated_mm(A, B, arch="sm90", schedule="cublas_cutlass_residue_32")
