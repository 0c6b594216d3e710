"""Running csrc/cuda/mma_instr.cu's instruction kernels (nvcc's PTX for each target,
tests/data/cuda_ptx/) in the PTX interpreter the way ``mma_instr_cuda`` launches them: the
kernel ``pick`` chooses for (kind, a type, b type, accumulator), ``mma_sync_kernel`` with
ceil(tiles / 4) blocks of 128 threads (one warp per 16 x 8 tile) or ``wgmma_kernel`` with
(M / 64) (N / 8) blocks of 128 (one warpgroup per 64 x 8 tile), on a (M, K) codes, b (N, K)
codes (B transposed), c (M, N) float32 / float16, an error flag the kernel sets where the
build has no code for the instruction."""
from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np

from torch_mma_emu import ptx
from torch_mma_emu.isa import KERNEL_TYPES, KERNELS

DATA = Path(__file__).parent / "data" / "cuda_ptx"
# the registry arch -> the PTX target its GPU runs (sm86 runs the sm_80 build)
TARGET = {"sm80": "sm80", "sm86": "sm80", "sm89": "sm89", "sm90": "sm90a", "sm100": "sm100a",
          "sm120": "sm120a"}


def load(target: str) -> ptx.Module:
    return ptx.Module(gzip.decompress((DATA / f"mma_instr_{target}.ptx.gz").read_bytes()).decode())


def kernel_name(mod, instruction: str, fa: str, fb: str, acc: str) -> str:
    kern = KERNELS[instruction]
    fam = "wgmma_kernel" if kern.sm90a else "mma_sync_kernel"
    suffix = (f"{fam}ILi{kern.kind}ELi{KERNEL_TYPES[fa]}ELi{KERNEL_TYPES[fb]}"
              f"ELi{0 if acc == 'fp32' else 1}EE")
    hits = [n for n in mod.kernels if re.search(r"\d" + re.escape(suffix), n)]
    if len(hits) != 1:
        raise LookupError(f"{suffix}: {len(hits)} kernels in the PTX")
    return hits[0]


def run(mod, arch: str, instruction: str, fa: str, fb: str, acc: str, a, bt, c,
        max_steps=5_000_000):
    """(d, err flag, Stats): a (M, K), bt (N, K) integer codes, c (M, N) in the accumulator
    dtype, NumPy; launched as mma_instr_cuda's ``launch`` does."""
    kern = KERNELS[instruction]
    M, K = a.shape
    N = bt.shape[0]
    name = kernel_name(mod, instruction, fa, fb, acc)
    d = np.zeros_like(c)
    err = np.zeros(1, np.int32)
    if kern.sm90a:
        grid = (M // 64) * (N // 8)
    else:
        grid = -(-(M // 16) * (N // 8) // 4)
    st = mod.launch(name, grid, 128, [np.ascontiguousarray(a), np.ascontiguousarray(bt),
                                      np.ascontiguousarray(c), d, np.int32(M), np.int32(N),
                                      np.int32(K), err], max_steps=max_steps, arch=arch)
    return d, int(err[0]), st
