"""The CPU kernel runs K in blocks (bounded working memory) and multi-pass instructions in its
vector kernels: differential tests of both, and the memory of a K = 10^7 GEMV.

- MMA_EMU_CPU_BLOCK_BYTES=1 forces the smallest K blocks (one instruction, or one scale block,
  per block): the chain carried from block to block must give the bits of the one-block run,
  on the scalar path and on every vector ISA, for every registry row and input family.
- Multi-pass instructions (two passes, c added last): fast == scalar == the exact reference
  with NaN / Inf / huge accumulators, fp16 overflow inside the final addition, partial
  instructions at the end of K.
- A K = 10^7 GEMV grows the process's peak memory by the block budget, not by ~170 bytes
  per k (scripts/gemv_memory.py; the peak is measured in a fresh process).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import reference as ref
from torch_mma_emu.inputs import FAMILIES, operands
from torch_mma_emu.registry import ROWS
from helpers import assert_same_bits, fast_path, mm_on_path, seeded

ROOT = Path(__file__).resolve().parents[1]
_probe = tme.spec("sm90", "fp16")
ISAS = [i for i in ("avx512", "avx2", "neon") if fast_path(_probe, i).startswith(i + ":")]
if not ISAS and fast_path(_probe).startswith("neon:"):
    ISAS = [None]  # aarch64: the default path is NEON
ROW_SPECS = [r.first_spec() for r in ROWS]
MULTI = [s for s in ROW_SPECS if s.multipass]


def _id(s):
    sc = f"-{s.scale_format}{s.block_size}" if s.scaled else ""
    mp = f"-{s.passes}pass" if s.multipass else ""
    return f"{s.arch}-{s.op}-{s.in_format}-{s.out_format}{sc}-L{s.L}{mp}"


class block_bytes:
    """MMA_EMU_CPU_BLOCK_BYTES for the calls inside."""

    def __init__(self, n):
        self.n = n

    def __enter__(self):
        self.old = os.environ.get("MMA_EMU_CPU_BLOCK_BYTES")
        os.environ["MMA_EMU_CPU_BLOCK_BYTES"] = str(self.n)

    def __exit__(self, *exc):
        if self.old is None:
            os.environ.pop("MMA_EMU_CPU_BLOCK_BYTES", None)
        else:
            os.environ["MMA_EMU_CPU_BLOCK_BYTES"] = self.old


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("spec", ROW_SPECS, ids=_id)
def test_k_blocks_carry_the_chain(spec, family):
    instr = spec.L * spec.passes
    kw = operands(spec, 3, 35, 5 * instr + 3, family, seeded(spec.to_string(), family, "blocks"))
    c_mode = "epilogue" if family == "cancel" else "chain"
    S = mm_on_path(kw, "scalar", c_mode)  # one K block (the default budget)
    with block_bytes(1):
        assert_same_bits(mm_on_path(kw, "scalar", c_mode), S, f"scalar in tiny K blocks, {_id(spec)}")
        for isa in ISAS:
            assert_same_bits(mm_on_path(kw, isa, c_mode), S, f"{isa} in tiny K blocks, {_id(spec)}")


@pytest.mark.parametrize("spec", MULTI, ids=_id)
def test_multipass_specials_and_overflow(spec):
    g = seeded(spec.to_string(), "multipass")
    K = 3 * spec.L * spec.passes + 7  # a partial instruction at the end
    kw = operands(spec, 6, 40, K, "normal", g)
    A, B, C = kw["A"], kw["B"], kw["C"].clone()
    big = 60000.0 if spec.out_format == "fp16" else 3.0e38
    C[0, :8] = torch.tensor([float("inf"), -float("inf"), float("nan"), big, -big, 0.0, -0.0, 1e-30])
    C[1] = big  # the final addition overflows for positive products
    # row 2: large products, so the passes' partial sums themselves are large
    A[2] = (A[2].float() * 64).to(A.dtype) if A.dtype.is_floating_point and A.element_size() > 1 else A[2]
    kw = dict(kw, C=C, A=A)
    S = mm_on_path(kw, "scalar")
    for isa in ISAS:
        assert_same_bits(mm_on_path(kw, isa), S, f"{isa} vs scalar, {_id(spec)}")
    R = ref.mm(spec, kw["A"], kw["B"], kw["C"], c_mode="chain")
    assert_same_bits(S, R, f"kernel vs reference, {_id(spec)}")


def _gemv(args, env_extra=None):
    env = dict(os.environ)
    env.pop("MMA_EMU_CPU_BLOCK_BYTES", None)
    env.update(env_extra or {})
    r = subprocess.run([sys.executable, str(ROOT / "scripts/gemv_memory.py"), "--json", *args],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("arch,fmt", [("sm90", "fp16"), ("gfx942", "xf32"), ("sm90", "fp32")])
def test_long_gemv_memory_is_bounded(arch, fmt):
    """K = 10^7, M = N = 1: the peak grows by about one K block (32 MiB budget), where it grew
    by 1.7 GB (fp16) before K ran in blocks; the scalar path gives the same bits."""
    fast = _gemv(["--arch", arch, "--format", fmt])
    assert fast["peak_growth_mb"] < 100, fast
    scalar = _gemv(["--arch", arch, "--format", fmt, "--k", "1000000"], {"MMA_EMU_SCALAR": "1"})
    assert scalar["peak_growth_mb"] < 100, scalar
    fast1 = _gemv(["--arch", arch, "--format", fmt, "--k", "1000000"])
    assert fast1["result"] == scalar["result"] or (fast1["result"] != fast1["result"]
                                                   and scalar["result"] != scalar["result"])
