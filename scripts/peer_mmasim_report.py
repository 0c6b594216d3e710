"""The numbers of docs/model.md section 6 and README's validation section: every instruction
both mmasim and we model (tests/peer_mmasim.py), ``--n`` samples per kind, our default model
and (``--alternatives``) our model with each corner's old choice (ALTERNATIVES).  Prints one
line per instruction with differences, then the totals: samples, differences, explained per
corner, unexplained.

    python scripts/peer_mmasim_report.py [--n 50] [--seed 1] [--alternatives]

``--ftz-k N`` (docs/model.md 6.8) instead runs N tiny bf16 samples per CDNA2 bf16 instruction
and K (every multiple of P up to twice the instruction's K) against mmasim's ``dpa`` given the
whole K (what a bare comparison does) and mmasim run per instruction on zero padded operands.
"""
from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50, help="samples per kind and instruction")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--alternatives", action="store_true",
                    help="also run each corner's alternative Spec field")
    ap.add_argument("--ftz-k", type=int, default=0, metavar="N",
                    help="CDNA2 bf16 tiny samples at K other than the instruction's (6.8)")
    args = ap.parse_args(argv)
    try:
        import peer_mmasim as pm
    except ImportError as e:
        print(f"mmasim is not installed (pip install -r requirements-peers.txt torch==<yours>): {e}")
        return 2
    t0 = time.time()
    if args.ftz_k:
        _ftz_k(pm, args.ftz_k, args.seed)
        print(f"({time.time() - t0:.0f} s)")
        return 0
    runs = {"default": collections.Counter()}
    for case in pm.cases():
        r = pm.run_case(case, args.n, seed=args.seed)
        variants = [("default", r)]
        if args.alternatives:
            variants += [(name, pm.with_alternative(r, [name])) for name in pm.ALTERNATIVES
                         if pm.APPLIES[name](case)]
        for label, v in variants:
            tot = runs.setdefault(label, collections.Counter())
            got = pm.classify(v)
            tot["instructions"] += 1
            tot["samples"] += len(v.ours)
            tot["differences"] += int(pm.differs(v).sum())
            tot.update(got)
            if got and label == "default":
                print(f"{case.name} -> {case.arch} {case.instruction}: {got}")
    for label, tot in runs.items():
        print(f"[{label}] " + ", ".join(f"{k} {v:,}" for k, v in tot.items()))
    print(f"({time.time() - t0:.0f} s)")
    return 0


def _ftz_k(pm, n, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    tot = collections.Counter(dict.fromkeys(
        ("samples", "vs dpa(whole K)", "of which +0 against -0", "vs per instruction"), 0))
    for case in pm.cases():
        if not pm.APPLIES["gfx90a_flush"](case) or case.fa != "bf16":   # CDNA2 FTZ-AddMul
            continue
        op = pm.mmasim_op(case)
        P = pm.our_spec(case, None).P
        for K in range(P, 2 * op.k + 1, P):
            A, B, C = pm.tiny_bf16_ftz_samples(n, K, g)
            ours = pm._bits(pm.emulate(case, A, B, C))
            theirs = pm._bits(op.dpa(A, B, C))
            dw = ours != theirs
            whole = int(dw.sum())
            zeros = (ours & 0x7FFFFFFF == 0) & (theirs & 0x7FFFFFFF == 0)
            tot["of which +0 against -0"] += int((dw & zeros).sum())
            per = int((ours != pm._bits(pm.mmasim_per_instruction(op, A, B, C))).sum())
            tot["samples"] += n
            tot["vs dpa(whole K)"] += whole
            tot["vs per instruction"] += per
            if whole or per:
                print(f"{case.name} K={K}: differs from dpa(whole K) in {whole}, "
                      f"from mmasim per instruction in {per}")
    print("[ftz-k] " + ", ".join(f"{k} {v:,}" for k, v in tot.items()))


if __name__ == "__main__":
    sys.exit(main())
