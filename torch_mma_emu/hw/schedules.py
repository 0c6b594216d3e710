"""Confirm or correct the schedule presets on a GPU (docs/schedules.md: none is confirmed
yet): each library call below, and every candidate schedule ranked by the outputs whose bits
it misses against the library's result (torch_mma_emu.schedule_search).

    python scripts/gpu/schedules.py --out $OUT/schedules.md      # on the GPU (sm90)
    python scripts/gpu/schedules.py --stand-in --out /tmp/s.md   # no GPU: a self-test

Calls (fp8 e4m3 and fp16, random N(0, 1) operands, no C):
  torch._scaled_mm(use_fast_accum=False / True), unit scales  -> scaled_mm_precise / _fast_accum
  Triton tl.dot, max_num_imprecise_acc None / 32 / 128         -> triton_fp8_hopper[_imprecise_acc_*]
  torch.mm fp16 -> fp32, small M and N, long K (cuBLAS split-K) -> which split count and order
``--stand-in`` replaces each library call by ``emulated_mm`` with a known schedule on the CPU;
the script then checks that the ranking puts that schedule first with 0 mismatches (exit 1
otherwise), which is what the tests run.  Exit code 0 on the GPU whatever the findings.
"""
from __future__ import annotations

import argparse
import sys
import time

import torch

from .. import files
from ..formats import FLOAT_DTYPES
from ..ops import emulated_mm
from ..registry import DEFAULT_ARCH
from ..schedule import Schedule, preset
from ..schedule_search import candidate_schedules, match_schedules


def cases(K_fp8, K_split):
    """(name, preset or None, in_format, L, M, K, N, kind, option)."""
    out = []
    for K in K_fp8:
        out += [("torch._scaled_mm use_fast_accum=False", "scaled_mm_precise", "fp8_e4m3", 32,
                 128, K, 128, "scaled_mm", False),
                ("torch._scaled_mm use_fast_accum=True", "scaled_mm_fast_accum", "fp8_e4m3", 32,
                 128, K, 128, "scaled_mm", True),
                ("triton fp8 max_num_imprecise_acc=None", "triton_fp8_hopper", "fp8_e4m3", 32,
                 128, K, 128, "triton", None),
                ("triton fp8 max_num_imprecise_acc=32", "triton_fp8_hopper_imprecise_acc_32",
                 "fp8_e4m3", 32, 128, K, 128, "triton", 32),
                ("triton fp8 max_num_imprecise_acc=128", "triton_fp8_hopper_imprecise_acc_128",
                 "fp8_e4m3", 32, 128, K, 128, "triton", 128)]
    for M, K, N in K_split:
        out.append((f"torch.mm fp16 -> fp32 {M}x{K}x{N}", None, "fp16", 16, M, K, N, "matmul",
                    None))
    return out


def library_call(kind, option, A, B):
    """The library's result of A @ B on the GPU (fp32; fp16 for torch.matmul on fp16)."""
    if kind == "scaled_mm":
        one = torch.ones((), device=A.device)
        Bc = B.t().contiguous().t()          # _scaled_mm takes B column-major
        return torch._scaled_mm(A, Bc, scale_a=one, scale_b=one, out_dtype=torch.float32,
                                use_fast_accum=option)
    if kind == "triton":
        from torch_mma_emu.triton_kernels import matmul
        return matmul(A, B, max_num_imprecise_acc=option, block_k=128)
    return torch.mm(A, B, out_dtype=torch.float32)   # cuBLAS, fp32 output: no final rounding


# what the stand-in "library" computes for each kind (a known schedule on the CPU)
STAND_IN = {("scaled_mm", False): Schedule(promote_every=128),
            ("scaled_mm", True): Schedule(),
            ("triton", None): Schedule(),
            ("triton", 32): Schedule(promote_every=32, c_mode="chain"),
            ("triton", 128): Schedule(promote_every=128, c_mode="chain"),
            ("matmul", None): Schedule(split_k=3, reduce="pairwise")}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="schedules.md")
    p.add_argument("--stand-in", action="store_true", help="no GPU: emulated 'library' calls")
    p.add_argument("--arch", default=None, help="emulated arch (default: this GPU's; sm90 "
                   "for --stand-in)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    stand = args.stand_in
    if not stand and not torch.cuda.is_available():
        print("schedules.py: no CUDA device (use --stand-in for the self-test)", file=sys.stderr)
        return 2
    if stand:
        arch, dev = args.arch or DEFAULT_ARCH, "cpu"
        todo = cases((512,), [(16, 512, 16)])
    else:
        from torch_mma_emu.native import device_arch
        arch, dev = args.arch or device_arch(), "cuda"
        todo = cases((512, 4096), [(64, 8192, 64), (32, 16384, 32), (128, 4096, 128)])
    g = torch.Generator().manual_seed(args.seed)
    flag = torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
    lines = [f"# Library schedules against the emulator ({'stand-in' if stand else arch})", "",
             f"torch {torch.__version__}; allow_fp16_reduced_precision_reduction={flag}", "",
             "Each call's result against `emulated_mm(arch=" + arch + ", schedule=...)` for "
             "every candidate schedule (plain chain, split-K 2..16 in both orders and at cuBLAS's "
             "grain with its three merges for torch.mm, promotion "
             "every L * 2^i with C in chain or epilogue); mismatches = outputs whose bits "
             "differ.  'exact' lists every candidate that reproduces the library bit for bit "
             "(some orders coincide at a given K), 'next' the closest other one.", "",
             "| call | K | preset | preset mismatches | candidates |", "|---|---|---|---|---|"]
    failed = 0
    t0 = time.time()
    for name, pre, fmt, L, M, K, N, kind, option in todo:
        dt = FLOAT_DTYPES[fmt]
        A = torch.randn(M, K, generator=g).to(dt)
        B = torch.randn(K, N, generator=g).to(dt)
        # cuBLAS's split-K merges its partials in one of three ways (bitequiv's measurements,
        # docs/schedules.md): rank all three for the torch.mm rows
        merges = ("workspace", "fp16_partials", "fp16_serial") if kind == "matmul" else \
            ("workspace",)
        cands = candidate_schedules(K, L, c_modes=("epilogue", "chain"), merges=merges)
        try:
            if stand:
                D = emulated_mm(A, B, arch=arch, out_dtype=torch.float32,
                                    schedule=STAND_IN[(kind, option)])
            else:
                D = library_call(kind, option, A.to(dev), B.to(dev)).cpu()
        except Exception as e:  # a library call this GPU or torch does not offer
            lines.append(f"| {name} | {K} | {pre or '-'} | not run: {type(e).__name__}: "
                         f"{str(e).splitlines()[0][:120]} | |")
            continue
        kw = dict(arch=arch, out_dtype=torch.float32)
        ranking = match_schedules(D, A, B, candidates=cands, **kw)
        pre_n = "-"
        if pre is not None:  # usually a candidate already; emulated again only if not
            ps = preset(pre)
            found = [n for s, n in ranking if s == ps]
            pre_n = str(found[0] if found else
                        match_schedules(D, A, B, candidates=[ps], **kw)[0][1])
        # every exact candidate (some orders coincide at this K), then the closest other
        exact = [s.describe() for s, n in ranking if n == 0]
        near = next(((s, n) for s, n in ranking if n), None)
        best = ("exact: " + "; ".join(exact) if exact else "none exact") + \
            (f" / next: {near[0].describe()} ({near[1]})" if near else "")
        lines.append(f"| {name} | {K} | {pre or '-'} | {pre_n} | {best} |")
        print(lines[-1], flush=True)
        if stand:
            want = STAND_IN[(kind, option)]
            top = [s for s, n in ranking if n == 0]
            if not any(s == want or s.describe() == want.describe() for s in top):
                failed += 1
                print(f"stand-in: {name}: {want.describe()} not among the exact candidates "
                      f"{[s.describe() for s in top]}", file=sys.stderr)
    lines += ["", f"({time.time() - t0:.0f} s; `python scripts/gpu/schedules.py"
                  f"{' --stand-in' if stand else ''}`)"]
    files.atomic_write(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 1 if failed else 0
