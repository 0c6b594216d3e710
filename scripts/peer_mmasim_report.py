"""The numbers of docs/model.md section 6 and README's validation section: every instruction
both mmasim and we model (tests/peer_mmasim.py), ``--n`` samples per kind, our default model
and (``--alternatives``) our model with each corner's old choice (ALTERNATIVES).  Prints one
line per instruction with differences, then the totals: samples, differences, explained per
corner, unexplained.

    python scripts/peer_mmasim_report.py [--n 50] [--seed 1] [--alternatives]
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
    args = ap.parse_args(argv)
    try:
        import peer_mmasim as pm
    except ImportError as e:
        print(f"mmasim is not installed (pip install -r requirements-peers.txt torch==<yours>): {e}")
        return 2
    t0 = time.time()
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


if __name__ == "__main__":
    sys.exit(main())
