#!/usr/bin/env python
"""Peak extra memory of one long GEMV (M = N = 1, K = 10^7 by default) on the CPU kernel.

    python scripts/gemv_memory.py                       # sm90 fp16, K = 10^7, the plain path
    python scripts/gemv_memory.py --arch gfx942 --format xf32 --k 3000000
    python scripts/gemv_memory.py --schedule cublas_split_k_4
    python scripts/gemv_memory.py --schedules           # plain + every preset + split_k=1000000
    MMA_EMU_SCALAR=1 python scripts/gemv_memory.py      # the scalar path

Prints the inputs' size and the growth of the process's peak resident set (ru_maxrss) during
one emulated_mm call.  The inputs are built in place (no temporaries), so the peak before the
call is their footprint.  ``--schedules`` runs each case in a fresh process (ru_maxrss only
grows) and prints each against the plain path measured in the same run; presets that take
float32 inputs (``input_precision``) run on float32 inputs of the same length, against the
plain tf32 path on those.  Used by tests/test_cpu_fast_blocks.py and tests/test_schedule_blocks.py.
"""
import argparse
import json
import os
import resource
import subprocess
import sys

import torch

import torch_mma_emu as tme
from torch_mma_emu.formats import FLOAT_DTYPES
from torch_mma_emu.cpp import params

EXTRA = ["schedule:split_k=1000000"]   # far more slices than a sane schedule: bounded too


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0   # KiB on Linux


def one(arch, fmt, k, schedule):
    """One call in this process: the dict the --json line prints."""
    torch.set_num_threads(2)
    spec = tme.spec(arch, fmt)
    dt = FLOAT_DTYPES[spec.in_format]
    A = torch.empty(1, k, dtype=dt)
    B = torch.empty(k, 1, dtype=dt)
    g = torch.Generator().manual_seed(0)
    step = 1 << 20
    for k0 in range(0, k, step):   # in pieces: no input-sized temporaries
        k1 = min(k, k0 + step)
        A[0, k0:k1] = torch.randn(k1 - k0, generator=g).to(dt)
        B[k0:k1, 0] = torch.randn(k1 - k0, generator=g).to(dt)
    inf = fmt if fmt in ("xf32", "tf32") else None
    if schedule is not None and tme.schedule.as_schedule(schedule).input_precision:
        inf = None    # the schedule picks the input format
    arch_arg = spec.arch if schedule else spec
    small = torch.ones(1, 64, dtype=dt), torch.ones(64, 1, dtype=dt)
    tme.emulated_mm(*small, arch=arch_arg, in_format=inf, schedule=schedule)   # load kernels
    before = peak_mb()
    D = tme.emulated_mm(A, B, arch=arch_arg, in_format=inf, schedule=schedule)
    grown = max(0.0, peak_mb() - before)
    inputs = (A.numel() * A.element_size() + B.numel() * B.element_size()) / 2 ** 20
    return dict(arch=arch, format=fmt, k=k, schedule=schedule or "plain",
                inputs_mb=round(inputs, 1), peak_growth_mb=round(grown, 1),
                result=float(D.float()[0, 0]),
                path=torch.ops.mma_emu._cpu_fast_path(list(params(spec))))


def _child(arch, fmt, k, schedule):
    cmd = [sys.executable, os.path.abspath(__file__), "--json", "--arch", arch, "--format", fmt,
           "--k", str(k)] + (["--schedule", schedule] if schedule else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["?"])[-1]
        return dict(schedule=schedule or "plain", format=fmt, error=last)
    return json.loads(r.stdout.strip().splitlines()[-1])


def every_schedule(arch, fmt, k):
    """Plain, then every preset and EXTRA, each in its own process: (rows, ok)."""
    from torch_mma_emu.schedule import PRESETS
    base = {fmt: _child(arch, fmt, k, None)}
    rows = []
    for name in [n for n in PRESETS if n != "plain"] + EXTRA:
        f = "tf32" if tme.schedule.as_schedule(name).input_precision else fmt
        if f not in base:
            base[f] = _child(arch, f, k, None)
        rows.append((_child(arch, f, k, name), base[f]))
    return base, rows


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="sm90")
    p.add_argument("--format", default="fp16")
    p.add_argument("--k", type=int, default=10 ** 7)
    p.add_argument("--schedule", default=None, help="a preset name or schedule string")
    p.add_argument("--schedules", action="store_true",
                   help="the plain path, every preset and split_k=1000000, each in a fresh "
                        "process, against the plain path")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    if a.k < 1:
        p.error(f"--k must be >= 1, got {a.k}")
    if not a.schedules:
        res = one(a.arch, a.format, a.k, a.schedule)
        if a.json:
            print(json.dumps(res))
        else:
            print(f"{a.arch} {a.format} K={a.k} {res['schedule']} ({res['path']}): inputs "
                  f"{res['inputs_mb']:.1f} MB, peak grew by {res['peak_growth_mb']:.1f} MB "
                  "during the call")
        return 0
    base, rows = every_schedule(a.arch, a.format, a.k)
    if a.json:
        print(json.dumps({"plain": base, "schedules": [r for r, _ in rows]}))
        return 0
    print(f"{a.arch}, K = {a.k}, M = N = 1: peak resident set growth during one call")
    for f, b in base.items():
        print(f"  {'plain (' + f + ')':40s} {b.get('peak_growth_mb', float('nan')):8.1f} MB"
              f"   inputs {b.get('inputs_mb', float('nan')):.1f} MB  {b.get('error', '')}")
    worst = 0.0
    for r, b in rows:
        if "error" in r:
            print(f"  {r['schedule']:40s}  refused: {r['error']}")
            continue
        d = r["peak_growth_mb"] - b["peak_growth_mb"]
        worst = max(worst, d)
        print(f"  {r['schedule'] + ' (' + r['format'] + ')':40s} {r['peak_growth_mb']:8.1f} MB"
              f"   {d:+7.1f} MB vs plain")
    print(f"largest excess over the plain path: {worst:+.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
