#!/usr/bin/env python
"""The fixed cost of one small ``emulated_mm`` call (issue 41, item 2): microseconds per call
at 16^3 .. 256^3, a batched 8 x 64^3 call and an ``emulate()``d ``nn.Linear(64, 64)``, each
with fp32 ``torch.matmul`` (or the native Linear) on the same shapes timed in the same run.

    python scripts/bench_small.py                 # 1 torch thread, best of 7
    python scripts/bench_small.py --reps 15 --threads 2
    python scripts/bench_small.py --only "sm90 fp16,emulate"

Columns: us per call (best of --reps runs of enough calls to last ~20 ms), torch.matmul's us
per call on the same shapes in fp32, their ratio, and the emulated MAC/s.  On a shared machine
the ratios, measured in the same run, are what to compare; nothing here asserts a time.
"""
import argparse
import os
import time

import torch

import torch_mma_emu as tme

SIZES = (16, 64, 128, 256)
# (label, arch, dtype or in_format of A / B, out dtype of C)
ROWS = (("sm90 fp16->fp32", "sm90", torch.float16, None, torch.float32),
        ("sm80 bf16->fp32", "sm80", torch.bfloat16, None, torch.float32),
        ("gfx942 fp16->fp32", "gfx942", torch.float16, None, torch.float32),
        ("sm100 fp4_e2m1->fp32", "sm100", torch.uint8, "fp4_e2m1", None))


def per_call(fn, reps, target=0.02):
    """Best time per call in seconds: --reps runs, each of enough calls to last ~target s."""
    fn()
    t = time.perf_counter()
    fn()
    one = max(time.perf_counter() - t, 1e-7)
    n = max(1, min(10_000, int(target / one)))
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t) / n)
    return best


def operands(shape_a, shape_b, dtype, in_format, gen):
    if dtype == torch.uint8:      # fp4 codes, one per byte
        return (torch.randint(0, 16, shape_a, dtype=torch.uint8, generator=gen),
                torch.randint(0, 16, shape_b, dtype=torch.uint8, generator=gen))
    return (torch.randn(shape_a, generator=gen).to(dtype),
            torch.randn(shape_b, generator=gen).to(dtype))


def line(label, shape, t, tm, macs):
    print(f"{label:<24} {shape:<16} {t * 1e6:10.1f} {tm * 1e6:10.1f} {t / tm:8.1f}x "
          f"{macs / t:10.3g}", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7, help="timed runs per row (best kept)")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    ap.add_argument("--only", default="", help="comma-separated substrings of the labels")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    keep = (lambda label: not only or any(s in label for s in only))
    gen = torch.Generator().manual_seed(0)
    load = ", load average %.2f %.2f %.2f" % os.getloadavg() if hasattr(os, "getloadavg") else ""
    print(f"torch {torch.__version__}, {args.threads} thread(s), best of {args.reps}{load}")
    print(f"{'row':<24} {'shape':<16} {'us/call':>10} {'matmul us':>10} {'ratio':>9} "
          f"{'MAC/s':>10}")
    for label, arch, dtype, in_format, cdt in ROWS:
        if not keep(label):
            continue
        for s in SIZES:
            A, B = operands((s, s), (s, s), dtype, in_format, gen)
            C = None if cdt is None else torch.randn(s, s, generator=gen).to(cdt)
            Af, Bf = torch.randn(s, s, generator=gen), torch.randn(s, s, generator=gen)
            t = per_call(lambda: tme.emulated_mm(A, B, C, arch=arch, in_format=in_format),
                         args.reps)
            tm = per_call(lambda: torch.matmul(Af, Bf), args.reps)
            line(label, f"{s}^3", t, tm, s ** 3)
    if keep("batched"):
        A, B = operands((8, 64, 64), (8, 64, 64), torch.float16, None, gen)
        C = torch.randn(8, 64, 64, generator=gen)
        Af, Bf = torch.randn(8, 64, 64, generator=gen), torch.randn(8, 64, 64, generator=gen)
        t = per_call(lambda: tme.emulated_mm(A, B, C, arch="sm90"), args.reps)
        tm = per_call(lambda: torch.matmul(Af, Bf), args.reps)
        line("batched sm90 fp16", "8x64^3", t, tm, 8 * 64 ** 3)
    if keep("emulate"):
        lin = torch.nn.Linear(64, 64)
        x = torch.randn(64, 64, generator=gen)
        xg = x.clone().requires_grad_()

        def fwd_bwd():         # a training step's products (gradients set to None first)
            lin.zero_grad(set_to_none=True)
            xg.grad = None
            lin(xg).sum().backward()
        tn = per_call(lambda: lin(x), args.reps)
        tnb = per_call(fwd_bwd, args.reps)
        with tme.emulate("sm90"):
            t = per_call(lambda: lin(x), args.reps)
            with torch.no_grad():
                t0 = per_call(lambda: lin(x), args.reps)
            tb = per_call(fwd_bwd, args.reps)
        line("emulate Linear fwd", "64x64 @ 64x64", t, tn, 64 ** 3)
        line("emulate Linear no_grad", "64x64 @ 64x64", t0, tn, 64 ** 3)
        line("emulate Linear fwd+bwd", "64x64 @ 64x64", tb, tnb, 3 * 64 ** 3)


if __name__ == "__main__":
    main()
