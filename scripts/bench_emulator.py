#!/usr/bin/env python
"""Emulated multiply-adds per second, against torch.matmul in fp32 measured in the same run.

    python scripts/bench_emulator.py                      # sm90 fp16 -> fp32, 512^3, CPU
    python scripts/bench_emulator.py --all                # every registry row
    python scripts/bench_emulator.py --all --vs-scalar    # ... and the scalar path (MMA_EMU_SCALAR=1)
    python scripts/bench_emulator.py --size 1024 --arch gfx942 --format bf16

The CPU kernel picks a vectorised fast path (AVX-512 / AVX2 / NEON) where one serves the row;
the "path" column says which (scalar = the per-element core chain).  --all also prints each
row's speed over the sm90 fp16 -> fp32 row's, timed in the same run ("/ sm90"), and
MMA_EMU_CPU_ISA=avx2 measures an AVX2-only CPU on an AVX-512 one.  --vs-scalar also times the
scalar path in the same run and prints the speed-up.  Timings on a shared machine are noisy:
compare the ratios, which are measured in the same run, and take the best of --reps.

On a GPU (issue 3: >= 5e11 emulated MAC/s on an H100, fp16 -> fp32, sm90, 4096^3):

    python scripts/bench_emulator.py --device cuda --size 4096

Per core and over threads (issue 41): the ratio is always against fp32 torch.matmul at the
same torch thread count (torch.set_num_threads governs the emulation's loops too):

    python scripts/bench_emulator.py --all --threads 1 --size 1024
    python scripts/bench_emulator.py --all --threads 1 --shape 4096x4096x1024
    python scripts/bench_emulator.py --scaling --only "sm90 fp16,gfx942 fp16" --size 1024
    python scripts/bench_emulator.py --all --threads 1 --size 1024 --avx2   # an AVX2-only CPU

--scaling prints MAC/s at 1, 2, ... os.cpu_count() threads (or --thread-counts 1,4,16), the
emulation's and fp32 torch.matmul's, each count's speed-up over one thread, and the ratio.

Schedules (issue 13: a schedule costs at most 1.3x the plain chain, measured in the same run):

    python scripts/bench_emulator.py --schedule cublas_split_k_4 --schedule "schedule:promote_every=128"
"""
import argparse
import contextlib
import os
import sys
import time

import torch

import torch_mma_emu as tme
from torch_mma_emu.formats import FLOAT_DTYPES
from torch_mma_emu.cpp import params
from torch_mma_emu.inputs import operands
from torch_mma_emu.registry import ROWS



# An AVX2-only machine, for both sides of the ratio: the emulator's kernels and fp32
# torch.matmul (MKL, oneDNN and ATen's own kernels each have their cap)
AVX2_CAPS = {"MMA_EMU_CPU_ISA": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2",
             "ATEN_CPU_CAPABILITY": "avx2"}


def best_times(fn, reps, sync, budget=2.0):
    """(wall, process CPU time), each the best of reps timed runs after an untimed warm-up;
    one run when the warm-up took more than budget seconds."""
    t = time.perf_counter()
    fn()
    sync()
    warm = time.perf_counter() - t
    ts, cs = [], []
    for _ in range(max(1, reps if warm < budget else 1)):
        t, c = time.perf_counter(), time.process_time()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
        cs.append(time.process_time() - c)
    return min(ts), min(cs)


def best_time(fn, reps, sync, budget=2.0):
    return best_times(fn, reps, sync, budget)[0]


@contextlib.contextmanager
def scalar_path(on):
    old = os.environ.get("MMA_EMU_SCALAR")
    if on:
        os.environ["MMA_EMU_SCALAR"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MMA_EMU_SCALAR", None)
        else:
            os.environ["MMA_EMU_SCALAR"] = old


def cpu_path(spec):
    try:
        return torch.ops.mma_emu._cpu_fast_path(list(params(spec)))
    except (AttributeError, RuntimeError):
        return "?"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="sm90")
    p.add_argument("--format", default="fp16")
    p.add_argument("--out", default=None, help="output format (fp32, fp16, fp64); default: the arch's")
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--shape", default=None, help="MxNxK instead of --size^3, e.g. 4096x4096x1024")
    p.add_argument("--scaling", action="store_true", help="MAC/s at 1 .. os.cpu_count() threads "
                   "(rows: the sm90 fp16 row, or --all / --only)")
    p.add_argument("--thread-counts", default=None, help="with --scaling: e.g. 1,2,4,8")
    p.add_argument("--device", default="cpu")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    p.add_argument("--all", action="store_true", help="one line per registry row")
    p.add_argument("--only", default=None, help="with --all: rows whose 'arch input op' "
                   "contains one of these comma-separated strings")
    p.add_argument("--vs-scalar", action="store_true",
                   help="also time the scalar CPU path (MMA_EMU_SCALAR=1) in the same run")
    p.add_argument("--schedule", action="append", help="also time these schedules (preset "
                   "or 'schedule:...') against the plain chain (repeatable)")
    p.add_argument("--avx2", action="store_true", help="an AVX2-only CPU on this one: caps the "
                   "emulator and torch's matmul alike (re-runs itself with the caps set)")
    args = p.parse_args()
    if args.avx2 and os.environ.get("MKL_ENABLE_INSTRUCTIONS") != "AVX2":
        # the caps are read when MKL / oneDNN / ATen start: set them, then start afresh
        os.environ.update(AVX2_CAPS)
        os.execv(sys.executable, [sys.executable, *sys.argv])
    if args.size < 1 or args.reps < 0 or args.threads < 0:
        p.error("--size must be >= 1, --reps and --threads >= 0")
    try:
        M, N, K = (int(x) for x in args.shape.lower().split("x")) if args.shape else (args.size,) * 3
        counts = ([int(x) for x in args.thread_counts.split(",")] if args.thread_counts
                  else list(range(1, (os.cpu_count() or 1) + 1)))
    except ValueError:
        p.error("--shape is MxNxK (three integers), --thread-counts a comma-separated list")
    if min(M, N, K) < 1 or min(counts) < 1:
        p.error("--shape sizes and --thread-counts must be >= 1")
    args.mnk, args.counts = (M, N, K), counts
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("bench_emulator: --device cuda but torch sees no CUDA device", file=sys.stderr)
        sys.exit(2)
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    where = (f"device {args.device} ({torch.cuda.get_device_name(args.device)}; the reference is "
             "fp32 torch.matmul with TF32 disabled)" if cuda
             else f"{torch.get_num_threads()} CPU threads, device {args.device}")
    n = args.size
    M, N, K = args.mnk
    macs = M * N * K
    shape = f"{n}^3" if not args.shape else f"{M}x{N}x{K}"
    print(f"torch {torch.__version__}, {where}, {shape}, best of {args.reps}")
    if args.avx2:
        print(f"AVX2 caps: {' '.join(f'{k}={v}' for k, v in AVX2_CAPS.items())} (torch's CPU "
              f"capability now {torch.backends.cpu.get_cpu_capability()})")
    if args.all or (args.scaling and args.only):
        specs = [r.first_spec() for r in ROWS]
        if args.only:
            keys = args.only.split(",")
            specs = [s for s in specs
                     if any(k in f"{s.arch} {s.in_format} {s.op}" for k in keys)]
    else:
        try:
            specs = [tme.spec(args.arch, args.format, args.out)]
        except (ValueError, TypeError) as e:
            print(f"bench_emulator: {e}", file=sys.stderr)
            sys.exit(2)
    g = torch.Generator().manual_seed(0)
    A32 = torch.randn(M, K, generator=g).to(args.device)
    B32 = torch.randn(K, N, generator=g).to(args.device)
    if args.scaling and not cuda:
        return bench_scaling(args, specs, A32, B32)
    t_ref = best_time(lambda: torch.matmul(A32, B32), max(args.reps, 3), sync)
    ref = macs / t_ref
    print(f"fp32 torch.matmul: {ref:.3g} MAC/s")
    base = None
    if args.all and not cuda:   # the sm90 fp16 row, the yardstick of the other rows
        kw = operands(tme.spec("sm90", "fp16"), M, N, K, "normal", torch.Generator().manual_seed(1))
        base = macs / best_time(lambda: tme.emulated_mm(**kw), max(args.reps, 3), sync)
        print(f"sm90 fp16 -> fp32 (the '/ sm90' yardstick): {base:.3g} MAC/s")
    # ratio: fp32 torch.matmul's speed over the row's, the matmul timed again beside each row
    # (load on a shared machine drifts); cpu: the same from process CPU time (all threads)
    head = (f"{'arch':7} {'input':13} {'out':5} {'model':42} {'path':13} {'emulated MAC/s':>14}"
            f" {'ratio':>8} {'cpu':>6}")
    if base:
        head += f" {'/ sm90':>7}"
    if args.vs_scalar:
        head += f" {'scalar MAC/s':>13} {'speed-up':>9}"
    print(head)
    for s in specs:
        kw = operands(s, M, N, K, "normal", torch.Generator().manual_seed(1))
        kw = {k: (v.to(args.device) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
        t_emu, c_emu = best_times(lambda: tme.emulated_mm(**kw), args.reps, sync)
        emu = macs / t_emu
        t_ref, c_ref = best_times(lambda: torch.matmul(A32, B32), max(args.reps, 3), sync)
        ref = max(ref, macs / t_ref)
        path = "cuda" if cuda else cpu_path(s)
        model = s.describe()
        if s.passes > 1 or s.c_join == "final":
            model = f"{s.passes}-pass " + model
        line = (f"{s.arch:7} {s.in_format:13} {s.out_format:5} {model[:42]:42} {path:13} "
                f"{emu:14.3g} {ref / emu:7.1f}x {c_emu / max(c_ref, 1e-9):5.1f}x")
        if base:
            line += f" {emu / base:7.2f}"
        if args.vs_scalar and not cuda:
            with scalar_path(True):
                sc = macs / best_time(lambda: tme.emulated_mm(**kw), 1, sync, budget=0.5)
            line += f" {sc:13.3g} {emu / sc:8.1f}x"
        print(line, flush=True)
    if args.schedule:
        bench_schedules(args)


def bench_scaling(args, specs, A32, B32):
    """MAC/s of each row and of fp32 torch.matmul at each thread count (same run, same
    operands); speed-up over one thread and the ratio at the same count."""
    M, N, K = args.mnk
    macs = M * N * K
    kws = [operands(s, M, N, K, "normal", torch.Generator().manual_seed(1)) for s in specs]
    names = ["fp32 torch.matmul"] + [f"{s.arch} {s.in_format}->{s.out_format} {s.op}" for s in specs]
    rates = {c: [] for c in args.counts}
    for c in args.counts:
        torch.set_num_threads(c)
        rates[c].append(macs / best_time(lambda: torch.matmul(A32, B32), max(args.reps, 3),
                                         lambda: None))
        for kw in kws:
            rates[c].append(macs / best_time(lambda: tme.emulated_mm(**kw), args.reps, lambda: None))
    one = rates[args.counts[0]]
    print(f"MAC/s by torch thread count (speed-up over {args.counts[0]} thread(s); "
          "emulation: ratio to fp32 torch.matmul at the same count)")
    print(f"{'':34}" + "".join(f"{str(c) + ' threads':>24}" for c in args.counts))
    for r, name in enumerate(names):
        cells = []
        for c in args.counts:
            v = rates[c][r]
            cell = f"{v:.3g} ({v / one[r]:.2f}x"
            cell += ")" if r == 0 else f", {rates[c][0] / v:.1f}x)"
            cells.append(f"{cell:>24}")
        print(f"{name[:34]:34}" + "".join(cells), flush=True)


def bench_schedules(args):
    """Each schedule's cost over the plain chain's, interleaved in one run.  Reports wall
    time and process CPU time (all threads): on a machine shared with other work the CPU
    time is the steadier measure of what the schedule adds."""
    g = torch.Generator().manual_seed(0)
    n, dev = args.size, args.device
    A = torch.randn(n, n, generator=g).to(dev).to(FLOAT_DTYPES[args.format])
    B = torch.randn(n, n, generator=g).to(dev).to(FLOAT_DTYPES[args.format])
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
