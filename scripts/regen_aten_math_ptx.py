"""The evidence for torch_mma_emu.aten_cuda.elementwise: nvcc's PTX of ATen's elementwise
lambdas, run instruction by instruction (gpu_math.ptx_run), against the NumPy models.

    python scripts/regen_aten_math_ptx.py            # recompile the PTX (needs nvcc), sweep
    python scripts/regen_aten_math_ptx.py --check    # sweep the committed PTX only (no nvcc)
    python scripts/regen_aten_math_ptx.py --check --fp32 1000000
    python scripts/regen_aten_math_ptx.py --backward [--check]   # the backward kernels

The PTX (tests/data/aten_math/aten_math_sm90.ptx) is compiled from
tests/data/aten_math/aten_math.cu with PyTorch's device flags (no fast-math, no FTZ,
contraction on, half / bfloat16 operators from c10, not CUDA's) and the c10 headers of the
installed torch.  The sweep: all 2^16 float16 and bfloat16 inputs and ``--fp32`` float32
inputs (every special value, the subnormals' corners, random bit patterns, a dense grid
where the kernels switch branch); a mismatch is a differing bit pattern (NaNs of any payload
agree).  Prints one line per op and dtype and exits 1 on any mismatch.

``--backward``: the same for the binary backward lambdas
(tests/data/aten_math/aten_math_backward.cu -> aten_math_backward_sm90.ptx, models in
torch_mma_emu/aten_cuda/backward.py): every 16-bit pattern as the second operand (the
forward's output or input) with a random gradient, and ``--fp32`` float32 pairs.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from torch_mma_emu.aten_cuda import backward as bw  # noqa: E402
from torch_mma_emu.aten_cuda import elementwise as ew  # noqa: E402
from torch_mma_emu.gpu_math import ptx_run  # noqa: E402

DATA = ROOT / "tests" / "data" / "aten_math"
SOURCE, PTX = DATA / "aten_math.cu", DATA / "aten_math_sm90.ptx"
BW_SOURCE, BW_PTX = DATA / "aten_math_backward.cu", DATA / "aten_math_backward_sm90.ptx"
# PyTorch's CMake device flags (cmake/public/cuda.cmake, Dependencies.cmake): the CUDA
# half / bfloat16 operators are off so that c10's (float math) are used
TORCH_FLAGS = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
               "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
               "--expt-relaxed-constexpr", "--expt-extended-lambda", "-std=c++17"]
SUFFIX = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def compile_ptx(source=SOURCE, ptx=PTX) -> None:
    import torch.utils.cpp_extension as ext
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        sys.exit("regen_aten_math_ptx: nvcc is not on PATH (use --check to sweep the "
                 "committed PTX)")
    inc = [f"-I{p}" for p in ext.include_paths()]
    subprocess.run([nvcc, "-arch=sm_90", "-ptx", *TORCH_FLAGS, *inc, str(source), "-o",
                    str(ptx)], check=True)


def fp32_inputs(n: int, seed: int = 0) -> np.ndarray:
    """Special values, subnormal corners, random bit patterns and a dense grid over the
    range where the kernels branch (|x| < 20)."""
    rng = np.random.default_rng(seed)
    special = np.array([0, 0x80000000, 1, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000,
                        0x80800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000,
                        0x7FC00000, 0xFFC00000, 0x7F800001, 0x3F800000, 0xBF800000],
                       np.uint32)
    sub = rng.integers(0, 1 << 23, n // 16, dtype=np.uint32)
    sub |= rng.integers(0, 2, sub.size, dtype=np.uint32) << np.uint32(31)
    bits = rng.integers(0, 1 << 32, n // 2, dtype=np.uint64).astype(np.uint32)
    grid = np.linspace(-20, 20, n - special.size - sub.size - bits.size, dtype=np.float32)
    return np.concatenate([special.view(np.float32), sub.view(np.float32),
                           bits.view(np.float32), grid])


def same(a_bits: np.ndarray, b_bits: np.ndarray, dtype: str) -> np.ndarray:
    """Equal bit patterns, or both NaN."""
    if dtype == "float32":
        a, b = a_bits.view(np.float32), b_bits.view(np.float32)
    elif dtype == "float16":
        a, b = a_bits.view(np.float16), b_bits.view(np.float16)
    else:
        a, b = ew.widen(a_bits, dtype), ew.widen(b_bits, dtype)
    return (a_bits == b_bits) | (np.isnan(a) & np.isnan(b))


def ptx_values(ptx: str, op: str, dtype: str, x: np.ndarray) -> np.ndarray:
    """The kernel ``op``_``dtype`` of ``ptx`` on ``x`` (float32 values / 16-bit patterns):
    result bit patterns (uint32 / uint16)."""
    prog, src, dst = ptx_run.routine(ptx_run.entry(ptx, f"{op}_{SUFFIX[dtype]}"))
    out = ptx_run.run(prog, src, dst, x)
    if dtype == "float32":
        return out.view(np.uint32)
    return (out.view(np.uint32) & np.uint32(0xFFFF)).astype(np.uint16)


def inputs(dtype: str, n32: int) -> np.ndarray:
    if dtype == "float32":
        return fp32_inputs(n32)
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def model_values(op: str, dtype: str, x: np.ndarray) -> np.ndarray:
    y = ew.evaluate(op, x if dtype != "float16" else x.view(np.float16), dtype)
    return np.asarray(y).view(np.uint32 if dtype == "float32" else np.uint16)


@np.errstate(all="ignore")
def sweep(n32: int, ops=None) -> int:
    ptx = PTX.read_text()
    bad = 0
    for op in ops or ew.OPS:
        for dtype in ew.DTYPES:
            x = inputs(dtype, n32)
            got, want = model_values(op, dtype, x), ptx_values(ptx, op, dtype, x)
            miss = int((~same(got, want, dtype)).sum())
            bad += miss
            print(f"{op:<10} {dtype:<9} {x.size:>9} inputs  {miss} mismatches")
    return bad


def backward_inputs(dtype: str, n32: int, seed: int = 1):
    """(gradients, second operands) of one backward sweep: every 16-bit pattern with random
    normal gradients, or ``n32`` float32 pairs (random bit patterns and a grid over
    [-12, 12] as the second operand)."""
    rng = np.random.default_rng(seed)
    if dtype == "float32":
        b = np.concatenate([fp32_inputs(n32 // 2, seed),
                            np.linspace(-12, 12, n32 - n32 // 2, dtype=np.float32)])
        return rng.standard_normal(b.size).astype(np.float32), b
    b = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    g = rng.standard_normal(b.size).astype(np.float32)
    if dtype == "float16":
        return g.astype(np.float16).view(np.uint16), b
    return ptx_run.half_bits(g, "bf16").astype(np.uint16), b


def backward_mismatches(ptx: str, op: str, dtype: str, n32: int) -> tuple[int, int]:
    """(mismatches, inputs) of backward ``op`` in ``dtype`` between the PTX and the model."""
    g, b = backward_inputs(dtype, n32)
    prog, srcs, dst = ptx_run.routine_n(ptx_run.entry(ptx, f"{op}_{SUFFIX[dtype]}"))
    out = ptx_run.run(prog, srcs, dst, (g, b))
    if dtype == "float32":
        want, got = out.view(np.uint32), bw.evaluate(op, g, b, dtype).view(np.uint32)
    else:
        want = (out.view(np.uint32) & np.uint32(0xFFFF)).astype(np.uint16)
        a16 = (g.view(np.float16), b.view(np.float16)) if dtype == "float16" else (g, b)
        got = bw.evaluate(op, *a16, dtype).view(np.uint16)
    return int((~same(got, want, dtype)).sum()), b.size


@np.errstate(all="ignore")
def sweep_backward(n32: int) -> int:
    ptx = BW_PTX.read_text()
    bad = 0
    for op in bw.OPS:
        for dtype in ew.DTYPES:
            miss, n = backward_mismatches(ptx, op, dtype, n32)
            bad += miss
            print(f"{op:<19} {dtype:<9} {n:>9} inputs  {miss} mismatches")
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="do not recompile; sweep only")
    ap.add_argument("--fp32", type=int, default=1_000_000, help="float32 inputs per op")
    ap.add_argument("--op", action="append", choices=sorted(ew.OPS), help="only these ops")
    ap.add_argument("--backward", action="store_true",
                    help="the backward kernels (aten_math_backward.cu) instead")
    a = ap.parse_args(argv)
    if a.fp32 < 64:
        ap.error("--fp32 must be at least 64")
    if a.backward:
        if not a.check:
            compile_ptx(BW_SOURCE, BW_PTX)
        return 1 if sweep_backward(a.fp32) else 0
    if not a.check:
        compile_ptx()
    return 1 if sweep(a.fp32, a.op) else 0


if __name__ == "__main__":
    sys.exit(main())
