#!/usr/bin/env python
"""Live validation on a CUDA GPU: the emulator against this GPU's own matrix units.

One command on a bare GPU machine (builds the extension for this GPU, runs this script and the
GPU tests; about 10 minutes in all):

    bash scripts/validate_hw.sh [options of this script]

or by hand:

    TORCH_CUDA_ARCH_LIST=9.0a bash scripts/build_ext.sh      # 9.0a: wgmma; 8.0 / 8.9 elsewhere
    python scripts/validate_hw.py --out /tmp/validate          # writes docs/hardware/<GPU>.md

Part 1  CUDA kernel == CPU kernel, bit for bit, for every registry entry (default >= 1e6
        outputs per entry over the three input families of seed 003 section 3.1.4, plus a
        batched, strided, broadcast case and the epilogue mode).
Part 2  for every input format this GPU has: the instruction kernel (wgmma / mma.sync), the
        Triton kernel and cuBLAS against ``emulated_mm(arch=<this GPU>)`` (default >= 1e6
        outputs per format and path).  cuBLAS adds C in its epilogue, so it is compared with
        c_mode="epilogue"; the others with the chain.  Where a path differs, the first
        failing call is re-run under other hypotheses (the other c_mode, other archs' models,
        split-K with an fp32 reduction) and the report says which, if any, explains it.
        Mismatching inputs are saved under --out as .pt files.
Part 3  emulated multiply-adds per second on the GPU (fp16 -> fp32, --bench-arch, --bench-size)
        beside fp32 torch.matmul without TF32, measured in the same run.

--quick runs everything with small counts (about a minute); --time-limit stops each part
early (the report then says so).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import sys
import time
import traceback
import zlib

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch_mma_emu as tme  # noqa: E402
from torch_mma_emu import native  # noqa: E402
from torch_mma_emu.inputs import FAMILIES, operands  # noqa: E402
from torch_mma_emu.registry import all_specs  # noqa: E402

INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
OUT_NAME = {torch.float32: "fp32", torch.float16: "fp16", torch.float64: "fp64"}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(INT[t.element_size()])


def spec_id(s) -> str:
    b = f"x{s.in_format_b}" if s.in_format_b else ""
    sc = f" {s.scale_format}/{s.block_size}" if s.scaled else ""
    return f"{s.arch} {s.in_format}{b}->{s.out_format}{sc} [{s.instruction}]"


class Clock:
    def __init__(self, limit: float):
        self.start = time.time()
        self.limit = limit

    def left(self) -> float:
        return self.limit - (time.time() - self.start)


def to_dev(kw: dict, dev) -> dict:
    return {k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}


def compare(x: torch.Tensor, y: torch.Tensor):
    """(number of differing bit patterns, index of the first, how many differ only in a NaN payload)."""
    bx, by = bits(x.cpu()), bits(y.cpu())
    diff = bx != by
    n = int(diff.sum())
    first = tuple(diff.nonzero()[0].tolist()) if n else None
    xf, yf = x.cpu().float(), y.cpu().float()
    nan_only = int((diff & torch.isnan(xf) & torch.isnan(yf)).sum()) if n else 0
    return n, first, nan_only


# ---------------------------------------------------------------------------------------
# Part 1: CUDA kernel == CPU kernel
# ---------------------------------------------------------------------------------------

def part_identity(args, dev, budget: float, log):
    clock = Clock(budget)
    rows = []
    specs = all_specs()
    per_family = max(1, math.ceil(args.outputs / len(FAMILIES)))
    side = max(1, int(math.ceil(math.sqrt(per_family))))
    for idx, spec in enumerate(specs):
        row = dict(spec=spec_id(spec), outputs=0, mismatches=0, first=None, status="ok")
        if clock.left() <= 0:
            row["status"] = "not run (time limit)"
            rows.append(row)
            continue
        try:
            K = 2 * spec.L + spec.L // 2 + 1
            cases = []
            for fam in FAMILIES:
                g = torch.Generator().manual_seed(zlib.crc32(f"{spec.to_string()}|{fam}".encode()))
                cases.append((operands(spec, side, side, K, fam, g), "chain"))
            # batched, transposed A, broadcast C, and the epilogue mode
            g = torch.Generator().manual_seed(zlib.crc32(spec.to_string().encode()))
            kw = operands(spec, 9, 11, K, "bitstream", g, batch=(3,))
            kw["A"] = kw["A"].mT.contiguous().mT
            kw["C"] = kw["C"][:1, :1]
            cases.append((kw, "chain"))
            cases.append((operands(spec, 33, 17, K, "normal", g), "epilogue"))
            for kw, mode in cases:
                cpu = tme.emulated_mm(**kw, c_mode=mode)
                gpu = tme.emulated_mm(**to_dev(kw, dev), c_mode=mode)
                n, first, _ = compare(cpu, gpu)
                row["outputs"] += cpu.numel()
                row["mismatches"] += n
                if n and row["first"] is None:
                    row["first"] = dict(index=first, cpu=hex(int(bits(cpu)[first]) & 0xFFFFFFFF),
                                        cuda=hex(int(bits(gpu.cpu())[first]) & 0xFFFFFFFF), c_mode=mode)
                    if args.out:
                        path = os.path.join(args.out, f"identity_{idx:03d}.pt")
                        torch.save(dict(spec=spec.to_string(), kw=kw, c_mode=mode, cpu=cpu,
                                        cuda=gpu.cpu()), path)
                        row["saved"] = path
        except Exception as e:  # noqa: BLE001  (report, go on)
            row["status"] = f"error: {type(e).__name__}: {e}"
            log(traceback.format_exc())
        rows.append(row)
        if idx % 25 == 24:
            log(f"[identity] {idx + 1}/{len(specs)} entries, {clock.left():.0f} s left")
        if row["mismatches"] or row["status"] != "ok":
            log(f"[identity] {row['spec']}: {row['mismatches']} mismatches / {row['outputs']} "
                f"({row['status']})")
    return rows


# ---------------------------------------------------------------------------------------
# Part 2: native paths against emulated_mm(arch=<this GPU>)
# ---------------------------------------------------------------------------------------

def format_cases(cap):
    cases = []
    if cap >= (8, 0):
        cases += [("fp16", "fp16", torch.float32), ("fp16", "fp16", torch.float16),
                  ("bf16", "bf16", torch.float32), ("tf32", "tf32", torch.float32)]
    if cap >= (8, 9):
        for a in ("fp8_e4m3", "fp8_e5m2"):
            for b in ("fp8_e4m3", "fp8_e5m2"):
                for o in (torch.float32, torch.float16):
                    cases.append((a, b, o))
    cases += [("fp32", "fp32", torch.float32), ("fp64", "fp64", torch.float64)]
    return cases


def paths_for(fa, fb, odt, dev, have_triton):
    paths = []
    if fa in native._TYPE_CODE:
        for ins in native.instructions_for(fa, dev):
            if odt == torch.float16 and fa == "bf16":
                continue
            paths.append(f"mma:{ins}")
    if have_triton and fa != "fp64":
        paths.append("triton")
    paths.append("cublas")
    if fa.startswith("fp8"):
        paths.append("cublas-promote")
    return paths


def run_native(path, A, B, C, fmt, odt):
    if path.startswith("mma:"):
        return native.mma_instruction(A, B, C, in_format=fmt, out_dtype=odt, instruction=path[4:])
    if path == "triton":
        return native.native_mm(A, B, C, backend="triton", in_format=fmt, out_dtype=odt)
    return native.native_mm(A, B, C, backend="cublas", in_format=fmt, out_dtype=odt,
                            fp8_fast_accum=path == "cublas")


def emulate(spec, kw, dev, c_mode, C="given"):
    k = to_dev(kw, dev)
    if C is None:
        k["C"] = None
    return tme.emulated_mm(**k, c_mode=c_mode)


def split_k(spec, kw, dev, s, tree):
    """cuBLAS-style split-K hypothesis: s partial chains from 0, fp32 reduction, C added last."""
    A, B, C = kw["A"].to(dev), kw["B"].to(dev), kw["C"].to(dev)
    K = A.shape[-1]
    if K % s:
        return None
    step = K // s
    wide = torch.float64 if C.dtype == torch.float64 else torch.float32
    parts = []
    for i in range(s):
        sub = dict(kw, A=A[..., i * step:(i + 1) * step], B=B[..., i * step:(i + 1) * step, :], C=None)
        parts.append(tme.emulated_mm(**sub).to(wide))
    while len(parts) > 1:
        if tree:
            parts = [parts[i] + parts[i + 1] if i + 1 < len(parts) else parts[i]
                     for i in range(0, len(parts), 2)]
        else:
            parts = [parts[0] + parts[1]] + parts[2:]
    return (parts[0] + C.to(wide)).to(C.dtype)


def diagnose(path, spec, kw, native_out, dev, c_mode, arch, odt):
    """Which hypothesis reproduces the native result on these inputs (0 mismatches)."""
    found = []
    other = "chain" if c_mode == "epilogue" else "epilogue"
    try:
        if compare(native_out, emulate(spec, kw, dev, other))[0] == 0:
            found.append(f"c_mode={other}")
    except Exception:  # noqa: BLE001
        pass
    fa, fb = spec.in_format, spec.in_format_b or spec.in_format
    for a in ("sm70", "sm75", "sm80", "sm89", "sm90", "sm100", "sm120"):
        if a == arch:
            continue
        try:
            s2 = tme.spec(a, fa, odt, in_format_b=fb)
        except (ValueError, TypeError):
            continue
        for mode in (c_mode, other):
            try:
                if compare(native_out, emulate(s2, dict(kw, arch=s2), dev, mode))[0] == 0:
                    found.append(f"{a} model ({s2.describe()}), c_mode={mode}")
                    break
            except Exception:  # noqa: BLE001
                pass
    if path.startswith("cublas"):
        for s in (2, 3, 4, 8, 16):
            for tree in (False, True):
                try:
                    r = split_k(spec, kw, dev, s, tree)
                    if r is not None and compare(native_out, r)[0] == 0:
                        found.append(f"split-K into {s}, {'pairwise' if tree else 'sequential'} "
                                     "fp32 reduction, C added last")
                except Exception:  # noqa: BLE001
                    pass
    return found


def part_native(args, dev, arch, budget: float, log):
    clock = Clock(budget)
    try:
        import triton  # noqa: F401
        have_triton = True
    except ImportError:
        have_triton = False
        log("[native] triton is not installed: the Triton path is skipped")
    cap = torch.cuda.get_device_capability(dev)
    rows = []
    M = N = args.native_size
    for fa, fb, odt in format_cases(cap):
        try:
            spec = tme.spec(arch, fa, odt, in_format_b=fb)
        except (ValueError, TypeError) as e:
            rows.append(dict(format=f"{fa}x{fb}->{OUT_NAME[odt]}", path="-", status=f"no model: {e}"))
            continue
        fmt = fa if fa == fb else f"{fa},{fb}"
        ik = 32 if fa.startswith("fp8") else 16 if fa in ("fp16", "bf16") else 8
        ks = [ik, 4 * ik, max(8 * ik, args.native_k)]
        for path in paths_for(fa, fb, odt, dev, have_triton):
            c_mode = "epilogue" if path.startswith("cublas") else "chain"
            row = dict(format=f"{fa}x{fb}->{OUT_NAME[odt]}" if fa != fb else f"{fa}->{OUT_NAME[odt]}",
                       path=path, c_mode=c_mode, outputs=0, mismatches=0, nan_payload_only=0,
                       by_family={f: 0 for f in FAMILIES}, status="ok", explained=None)
            if clock.left() <= 0:
                row["status"] = "not run (time limit)"
                rows.append(row)
                continue
            calls = 0
            first_fail = None
            try:
                while row["outputs"] < args.native_outputs and clock.left() > 0:
                    fam = FAMILIES[calls % len(FAMILIES)]
                    K = ks[(calls // len(FAMILIES)) % len(ks)]
                    g = torch.Generator().manual_seed(zlib.crc32(f"{arch}{fmt}{odt}{path}{calls}".encode()))
                    kw = operands(spec, M, N, K, fam, g)
                    A, B, C = kw["A"].to(dev), kw["B"].to(dev), kw["C"].to(dev)
                    got = run_native(path, A, B, C, fmt, odt)
                    want = emulate(spec, kw, dev, c_mode)
                    n, first, nan_only = compare(got, want)
                    row["outputs"] += want.numel()
                    row["mismatches"] += n
                    row["nan_payload_only"] += nan_only
                    row["by_family"][fam] += n
                    if n and first_fail is None:
                        first_fail = (kw, got, fam, K, first, want)
                    calls += 1
            except Exception as e:  # noqa: BLE001
                row["status"] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
                log(f"[native] {row['format']} {path}: {row['status']}")
            if first_fail is not None:
                kw, got, fam, K, first, want = first_fail
                row["first"] = dict(family=fam, K=K, index=first,
                                    native=hex(int(bits(got.cpu())[first]) & 0xFFFFFFFFFFFFFFFF),
                                    emulated=hex(int(bits(want.cpu())[first]) & 0xFFFFFFFFFFFFFFFF))
                if args.out:
                    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{row['format']}_{path}_{fam}_K{K}")
                    p = os.path.join(args.out, f"native_{name}.pt")
                    torch.save(dict(spec=spec.to_string(), kw=kw, path=path, c_mode=c_mode,
                                    native=got.cpu(), emulated=want.cpu()), p)
                    row["saved"] = p
                if clock.left() > 0:
                    row["explained"] = diagnose(path, spec, kw, got, dev, c_mode, arch, odt)
            rows.append(row)
            log(f"[native] {row['format']:24} {path:28} {row['mismatches']:>9} / {row['outputs']:<9} "
                f"{row['status']}" + (f"  explained by: {row['explained']}" if row.get("explained") else ""))
    return rows


# ---------------------------------------------------------------------------------------
# Part 3: speed
# ---------------------------------------------------------------------------------------

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
    t_emu = best_time(lambda: tme.emulated_mm(A, B, arch=args.bench_arch), args.reps)
    with native._tf32(False):  # the reference: fp32 torch.matmul without TF32
        t_ref = best_time(lambda: torch.matmul(A32, B32), args.reps)
    macs = n ** 3
    return dict(arch=args.bench_arch, size=n, model=tme.spec(args.bench_arch, "fp16").describe(),
                emulated_macs=macs / t_emu, fp32_matmul_macs=macs / t_ref,
                ratio=(macs / t_ref) / (macs / t_emu), t_emu=t_emu, t_ref=t_ref)


# ---------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------

def gpu_key(name: str) -> str:
    m = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", name)
    return m.group(1) if m else re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")


def wgmma_built(dev) -> str:
    if torch.cuda.get_device_capability(dev)[0] != 9:
        return "n/a"
    try:
        A = torch.zeros(64, 16, dtype=torch.float16, device=dev)
        B = torch.zeros(16, 8, dtype=torch.float16, device=dev)
        native.mma_instruction(A, B, instruction="wgmma.m64n8k16")
        return "yes"
    except Exception as e:  # noqa: BLE001
        return f"no ({str(e).splitlines()[0][:100]})"


def report(path, meta, ident, nat, bench):
    L = [f"# Hardware validation: {meta['gpu']}", "",
         f"Generated by `scripts/validate_hw.py` on {meta['date']} ({meta['elapsed']:.0f} s).", "",
         "| | |", "|---|---|"]
    for k in ("gpu", "arch", "torch", "cuda", "triton", "driver", "wgmma kernels built", "command"):
        L.append(f"| {k} | {meta.get(k, '')} |")
    L += ["", "## 1. CUDA kernel against the CPU kernel (bit for bit)", ""]
    if ident is None:
        L.append("Not run (`--skip-identity`).")
    else:
        tot = sum(r["outputs"] for r in ident)
        bad = [r for r in ident if r["mismatches"] or r["status"] != "ok"]
        mn = min((r["outputs"] for r in ident if r["status"] == "ok"), default=0)
        L.append(f"{len(ident)} registry entries, {tot:,} outputs in all (at least {mn:,} per entry "
                 f"that ran), three input families, batched/strided/broadcast and epilogue cases: "
                 f"**{sum(r['mismatches'] for r in ident)} mismatches**, "
                 f"{len(bad)} entries with a mismatch, an error or not run.")
        if bad:
            L += ["", "| registry entry | outputs | mismatches | status | first |", "|---|---|---|---|---|"]
            for r in bad:
                L.append(f"| {r['spec']} | {r['outputs']} | {r['mismatches']} | {r['status']} | {r.get('first') or ''} |")
    L += ["", f"## 2. Native paths against `emulated_mm(arch=\"{meta['arch']}\")`", "",
          "`mma:*` is the instruction kernel (one instruction kind, accumulator fed back along K), "
          "`triton` the Triton chain (`torch_mma_emu.triton_kernels`), `cublas` torch's cuBLAS "
          "call (C added in the epilogue, so compared with `c_mode=\"epilogue\"`), "
          "`cublas-promote` cuBLAS fp8 without fast accumulation. Inputs: the three families of "
          "seed 003 section 3.1.4 (normal, cancel, bitstream with NaN/Inf/subnormals), K = one "
          "instruction, four instructions and more.", ""]
    if nat is None:
        L.append("Not run (`--skip-native`).")
    else:
        L += ["| format | path | c_mode | outputs | mismatches | normal / cancel / bitstream | NaN payload only | explained by | status |",
              "|---|---|---|---|---|---|---|---|---|"]
        for r in nat:
            if r.get("path") == "-":
                L.append(f"| {r['format']} | - | | | | | | | {r['status']} |")
                continue
            fams = " / ".join(str(r["by_family"][f]) for f in FAMILIES)
            ex = "; ".join(r["explained"]) if r.get("explained") else ("none found" if r["mismatches"] else "")
            L.append(f"| {r['format']} | {r['path']} | {r['c_mode']} | {r['outputs']:,} | {r['mismatches']:,} | "
                     f"{fams} | {r['nan_payload_only']} | {ex} | {r['status']} |")
        L += ["", "Mismatching inputs were saved as `.pt` files (A, B, C, native and emulated "
              "outputs) under the `--out` folder of the run; first mismatches:", ""]
        for r in nat:
            if r.get("first"):
                L.append(f"- {r['format']} {r['path']}: {r['first']}")
    L += ["", "## 3. Speed", ""]
    if bench is None:
        L.append("Not run (`--skip-bench`).")
    else:
        L += ["| arch | model | size | emulated MAC/s | fp32 torch.matmul MAC/s (TF32 off) | ratio |",
              "|---|---|---|---|---|---|",
              f"| {bench['arch']} | {bench['model']} | {bench['size']}^3 | {bench['emulated_macs']:.3g} | "
              f"{bench['fp32_matmul_macs']:.3g} | {bench['ratio']:.1f}x |"]
    L.append("")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(L))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/mma_emu_validate"),
                   help="folder for mismatching inputs and results.json")
    p.add_argument("--report", default=None, help="markdown report (default docs/hardware/<GPU>.md)")
    p.add_argument("--arch", default=None, help="emulated arch (default: this GPU's)")
    p.add_argument("--outputs", type=int, default=1_000_000, help="outputs per registry entry (part 1)")
    p.add_argument("--native-outputs", type=int, default=1_000_000, help="outputs per format and path (part 2)")
    p.add_argument("--native-size", type=int, default=256, help="M = N of the part 2 products (multiple of 64)")
    p.add_argument("--native-k", type=int, default=256, help="largest K of part 2")
    p.add_argument("--time-limit", type=float, default=540.0, help="seconds for parts 1 and 2 together")
    p.add_argument("--quick", action="store_true", help="small counts (about a minute)")
    p.add_argument("--skip-identity", action="store_true")
    p.add_argument("--skip-native", action="store_true")
    p.add_argument("--skip-bench", action="store_true")
    p.add_argument("--bench-arch", default="sm90")
    p.add_argument("--bench-size", type=int, default=4096)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--device", default="cuda", help="'cpu': a dry run of part 1 (CPU against "
                   "CPU) and of the report, for testing this script without a GPU")
    args = p.parse_args(argv)
    if args.quick:
        args.outputs, args.native_outputs, args.bench_size = 20_000, 100_000, 2048
    if args.device == "cpu":
        return dry_run(args)
    if not torch.cuda.is_available():
        print("validate_hw: no CUDA device; nothing to validate (--device cpu: dry run)",
              file=sys.stderr)
        return 2
    if not hasattr(torch.ops.mma_emu, "_mma_instr"):
        print("validate_hw: torch_mma_emu was built without its CUDA kernels; build first:\n"
              "  TORCH_CUDA_ARCH_LIST=9.0a bash scripts/build_ext.sh   (8.0 / 8.9 on A100 / L40S)",
              file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    arch = args.arch or native.device_arch(dev)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    logf = open(os.path.join(args.out, "validate.log"), "w")

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")

    try:
        import triton
        tv = triton.__version__
    except ImportError:
        tv = "not installed"
    meta = dict(gpu=name, arch=arch, torch=torch.__version__, cuda=torch.version.cuda, triton=tv,
                driver=_driver(), date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                command="python scripts/validate_hw.py " + " ".join(sys.argv[1:] if argv is None else argv),
                python=platform.python_version())
    meta["wgmma kernels built"] = wgmma_built(dev)
    log(f"validate_hw: {name} ({arch}), torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"triton {tv}, wgmma built: {meta['wgmma kernels built']}")
    ident = nat = bench = None
    if not args.skip_identity:
        share = args.time_limit * (0.5 if not args.skip_native else 1.0)
        ident = part_identity(args, dev, share, log)
        log(f"[identity] {sum(r['outputs'] for r in ident):,} outputs, "
            f"{sum(r['mismatches'] for r in ident)} mismatches over {len(ident)} registry entries")
    if not args.skip_native:
        nat = part_native(args, dev, arch, args.time_limit - (time.time() - t0), log)
    if not args.skip_bench:
        bench = part_bench(args, dev)
        log(f"[bench] {bench['arch']} fp16->fp32 {bench['size']}^3: emulated {bench['emulated_macs']:.3g} "
            f"MAC/s, fp32 torch.matmul (TF32 off) {bench['fp32_matmul_macs']:.3g} MAC/s, "
            f"ratio {bench['ratio']:.1f}x")
    meta["elapsed"] = time.time() - t0
    path = args.report or os.path.join(ROOT, "docs", "hardware", f"{gpu_key(name)}.md")
    report(path, meta, ident, nat, bench)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(dict(meta=meta, identity=ident, native=nat, bench=bench), f, indent=1, default=str)
    log(f"report: {path}; inputs and results.json under {args.out}")
    bad = (sum(r["mismatches"] for r in ident) if ident else 0)
    return 1 if bad else 0


def dry_run(args) -> int:
    """Part 1 with the CPU kernel on both sides, and the report: tests this script anywhere."""
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    ident = part_identity(args, torch.device("cpu"), args.time_limit, print)
    meta = dict(gpu="CPU dry run", arch=args.arch or "sm90", torch=torch.__version__, cuda="",
                triton="", driver="", date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                command="dry run", elapsed=time.time() - t0)
    meta["wgmma kernels built"] = "n/a"
    report(args.report or os.path.join(args.out, "dry_run.md"), meta, ident, None, None)
    return 1 if sum(r["mismatches"] for r in ident) else 0


def _driver() -> str:
    try:
        import subprocess
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 else ""
    except Exception:  # noqa: BLE001
        return ""


if __name__ == "__main__":
    sys.exit(main())
