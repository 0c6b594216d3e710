"""CPU time of gfx942's TR-/GTR-FDPA with MMA-Sim's final renormalisation (tr_renorm=True, the
registry's choice, docs/model.md 6.5) against the plain finish (tr_renorm=False), measured in
the same run: 512^3 emulated_mm, fp16 and fp8 (e4m3fnuz), best of 3, on each CPU instruction
set this machine has (MMA_EMU_CPU_ISA).  Prints seconds and the ratio renorm / plain.

    python scripts/bench_tr_renorm.py [--n 512] [--reps 3]
"""
import argparse
import os

import torch

import torch_mma_emu as tme
from torch_mma_emu.timing import best_of


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    n = a.n
    g = torch.Generator().manual_seed(0)
    cases = [("fp16", torch.float16), ("fp8", torch.float8_e4m3fnuz)]
    print(f"gfx942 {n}^3 emulated_mm, best of {a.reps} (seconds; ratio = renorm / plain)")
    for isa in ("avx512", "avx2"):
        os.environ["MMA_EMU_CPU_ISA"] = isa
        for name, dt in cases:
            A = torch.randn(n, n, generator=g).to(dt)
            B = torch.randn(n, n, generator=g).to(dt)
            C = torch.randn(n, n, generator=g)
            fmt = "fp16" if name == "fp16" else "fp8_e4m3fnuz"
            renorm = tme.spec("gfx942", fmt)
            assert renorm.tr_renorm
            plain = renorm.replace(tr_renorm=False)
            path = torch.ops.mma_emu._cpu_fast_path(list(tme.cpp.params(renorm)))
            tr = best_of(lambda: tme.emulated_mm(A, B, C, arch=renorm), a.reps, warm_up=True)
            tp = best_of(lambda: tme.emulated_mm(A, B, C, arch=plain), a.reps, warm_up=True)
            print(f"{isa:7s} {name:5s} path={path:11s} renorm {tr:7.4f}  plain {tp:7.4f}  "
                  f"ratio {tr / tp:5.2f}")
    os.environ.pop("MMA_EMU_CPU_ISA", None)


if __name__ == "__main__":
    main()
