"""Running csrc/cuda/sched_cuda.cu's schedule kernel (nvcc's PTX) in the PTX interpreter as
``sched_cuda`` launches it: one thread per output element, 128 per block; Params packed as
tests/cuda_gemm_ptx.py does, SchedConsts {int32 ws64; double alpha, beta} (24 bytes), the
program as int64 words, each tensor as a View3 {base, byte strides, element size} over the
tensor's own storage (its strides as they are: expanded, transposed, offset)."""
from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np

from torch_mma_emu import ptx

import cuda_gemm_ptx as G

DATA = Path(__file__).parent / "data" / "cuda_ptx"
THREADS = 128


def load(target: str = "sm80") -> ptx.Module:
    return ptx.Module(gzip.decompress((DATA / f"sched_cuda_{target}.ptx.gz").read_bytes()).decode())


def storage_view(t):
    """(flat uint8 array of the storage t spans from its first element, byte strides)."""
    import torch
    es = t.element_size()
    if t.numel() == 0:
        return np.zeros(8, np.uint8), (0, 0, 0)
    if min(t.stride()) < 0:
        raise ValueError("negative strides")
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    flat = torch.as_strided(t, (span,), (1,), t.storage_offset()).contiguous()
    raw = flat.view(torch.uint8) if es > 1 else flat.view(torch.uint8)
    return raw.numpy().copy(), tuple(s * es for s in t.stride())


def run(mod, vec, a, b, c, partials, program, consts, max_steps=20_000_000):
    """The kernel's output (Bt, M, N) as NumPy (output dtype of the program), and Stats."""
    (name,) = list(mod.kernels)
    mem = G._Mem()
    views = []
    for nm, t in (("a", a), ("b", b), ("c", c), ("partials", partials)):
        buf, st = storage_view(t)
        addr = mem.add(nm, buf)
        views.append(struct.pack("<Q3qi4x", addr, *st, t.element_size()))
    Bt, M, N = c.shape
    p = G.named(vec)
    odt = np.float64 if p["rho"] == G.RHO["rne_fp64"] else (
        np.float16 if p["rho"] == G.RHO["rne_fp16"] else np.float32)
    out = np.zeros((Bt, M, N), odt)
    prog = np.asarray(program, np.int64)
    consts_b = struct.pack("<i4xdd", int(consts[0]), float(consts[1]), float(consts[2]))
    blocks = max(1, -(-out.size // THREADS))
    st = mod.launch(name, blocks, THREADS,
                    [G.pack_params(vec), consts_b, prog if prog.size else np.zeros(1, np.int64),
                     np.int64(prog.size), *views, np.int64(Bt), np.int64(M), np.int64(N), out,
                     np.int32(out.itemsize)], buffers=mem.bufs, max_steps=max_steps)
    return out, st
