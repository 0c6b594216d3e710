#!/usr/bin/env python
"""Fused addmm against mm + add (torch.compile's fused addmm differing from eager).

Three ways to compute ``A @ B + bias`` with fp16 tensors on one arch, emulated bit for bit:

* ``fused``: one kernel, the bias added to the fp32 accumulator in the epilogue, one
  rounding to fp16 (cuBLAS addmm; an Inductor/Triton mm template with a fused epilogue):
  ``Schedule(c_mode="epilogue")``;
* ``bias in chain``: the bias seeds the accumulator (``acc = bias; acc = tl.dot(a, b, acc)``):
  the plain chain with C;
* ``mm + add``: the product rounded to fp16 first, then an fp16 addition (eager ``x @ w + b``,
  or a graph that does not fuse): two roundings.

    python scripts/exp_fused_addmm.py --out docs/img/fused_addmm.png
"""
import torch

import torch_mma_emu as tme
from torch_mma_emu.schedule import Schedule
from exp_common import figure, norm_err, parser


def main():
    p = parser(__doc__, size=64)
    args = p.parse_args()
    g = torch.Generator().manual_seed(0)
    ks = [64, 256, 1024, 4096]
    n = args.size
    res = []
    print(f"{args.arch} fp16 -> fp16 output, {n}x{n}xK, bias ~ N(0,1) (fp16), vs fused")
    print(f"{'K':>6} {'bias in chain differs':>22} {'mm + add differs':>18} "
          f"{'err fused':>10} {'err chain':>10} {'err mm+add':>11}  (||D - exact|| / ||exact||)")
    for K in ks:
        A = torch.randn(n, K, generator=g).half()
        B = (torch.randn(K, n, generator=g) / K ** 0.5).half()
        bias = torch.randn(n, generator=g).half()
        C = bias.float().expand(n, n)
        exact = A.double() @ B.double() + bias.double()
        fused = tme.emulated_mm(A, B, C, arch=args.arch,
                                schedule=Schedule(c_mode="epilogue")).half()
        chain = tme.emulated_mm(A, B, C, arch=args.arch).half()
        mm_add = tme.emulated_mm(A, B, arch=args.arch).half() + bias
        d_chain = (chain.view(torch.int16) != fused.view(torch.int16)).float().mean().item()
        d_add = (mm_add.view(torch.int16) != fused.view(torch.int16)).float().mean().item()
        errs = [norm_err(x, exact) for x in (fused, chain, mm_add)]
        res.append((K, d_chain, d_add))
        print(f"{K:6d} {d_chain:22.1%} {d_add:18.1%} {errs[0]:10.2e} {errs[1]:10.2e} "
              f"{errs[2]:11.2e}")
    if args.out:
        with figure(args.out, figsize=(6, 3.8)) as ax:
            ax.plot([r[0] for r in res], [100 * r[1] for r in res], "o-", label="bias in chain")
            ax.plot([r[0] for r in res], [100 * r[2] for r in res], "o-", label="mm + add")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("K")
            ax.set_ylabel("fp16 outputs with other bits than fused [%]")
            ax.set_title(f"emulated {args.arch}: A @ B + bias in fp16", fontsize=9)
            ax.legend()


if __name__ == "__main__":
    main()
