#!/usr/bin/env python
"""The worked example of docs/triton.md: the fused attention kernel (triton_kernels/attention.py)
on the CPU as an H100, an MI300X and an A100 compute it, and in Triton's plain interpreter,
against a float64 reference; then the fp8 GEMM with and without max_num_imprecise_acc.

    python scripts/triton_example.py [--seed 0] [--n 256] [--d 64]
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import torch

import torch_mma_emu.triton as tmt
from torch_mma_emu import triton_kernels as K


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--n", type=int, default=256, help="queries = keys")
    p.add_argument("--d", type=int, default=64, help="head dim")
    args = p.parse_args(argv)
    g = torch.Generator().manual_seed(args.seed)
    q, k, v = (torch.randn(1, args.n, args.d, generator=g).half() for _ in range(3))
    ref = torch.softmax((q.double() @ k.double().transpose(1, 2)) / math.sqrt(args.d), -1) \
        @ v.double()
    runs = {}
    for name, block in (("H100", tmt.emulate("H100")), ("MI300X", tmt.emulate("MI300X")),
                        ("A100", tmt.emulate("A100")), ("interpreter", tmt.interpret())):
        t = time.time()
        with block as b:
            runs[name] = K.attention(q, k, v)
        runs[name + "_s"] = time.time() - t
        runs[name + "_plan"] = "; ".join(b.counts) if b.counts else "NumPy (np.matmul)"
    print(f"attention, 1 head, {args.n} queries x {args.n} keys, head dim {args.d}, fp16, "
          f"seed {args.seed} ({q.numel()} outputs)\n")
    print("| run | tl.dot as | outputs != H100 | max abs diff from H100 | max abs err vs fp64 | "
          "mean abs err vs fp64 | time |")
    print("|---|---|---|---|---|---|---|")
    for name in ("H100", "MI300X", "A100", "interpreter"):
        o = runs[name]
        err = (o.double() - ref).abs()
        print(f"| {name} | {runs[name + '_plan']} | {int((o != runs['H100']).sum())} | "
              f"{float((o.double() - runs['H100'].double()).abs().max()):.3g} | {float(err.max()):.3g} | "
              f"{float(err.mean()):.3g} | {runs[name + '_s']:.1f} s |")
    A = torch.randn(64, 1024, generator=g).to(torch.float8_e4m3fn)
    B = torch.randn(1024, 64, generator=g).to(torch.float8_e4m3fn)
    exact = A.double() @ B.double()
    print("\nfp8 e4m3 GEMM 64 x 1024 x 64 on H100 (block_k = 128):\n")
    print("| max_num_imprecise_acc | tl.dot as | max abs err vs fp64 | mean abs err |")
    print("|---|---|---|---|")
    for imp in (None, 128, 32):
        with tmt.emulate("H100") as b:
            D = K.matmul(A, B, block_k=128, max_num_imprecise_acc=imp)
        err = (D.double() - exact).abs()
        print(f"| {imp} | {'; '.join(b.counts)} | {float(err.max()):.3g} | "
              f"{float(err.mean()):.3g} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
