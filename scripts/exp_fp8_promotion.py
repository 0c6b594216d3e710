#!/usr/bin/env python
"""DeepSeek-V3's observation, emulated: Hopper fp8 GEMMs without promotion lose accuracy
with K ("maximum relative error of nearly 2%" at K = 4096, DeepSeek-V3 report 3.3.2),
promotion into fp32 every 128 elements fixes it.

    python scripts/exp_fp8_promotion.py --out docs/img/fp8_promotion.png

Two operand families, M = N = 32: e4m3 values of U(0, 1) (positive: no cancellation, so
the relative error of every output measures the accumulator; the worst case) - max over
outputs of |D - exact| / |exact|; and of N(0, 1) - the norm-wise ||D - exact|| / ||exact||
(element-wise relative errors are unbounded next to cancellation).  Reference: the
exact product of the rounded operands (fp64 sums of exact fp8 products; their rounding
error is ~1e-16 relative, far below what is measured).  Schedules: the plain wgmma chain
(Triton's default, _scaled_mm(use_fast_accum=True)), Triton max_num_imprecise_acc=32,
promotion every 128 (DeepSeek-V3, CUTLASS).
"""
import torch

import torch_mma_emu as tme
from torch_mma_emu.schedule import Schedule
from exp_common import figure, norm_err, parser

SCHEDULES = {"no promotion (wgmma chain)": None,
             "promote every 32 (Triton max_num_imprecise_acc=32)": Schedule(promote_every=32),
             "promote every 128 (DeepSeek-V3, CUTLASS)": Schedule(promote_every=128)}


def measure(dist, K, size, arch, g):
    if dist == "uniform":
        A, B = torch.rand(size, K, generator=g), torch.rand(K, size, generator=g)
    else:
        A, B = torch.randn(size, K, generator=g), torch.randn(K, size, generator=g)
    A, B = A.to(torch.float8_e4m3fn), B.to(torch.float8_e4m3fn)
    exact = A.double() @ B.double()
    out = []
    for s in SCHEDULES.values():
        D = tme.emulated_mm(A, B, arch=arch, schedule=s).double()
        if dist == "uniform":
            out.append(((D - exact).abs() / exact.abs()).max().item())
        else:
            out.append(norm_err(D, exact))
    return out


def main():
    p = parser(__doc__, size=32)
    p.add_argument("--kmax", type=int, default=16384)
    args = p.parse_args()
    g = torch.Generator().manual_seed(0)
    ks = [2 ** e for e in range(7, args.kmax.bit_length())]
    dists = {"uniform": "U(0,1): max relative error", "normal": "N(0,1): norm-wise error"}
    res = {d: [] for d in dists}
    print(f"{args.arch} fp8 e4m3 -> fp32, {args.size}x{args.size} outputs")
    for d, what in dists.items():
        print(f"\n{what}")
        print(f"{'K':>6} " + " ".join(f"{n[:26]:>28}" for n in SCHEDULES))
        for K in ks:
            errs = measure(d, K, args.size, args.arch, g)
            res[d].append(errs)
            print(f"{K:6d} " + " ".join(f"{e:28.3e}" for e in errs))
    if args.out:
        with figure(args.out, 1, 2, figsize=(10, 4)) as axes:
            for ax, (d, what) in zip(axes, dists.items()):
                for i, name in enumerate(SCHEDULES):
                    ax.loglog(ks, [r[i] for r in res[d]], "o-", label=name)
                ax.axvline(4096, color="gray", ls=":", lw=1)
                ax.axhline(0.02, color="gray", ls=":", lw=1)
                ax.set_xscale("log", base=2)
                ax.set_xlabel("K")
                ax.set_title(f"{args.arch} fp8 e4m3, {what}", fontsize=9)
            axes[0].legend(fontsize=7)


if __name__ == "__main__":
    main()
