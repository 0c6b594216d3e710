#!/usr/bin/env python
"""Time Triton kernels under torch_mma_emu.triton.emulate against the plain interpreter in the
same run: the GEMM written as the chain (``acc = tl.dot(a, b, acc)``) and as
``acc += tl.dot(a, b)`` (which the emulation folds into the chain, docs/triton.md), and the
fp32 sum-of-products GEMM, and the fused attention (its row max / row sum run in the
compiled order under emulate).  Prints seconds (best of --repeat, after one warm-up) and ratios
to the plain interpreter's chain GEMM.

    python scripts/bench_triton.py                    # 512^3 fp16, 64 x 64 tiles, sm90
    python scripts/bench_triton.py --size 256 --arch gfx942
"""
from __future__ import annotations

import argparse
import sys
import warnings

import torch

import torch_mma_emu.triton as tmt
from torch_mma_emu import triton_kernels as K
from torch_mma_emu.timing import best_of


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", type=int, default=512, help="M = N = K")
    p.add_argument("--arch", default="sm90")
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args(argv)
    n = args.size
    g = torch.Generator().manual_seed(0)
    A, B = (torch.randn(n, n, generator=g).half() for _ in range(2))
    A32, B32 = (torch.randn(n // 2, n // 2, generator=g) for _ in range(2))
    Q = torch.randn(2, n // 2, 64, generator=g).half()
    runs = [("gemm fp16 chain", lambda: K.matmul(A, B, block_m=64, block_n=64, block_k=64)),
            ("gemm fp16 acc += tl.dot", lambda: K.matmul(A, B, block_m=64, block_n=64,
                                                         block_k=64, dot_form="plus_eq")),
            (f"sum_matmul fp32 {n // 2}^3", lambda: K.sum_matmul(A32, B32)),
            # row max / row sum of the dot's result: reductions over the wgmma layout
            (f"attention fp16 2x{n // 2}x64", lambda: K.attention(Q, Q, Q))]
    warnings.filterwarnings("ignore", ".*is autotuned over")
    rows = []
    for label, block in (("interpreter", tmt.interpret), (args.arch, lambda: tmt.emulate(
            args.arch))):
        for name, fn in runs:
            with block():
                rows.append((name, label, best_of(fn, args.repeat, warm_up=True)))
    base = rows[0][2]
    print(f"# Triton under emulate({args.arch!r}) vs the plain interpreter, {n}^3, "
          f"torch {torch.__version__}, best of {args.repeat}")
    print(f"{'kernel':28s} {'run':12s} {'seconds':>8s} {'/ interp chain':>15s}")
    for name, label, t in rows:
        print(f"{name:28s} {label:12s} {t:8.2f} {t / base:15.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
