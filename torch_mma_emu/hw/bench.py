"""Part 3: emulated multiply-adds per second on the GPU beside fp32 torch.matmul (TF32 off)
and the fp16 cuBLAS GEMM on the same operands, measured in the same run."""
from __future__ import annotations

import time

import torch

from .. import native
from ..ops import emulated_mm
from ..registry import spec as registry_spec


def best_time(fn, reps):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    return min(ts)


def part_bench(args, dev):
    n = args.bench_size
    g = torch.Generator(device=dev).manual_seed(0)
    A32 = torch.randn(n, n, device=dev, generator=g)
    B32 = torch.randn(n, n, device=dev, generator=g)
    A, B = A32.half(), B32.half()
    t_emu = best_time(lambda: emulated_mm(A, B, arch=args.bench_arch), args.reps)
    with native.tf32_matmul(False):  # the reference: fp32 torch.matmul without TF32
        t_ref = best_time(lambda: torch.matmul(A32, B32), args.reps)
    t_cublas = best_time(lambda: torch.matmul(A, B), args.reps)     # the tensor cores themselves
    macs = n ** 3
    return dict(arch=args.bench_arch, size=n, model=registry_spec(args.bench_arch, "fp16").describe(),
                emulated_macs=macs / t_emu, fp32_matmul_macs=macs / t_ref,
                ratio=(macs / t_ref) / (macs / t_emu), t_emu=t_emu, t_ref=t_ref,
                cublas_fp16_macs=macs / t_cublas, t_cublas=t_cublas)

