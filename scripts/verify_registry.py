#!/usr/bin/env python
"""Closed loop on every registry entry: probe the emulated unit, infer a spec from its
features, verify the spec bit for bit on N random inputs (seed 003's three families).

    python scripts/verify_registry.py                 # all entries, 100000 inputs each
    python scripts/verify_registry.py -n 10000 --arch sm90
    python scripts/verify_registry.py --dedupe        # infer once per distinct arithmetic

Prints one line per entry and the totals; exits 1 on any mismatch or failed inference.
"""
import argparse
import json
import sys
import time
from pathlib import Path

from torch_mma_emu import registry
from torch_mma_emu.probe import search
from torch_mma_emu.probe.infer import infer
from torch_mma_emu.probe.verify import verify


def label(sp) -> str:
    fmt = sp.in_format if sp.in_format_b is None else f"{sp.in_format},{sp.in_format_b}"
    sc = f" {sp.scale_format}/{sp.block_size}" if sp.scaled else ""
    return f"{sp.arch} {fmt}->{sp.out_format}{sc} [{sp.instruction}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=100_000, help="random inputs per entry")
    ap.add_argument("--arch", help="only this arch")
    ap.add_argument("--dedupe", action="store_true",
                    help="infer once per distinct arithmetic (entries differing only in arch "
                         "or instruction name share the inference); verify every entry")
    ap.add_argument("--checks", type=int, default=3000,
                    help="random inputs inside infer's closed loop")
    ap.add_argument("--json", help="write the per-entry results here")
    args = ap.parse_args()
    entries = registry.all_specs()
    if args.arch:
        arch = registry.canonical_arch(args.arch)
        entries = [e for e in entries if e.arch == arch]
    cache = {}
    rows, total_bad, failures = [], 0, 0
    t_all = time.perf_counter()
    for i, entry in enumerate(entries):
        t0 = time.perf_counter()
        key = search.arith_key(entry)
        try:
            inf = cache.get(key) if args.dedupe else None
            if inf is None:
                inf = infer(entry, checks=args.checks, seed=i)
                cache[key] = inf
            t_inf = time.perf_counter() - t0
            res = verify(inf.spec, entry, args.n, seed=1000 + i)
        except Exception as e:  # report and go on: one broken entry must not hide others
            failures += 1
            print(f"FAIL {label(entry)}: {type(e).__name__}: {e}", flush=True)
            rows.append({"entry": label(entry), "error": str(e)})
            continue
        same = search.arith_key(inf.spec) == key
        total_bad += res.mismatches
        status = "ok  " if res.ok else "BAD "
        print(f"{status}{label(entry):70s} -> {inf.spec.describe():48s} "
              f"{'= registry' if same else '!= registry'}  {res.mismatches}/{res.n} "
              f"infer {t_inf:.1f}s verify {res.seconds:.1f}s", flush=True)
        if not res.ok:
            print("     " + res.counterexample.describe(), flush=True)
        rows.append({"entry": label(entry), "inferred": inf.spec.to_string(),
                     "equals_registry": same, "n": res.n, "mismatches": res.mismatches,
                     "infer_s": round(t_inf, 3), "verify_s": round(res.seconds, 3)})
    dt = time.perf_counter() - t_all
    n_ok = sum(1 for r in rows if r.get("mismatches") == 0)
    print(f"\n{len(entries)} entries, {args.n} random inputs each: {n_ok} verified with zero "
          f"mismatches, {total_bad} mismatches in total, {failures} failed inferences; "
          f"{sum(r.get('equals_registry', False) for r in rows)} inferred specs equal the "
          f"registry's arithmetic; {dt:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if total_bad == 0 and failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
