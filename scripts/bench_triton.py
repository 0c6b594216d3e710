#!/usr/bin/env python
"""Time Triton kernels under torch_mma_emu.triton.emulate against the plain interpreter in the
same run: the GEMM written as the chain (``acc = tl.dot(a, b, acc)``) and as
``acc += tl.dot(a, b)`` (which the emulation folds into the chain, docs/triton.md), and the
fp32 sum-of-products GEMM; a fused attention forward (triton_kernels.attention: L = 1024,
d = 64, 8 heads, fp16, the online softmax's exp2 and contractions included) and, when fla-core
is installed, fla's ``chunk_gla`` forward as shipped (bf16).  Prints seconds (best of
--repeat, after one warm-up) and, per kernel, the ratio to the same kernel in the plain
interpreter (issue 30's target for attention and chunk_gla: within 3x).

    python scripts/bench_triton.py                    # everything, sm90
    python scripts/bench_triton.py --only attention,fla --repeat 1
    python scripts/bench_triton.py --size 256 --arch gfx942 --only gemm
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
    p.add_argument("--only", default="gemm,attention,fla",
                   help="comma-separated: gemm, attention, fla")
    p.add_argument("--seq", type=int, default=1024, help="attention / chunk_gla length")
    args = p.parse_args(argv)
    only = set(args.only.split(","))
    if not only <= {"gemm", "attention", "fla"}:
        print(f"bench_triton: --only takes gemm, attention, fla; got {args.only}",
              file=sys.stderr)
        return 2
    n = args.size
    g = torch.Generator().manual_seed(0)
    A, B = (torch.randn(n, n, generator=g).half() for _ in range(2))
    A32, B32 = (torch.randn(n // 2, n // 2, generator=g) for _ in range(2))
    runs = [] if "gemm" not in only else [
        ("gemm fp16 chain", lambda: K.matmul(A, B, block_m=64, block_n=64, block_k=64)),
        ("gemm fp16 acc += tl.dot", lambda: K.matmul(A, B, block_m=64, block_n=64,
                                                     block_k=64, dot_form="plus_eq")),
        (f"sum_matmul fp32 {n // 2}^3", lambda: K.sum_matmul(A32, B32))]
    L = args.seq
    if "attention" in only:
        q, k, v = (torch.randn(8, L, 64, generator=g).half() for _ in range(3))
        runs.append((f"attention fp16 8x{L}x64", lambda: K.attention(q, k, v)))
    if "fla" in only:
        try:
            from fla.ops.gla import chunk_gla
        except Exception as e:      # noqa: BLE001 - optional (requirements-triton-zoo.txt)
            print(f"# fla chunk_gla skipped: {type(e).__name__}: {e}")
        else:
            fq, fk, fv = (torch.randn(1, L, 4, 64, generator=g).bfloat16() for _ in range(3))
            fg = torch.nn.functional.logsigmoid(torch.randn(1, L, 4, 64, generator=g)).bfloat16()
            runs.append((f"fla chunk_gla bf16 1x{L}x4x64", lambda: chunk_gla(fq, fk, fv, fg)))
    warnings.filterwarnings("ignore", ".*is autotuned over")
    warnings.filterwarnings("ignore", ".*tl.atomic")
    rows = []
    for label, block in (("interpreter", tmt.interpret), (args.arch, lambda: tmt.emulate(
            args.arch))):
        for name, fn in runs:
            with block():
                rows.append((name, label, best_of(fn, args.repeat, warm_up=True)))
    base = {name: t for name, label, t in rows if label == "interpreter"}
    print(f"# Triton under emulate({args.arch!r}) vs the plain interpreter, gemm {n}^3, "
          f"torch {torch.__version__}, best of {args.repeat}")
    print(f"{'kernel':32s} {'run':12s} {'seconds':>8s} {'/ interp (same kernel)':>23s}")
    for name, label, t in rows:
        print(f"{name:32s} {label:12s} {t:8.2f} {t / base[name]:23.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
