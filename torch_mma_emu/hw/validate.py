"""Live validation on a CUDA GPU: the emulator against this GPU's own matrix units (the
command line of scripts/validate_hw.py; the parts are the modules beside this one).

On a GPU machine with 10-minute commands, run it in parts (docs/hardware/RUNBOOK.md):

    bash scripts/gpu/steps.sh env build smoke             # build once, smoke test each kind
    python scripts/validate_hw.py --parts identity --out $OUT --report $OUT/H200.md
    python scripts/validate_hw.py --parts native --resume $OUT/results.json ...
    python scripts/validate_hw.py --render a.json b.json --report docs/hardware/H200.md

Part 1  CUDA kernel == CPU kernel, bit for bit, for every registry entry (default >= 1e6
        outputs per entry over the three input families of seed 003 section 3.1.4, plus a
        batched, strided, broadcast case and the epilogue mode).
Part 2  for every input format this GPU has: each instruction kernel (wgmma, mma.sync
        m16n8k8/k16/k32), the Triton kernel and cuBLAS against the emulator (default >= 1e6
        outputs per format and path).  Each instruction kernel is compared with the model of
        the instruction that runs (``native.instruction_spec``: a registry row naming it, or
        the arch's default with L = the instruction's K; the warp-level fp8 mma.sync of
        Hopper has "no model yet" until the registry has its row, and its single-instruction
        samples are archived for ``probe.fit``).  Triton runs K zero-padded to whole 16-deep
        blocks (``triton_kernels.run_k``): the emulator runs the same padded chain.  cuBLAS
        adds C in its epilogue (c_mode="epilogue"); it has no e5m2 x e5m2 GEMM (skipped).
        Where a path differs, the first failing call is re-run under other hypotheses
        (the other c_mode, other archs' models, other L / F, tf32 operands rounded instead of
        truncated, split-K with an fp32 reduction) and the report names those that
        reproduce it bit for bit.
Part 3  emulated multiply-adds per second on the GPU (fp16 -> fp32, --bench-arch, --bench-size)
        beside fp32 torch.matmul without TF32, measured in the same run.

Results survive a command that is cut off: the log is flushed line by line, results.json and
the report are rewritten after every row, and the inputs of mismatching outputs go into ONE
archive (``--archive``, a tar of .pt files, capped in size; ``hw.archive.read_archive`` loads
it).  ``--resume results.json`` skips the rows a previous run finished.  ``--device cpu`` is a dry run of part 1 (CPU against CPU)
and of the report, for testing this script without a GPU.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import torch

from .. import native
from ..registry import DEFAULT_ARCH
from .archive import Archive
from .bench import part_bench
from .identity import part_identity
from .paths import part_native
from .report import gpu_key, native_failures, report
from .results import State, load_results

PARTS = ("identity", "native", "bench")
# the folder holding the torch_mma_emu package (the checkout): a child process imports the
# same package from it, reports default to its docs/hardware/
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def wgmma_built(dev) -> str:
    """Whether the wgmma kernels run, asked in a child process (a broken kernel must not
    poison this process's CUDA context)."""
    if torch.cuda.get_device_capability(dev)[0] != 9:
        return "n/a"
    import subprocess
    code = ("import torch; from torch_mma_emu import native\n"
            "A = torch.zeros(64, 16, dtype=torch.float16, device='cuda')\n"
            "B = torch.zeros(16, 8, dtype=torch.float16, device='cuda')\n"
            "native.mma_instruction(A, B, instruction='wgmma.m64n8k16'); torch.cuda.synchronize()")
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=300, env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep +
                                                 os.environ.get("PYTHONPATH", "")))
    except subprocess.TimeoutExpired:
        return "no (the check timed out)"
    if r.returncode == 0:
        return "yes"
    last = (r.stderr.strip().splitlines() or ["?"])[-1]
    return f"no ({last[:100]})"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/mma_emu_validate"),
                   help="folder for validate.log, results.json and mismatches.tar")
    p.add_argument("--report", default=None, help="markdown report (default docs/hardware/<GPU>.md)")
    p.add_argument("--archive", default=None, help="tar of mismatching inputs (default "
                   "<out>/mismatches.tar; 'none' saves nothing)")
    p.add_argument("--arch", default=None, help="emulated arch (default: this GPU's)")
    p.add_argument("--parts", default=",".join(PARTS), help="comma list of identity, native, bench")
    p.add_argument("--formats", default=None, help="part 2: only these input formats (fp16, "
                   "fp8_e4m3, ... or full names such as fp16->fp16)")
    p.add_argument("--paths", default=None, help="part 2: only these paths (prefixes: mma, "
                   "mma:wgmma, triton, cublas)")
    p.add_argument("--exclude-paths", default=None, help="part 2: not these paths (prefixes; "
                   "e.g. a kind whose smoke test broke the CUDA context)")
    p.add_argument("--resume", nargs="*", default=None, metavar="JSON",
                   help="results.json of earlier runs: keep their finished rows, run the rest")
    p.add_argument("--render", nargs="+", default=None, metavar="JSON",
                   help="no run: merge these results.json files into --report (no GPU needed)")
    p.add_argument("--outputs", type=int, default=1_000_000, help="outputs per registry entry (part 1)")
    p.add_argument("--native-outputs", type=int, default=1_000_000, help="outputs per format and path (part 2)")
    p.add_argument("--native-size", type=int, default=256, help="M = N of the part 2 products (multiple of 64)")
    p.add_argument("--native-k", type=int, default=256, help="largest K of part 2")
    p.add_argument("--time-limit", type=float, default=480.0,
                   help="seconds for parts 1 and 2 together (each row stops when it is spent)")
    p.add_argument("--quick", action="store_true", help="small counts (about a minute)")
    p.add_argument("--skip-identity", action="store_true")
    p.add_argument("--skip-native", action="store_true")
    p.add_argument("--skip-bench", action="store_true")
    p.add_argument("--bench-arch", default=DEFAULT_ARCH)
    p.add_argument("--bench-size", type=int, default=4096)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--device", default="cuda", help="'cpu': a dry run of part 1 (CPU against "
                   "CPU) and of the report, for testing this script without a GPU")
    args = p.parse_args(argv)
    parts = [x for x in args.parts.split(",") if x]
    unknown = [x for x in parts if x not in PARTS]
    if unknown:
        print(f"validate_hw: --parts: unknown {', '.join(unknown)}; allowed: {', '.join(PARTS)}",
              file=sys.stderr)
        sys.exit(2)
    for name in ("identity", "native", "bench"):
        if getattr(args, f"skip_{name}") and name in parts:
            parts.remove(name)
    args.parts = parts
    if args.quick:
        args.outputs, args.native_outputs, args.bench_size = 20_000, 100_000, 2048
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.render:
        if not args.report:
            print("validate_hw: --render needs --report PATH", file=sys.stderr)
            return 2
        try:
            r = load_results(args.render)
        except (OSError, ValueError, KeyError) as e:
            print(f"validate_hw: cannot read {' '.join(args.render)}: {e}", file=sys.stderr)
            return 2
        report(args.report, r["meta"], r["identity"], r["native"], r["bench"])
        print(f"report: {args.report}")
        return 0
    if args.device == "cpu":
        return dry_run(args)
    if not torch.cuda.is_available():
        print("validate_hw: no CUDA device; nothing to validate (--device cpu: dry run)",
              file=sys.stderr)
        return 2
    if not hasattr(torch.ops.mma_emu, "_mma_instr"):
        print("validate_hw: torch_mma_emu was built without its CUDA kernels; build first:\n"
              "  bash scripts/gpu/steps.sh env build   (or TORCH_CUDA_ARCH_LIST=9.0a bash "
              "scripts/build_ext.sh)",
              file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    arch = args.arch or native.device_arch(dev)
    os.makedirs(args.out, exist_ok=True)
    logf = open(os.path.join(args.out, "validate.log"), "a", buffering=1)

    def log(msg):
        print(msg, flush=True)
        logf.write(msg + "\n")
        logf.flush()

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
    path = args.report or os.path.join(ROOT, "docs", "hardware", f"{gpu_key(name)}.md")
    state = State(meta, args.out, path)
    prev = load_results(args.resume) if args.resume else None
    if prev:
        state.identity, state.native, state.bench = prev["identity"], prev["native"], prev["bench"]
        meta["command"] = prev["meta"].get("command", "") + "; " + meta["command"]
    archive = Archive(None if args.archive == "none"
                      else args.archive or os.path.join(args.out, "mismatches.tar"))
    log(f"validate_hw: {name} ({arch}), torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"triton {tv}, wgmma built: {meta['wgmma kernels built']}, parts {','.join(args.parts)}")
    state.save()
    t0 = time.time()
    if "identity" in args.parts:
        share = args.time_limit * (0.5 if "native" in args.parts else 1.0)
        previous = {r["spec"]: r for r in (prev or {}).get("identity") or []}
        ident = part_identity(args, dev, share, log, state, archive, previous)
        log(f"[identity] {sum(r['outputs'] for r in ident):,} outputs, "
            f"{sum(r['mismatches'] for r in ident)} mismatches over {len(ident)} registry entries")
    if "native" in args.parts:
        previous = {(r["format"], r["path"]): r for r in (prev or {}).get("native") or []}
        part_native(args, dev, arch, args.time_limit - (time.time() - t0), log, state, archive,
                    previous)
    if "bench" in args.parts:
        state.bench = part_bench(args, dev)
        b = state.bench
        log(f"[bench] {b['arch']} fp16->fp32 {b['size']}^3: emulated {b['emulated_macs']:.3g} "
            f"MAC/s, fp32 torch.matmul (TF32 off) {b['fp32_matmul_macs']:.3g} MAC/s, "
            f"ratio {b['ratio']:.1f}x")
    state.save()
    log(f"report: {path}; results.json, validate.log and mismatches.tar under {args.out}")
    bad = sum(r["mismatches"] + (r["status"].startswith("error")) for r in state.identity or [])
    return 1 if bad or native_failures(state.native) else 0


def dry_run(args) -> int:
    """Part 1 with the CPU kernel on both sides, and the report: tests this script anywhere."""
    os.makedirs(args.out, exist_ok=True)
    meta = dict(gpu="CPU dry run", arch=args.arch or DEFAULT_ARCH, torch=torch.__version__, cuda="",
                triton="", driver="", date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                command="dry run")
    meta["wgmma kernels built"] = "n/a"
    state = State(meta, args.out, args.report or os.path.join(args.out, "dry_run.md"))
    archive = Archive(None if args.archive == "none"
                      else args.archive or os.path.join(args.out, "mismatches.tar"))
    ident = part_identity(args, torch.device("cpu"), args.time_limit, print, state, archive)
    return 1 if sum(r["mismatches"] for r in ident) else 0


def _driver() -> str:
    try:
        import subprocess
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 else ""
    except Exception:  # noqa: BLE001
        return ""

