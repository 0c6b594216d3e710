#!/usr/bin/env python
"""Peak extra memory of one long GEMV (M = N = 1, K = 10^7 by default) on the CPU kernel.

    python scripts/gemv_memory.py                       # sm90 fp16, K = 10^7
    python scripts/gemv_memory.py --arch gfx942 --format xf32 --k 3000000
    MMA_EMU_SCALAR=1 python scripts/gemv_memory.py      # the scalar path

Prints the inputs' size and the growth of the process's peak resident set (ru_maxrss) during
one emulated_mm call.  The inputs are built in place (no temporaries), so the peak before the
call is their footprint.  Used by tests/test_cpu_memory.py.
"""
import argparse
import json
import resource
import sys

import torch

import torch_mma_emu as tme
from torch_mma_emu.formats import FLOAT_DTYPES


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0   # KiB on Linux


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="sm90")
    p.add_argument("--format", default="fp16")
    p.add_argument("--k", type=int, default=10 ** 7)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(2)
    spec = tme.spec(a.arch, a.format)
    dt = FLOAT_DTYPES[spec.in_format]
    A = torch.empty(1, a.k, dtype=dt)
    B = torch.empty(a.k, 1, dtype=dt)
    g = torch.Generator().manual_seed(0)
    step = 1 << 20
    for k0 in range(0, a.k, step):   # in pieces: no input-sized temporaries
        k1 = min(a.k, k0 + step)
        A[0, k0:k1] = torch.randn(k1 - k0, generator=g).to(dt)
        B[k0:k1, 0] = torch.randn(k1 - k0, generator=g).to(dt)
    inf = a.format if a.format in ("xf32", "tf32") else None
    small = torch.ones(1, 64, dtype=dt), torch.ones(64, 1, dtype=dt)
    tme.emulated_mm(*small, arch=spec, in_format=inf)   # load the kernels first
    before = peak_mb()
    D = tme.emulated_mm(A, B, arch=spec, in_format=inf)
    grown = max(0.0, peak_mb() - before)
    inputs = (A.numel() * A.element_size() + B.numel() * B.element_size()) / 2 ** 20
    res = dict(arch=a.arch, format=a.format, k=a.k, inputs_mb=round(inputs, 1),
               peak_growth_mb=round(grown, 1), result=float(D.float()[0, 0]),
               path=torch.ops.mma_emu._cpu_fast_path(spec.to_params()))
    if a.json:
        print(json.dumps(res))
    else:
        print(f"{a.arch} {a.format} K={a.k} ({res['path']}): inputs {inputs:.1f} MB, "
              f"peak grew by {grown:.1f} MB during the call")


if __name__ == "__main__":
    sys.exit(main())
