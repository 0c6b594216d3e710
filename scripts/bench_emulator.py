#!/usr/bin/env python
"""Emulated multiply-adds per second, against torch.matmul in fp32 measured in the same run.

    python scripts/bench_emulator.py                      # sm90 fp16 -> fp32, 512^3, CPU
    python scripts/bench_emulator.py --all                # every arch's fp16/bf16/fp8 path
    python scripts/bench_emulator.py --size 1024 --arch gfx942 --format bf16

The target of issue 2: >= 2e8 emulated MAC/s on 2 CPU cores for fp16, fp32 out, sm90, 512^3.
On a GPU (issue 3: >= 5e11 emulated MAC/s on an H100, fp16 -> fp32, sm90, 4096^3):

    python scripts/bench_emulator.py --device cuda --size 4096

Schedules (issue 13: a schedule costs at most 1.3x the plain chain, measured in the same run):

    python scripts/bench_emulator.py --schedule cublas_split_k_4 --schedule "schedule:promote_every=128"
"""
import argparse
import time

import torch

import torch_mma_emu as tme

DT = {"fp16": torch.float16, "bf16": torch.bfloat16, "tf32": torch.float32, "xf32": torch.float32,
      "fp32": torch.float32, "fp64": torch.float64, "fp8_e4m3": torch.float8_e4m3fn,
      "fp8_e5m2": torch.float8_e5m2, "fp8_e4m3fnuz": torch.float8_e4m3fnuz}


def best_time(fn, reps, sync):
    fn()
    sync()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
    return min(ts)


def bench(arch, fmt, n, device, reps):
    g = torch.Generator().manual_seed(0)
    A32 = torch.randn(n, n, generator=g).to(device)
    B32 = torch.randn(n, n, generator=g).to(device)
    A, B = A32.to(DT[fmt]), B32.to(DT[fmt])
    inf = fmt if fmt in ("tf32", "xf32") else None
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
    t_emu = best_time(lambda: tme.emulated_mm(A, B, arch=arch, in_format=inf), reps, sync)
    t_ref = best_time(lambda: torch.matmul(A32, B32), reps, sync)
    macs = n ** 3
    return macs / t_emu, macs / t_ref, t_emu, t_ref


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="sm90")
    p.add_argument("--format", default="fp16")
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--device", default="cpu")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--all", action="store_true", help="a table over archs and formats")
    p.add_argument("--schedule", action="append", help="also time these schedules (preset "
                   "or 'schedule:...') against the plain chain (repeatable)")
    args = p.parse_args()
    where = (f"device {args.device} ({torch.cuda.get_device_name(args.device)}; the reference is "
             "fp32 torch.matmul with TF32 disabled)" if args.device.startswith("cuda")
             else f"{torch.get_num_threads()} CPU threads, device {args.device}")
    print(f"torch {torch.__version__}, {where}, {args.size}^3")
    cases = [(args.arch, args.format)]
    if args.all:
        cases = [("sm70", "fp16"), ("sm80", "bf16"), ("sm80", "tf32"), ("sm89", "fp8_e4m3"),
                 ("sm90", "fp16"), ("sm90", "bf16"), ("sm90", "fp8_e4m3"), ("sm100", "fp8_e4m3"),
                 ("gfx908", "fp16"), ("gfx90a", "fp16"), ("gfx942", "fp16"),
                 ("gfx942", "fp8_e4m3fnuz"), ("sm90", "fp32")]
    print(f"{'arch':8} {'input':14} {'model':44} {'emulated MAC/s':>15} {'fp32 matmul MAC/s':>18} {'ratio':>8}")
    for arch, fmt in cases:
        s = tme.spec(arch, fmt)
        emu, ref, te, tr = bench(arch, fmt, args.size, args.device, args.reps)
        print(f"{arch:8} {fmt:14} {s.describe():44} {emu:15.3g} {ref:18.3g} {ref / emu:7.1f}x")
    if args.schedule:
        bench_schedules(args)


def bench_schedules(args):
    """Each schedule's cost over the plain chain's, interleaved in one run.  Reports wall
    time and process CPU time (all threads): on a machine shared with other work the CPU
    time is the steadier measure of what the schedule adds."""
    g = torch.Generator().manual_seed(0)
    n, dev = args.size, args.device
    A = torch.randn(n, n, generator=g).to(dev).to(DT[args.format])
    B = torch.randn(n, n, generator=g).to(dev).to(DT[args.format])
    C = torch.randn(n, n, generator=g).to(dev)
    inf = args.format if args.format in ("tf32", "xf32") else None
    sync = torch.cuda.synchronize if dev.startswith("cuda") else (lambda: None)

    def timed(s):
        w, c = time.perf_counter(), time.process_time()
        tme.emulated_mm(A, B, C, arch=args.arch, in_format=inf, schedule=s)
        sync()
        return time.perf_counter() - w, time.process_time() - c

    print(f"\nschedules, {args.arch} {args.format}, {n}^3 with C: cost / plain chain's cost "
          "(best of --reps, interleaved)")
    print(f"  {'schedule':40} {'wall':>6} {'cpu':>6}")
    for name in args.schedule:
        timed(name)
        plain, sched = [], []
        for _ in range(args.reps):   # interleaved, so load changes hit both alike
            plain.append(timed(None))
            sched.append(timed(name))
        wall = min(t[0] for t in sched) / min(t[0] for t in plain)
        cpu = min(t[1] for t in sched) / min(t[1] for t in plain)
        desc = tme.schedule.as_schedule(name).describe()
        print(f"  {name:40} {wall:5.2f}x {cpu:5.2f}x  {desc}")

if __name__ == "__main__":
    main()
