"""Build and run kern_bench.cpp (the FDPA vector kernels alone, no torch): ns per 16
multiply-adds per registry row, best of reps, with a hash of the outputs (equal hashes:
equal bits between builds).  FMA / FTZ-AddMul rows time the value kernels; `--isa avx512w`
forces their 512-bit variants (`avx512` takes the CPU's choice).  Development tool for docs/cpu_fast.md's per-row counts.

    python scripts/kern_bench/run.py --only "sm90 fp16,sm80 bf16" --isa avx512
"""
import argparse
import hashlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from torch_mma_emu.registry import ROWS  # noqa: E402
from torch_mma_emu.cpp import params  # noqa: E402

SOURCES = [ROOT / "scripts/kern_bench/kern_bench.cpp"] + [
    ROOT / "csrc/cpu" / f for f in ("fdpa_engine.cpp", "eligible.cpp", "kern_avx2.cpp",
                                    "kern_avx512.cpp", "kern_neon.cpp")]
FLAGS = ["-std=c++20", "-O3", "-ffp-contract=off", "-fno-fast-math"]  # setup.py's default


def build():
    srcs = SOURCES + sorted((ROOT / "csrc").rglob("*.h")) + sorted((ROOT / "csrc").rglob("*.inc"))
    h = hashlib.sha256(" ".join(FLAGS).encode())
    for p in srcs:
        h.update(p.read_bytes())
    exe = ROOT / "build/native" / f"kern_bench-{h.hexdigest()[:16]}"
    if not exe.exists():
        exe.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["g++", *FLAGS, "-o", str(exe), *map(str, SOURCES)], check=True)
    return exe


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="sm90 fp16")
    ap.add_argument("--isa", default="avx512")
    ap.add_argument("--shape", default="128x256x1024")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--exe", default=None, help="a kern_bench binary built before (compare builds)")
    args = ap.parse_args()
    want = [w.strip().split() for w in args.only.split(",")]
    lines = []
    for r in ROWS:
        s = r.first_spec()
        for w in want:
            if s.arch == w[0] and s.in_format == w[1] and (len(w) < 3 or s.out_format == w[2]):
                name = f"{s.arch}-{s.op}-{s.in_format}-{s.out_format}-L{s.L}" + (f"-{s.passes}pass" if s.multipass else "")
                name += f"-P{s.P}" if s.P else ""  # FTZ-AddMul's group
                lines.append(f"{name} {' '.join(map(str, params(s)))}\n")
    M, N, K = args.shape.split("x")
    r = subprocess.run([args.exe or str(build()), args.isa, M, N, K, str(args.reps)], input="".join(lines),
                       capture_output=True, text=True, check=True)
    print(r.stdout, end="")


if __name__ == "__main__":
    main()
