#!/usr/bin/env python
"""Split-K changes an output's bits: the "results depend on the batch size" effect.

cuBLAS picks a split-K factor from the problem shape (M, N, K and the GPU), so the same
row of a product can come out with different bits when the batch (M) changes.  Here one
64 x 64 x K product is emulated on one arch with split_k = 1..16 (slices from +0, fp32
workspace, reduced in order, C in the epilogue), and compared with split_k = 1.

    python scripts/exp_split_k.py --out docs/img/split_k.png
"""
import torch

import torch_mma_emu as tme
from torch_mma_emu.schedule import Schedule
from exp_common import figure, norm_err, parser

SPLITS = (1, 2, 3, 4, 5, 6, 8, 12, 16)


def ulp32(x: torch.Tensor) -> torch.Tensor:
    e = torch.floor(torch.log2(x.abs().clamp_min(2.0 ** -126)))
    return torch.exp2(e - 23)


def main():
    p = parser(__doc__, size=64)
    p.add_argument("--k", type=int, default=4096)
    args = p.parse_args()
    g = torch.Generator().manual_seed(0)
    n, K = args.size, args.k
    series = {}
    print(f"{args.arch}, {n}x{n}x{K}, C ~ N(0,1) in the epilogue; vs split_k = 1")
    print(f"{'input':6} {'split_k':>7} {'outputs changed':>16} {'D[0,0] - D1[0,0] (ulp)':>24} "
          f"{'||D - exact|| / ||exact||':>26}")
    for fmt, dt in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        A = torch.randn(n, K, generator=g).to(dt)
        B = torch.randn(K, n, generator=g).to(dt)
        C = torch.randn(n, n, generator=g)
        exact = A.double() @ B.double() + C.double()
        D1 = tme.emulated_mm(A, B, C, arch=args.arch, schedule=Schedule(c_mode="epilogue"))
        rows = []
        for s in SPLITS:
            D = tme.emulated_mm(A, B, C, arch=args.arch,
                                schedule=Schedule(split_k=s, c_mode="epilogue"))
            changed = (D.view(torch.int32) != D1.view(torch.int32)).float().mean().item()
            off = ((D[0, 0] - D1[0, 0]) / ulp32(D1[0, 0])).item()
            err = norm_err(D, exact)
            rows.append((s, changed, off, err))
            print(f"{fmt:6} {s:7d} {changed:16.1%} {off:24.0f} {err:26.3e}")
        series[fmt] = rows
    if args.out:
        with figure(args.out, 1, 2, figsize=(10, 3.8)) as (a0, a1):
            for fmt, rows in series.items():
                a0.plot([r[0] for r in rows], [r[2] for r in rows], "o-", label=fmt)
                a1.plot([r[0] for r in rows], [100 * r[1] for r in rows], "o-", label=fmt)
            a0.set_xlabel("split_k")
            a0.set_ylabel("D[0,0] - D[0,0](split_k=1)  [fp32 ulp]")
            a1.set_xlabel("split_k")
            a1.set_ylabel("outputs with other bits than split_k=1 [%]")
            a0.set_title(f"emulated {args.arch}, {n}x{n}x{K}: one output", fontsize=9)
            a1.set_title("all outputs", fontsize=9)
            a0.legend()


if __name__ == "__main__":
    main()
