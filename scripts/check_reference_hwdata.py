#!/usr/bin/env python
"""Run the pure-Python reference model over ALL recorded hardware samples.

    python scripts/check_reference_hwdata.py [--dir DIR] [--jobs N] [--limit N] [--show N]
                                             [--c-mode chain|epilogue] [FILE ...]

Prints, per file, the number of samples checked and of bit mismatches, and (``--show``) the
first mismatching samples.  Exit status 1 when any sample mismatches.
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from torch_mma_emu.reference import hwdata


def _run(args):
    entry, directory, limit, c_mode = args
    idx = range(min(limit, entry["samples"])) if limit else None
    t0 = time.time()
    n, mism = hwdata.check_file(entry, directory, idx, c_mode=c_mode)
    return entry, n, mism, time.time() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("files", nargs="*", help="file names from index.json (default: all)")
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="samples per file (0: all)")
    ap.add_argument("--show", type=int, default=5, help="mismatches to print per file")
    ap.add_argument("--c-mode", default="chain", choices=("chain", "epilogue"))
    args = ap.parse_args(argv)
    directory = args.dir or hwdata.hwdata_dir()
    if directory is None:
        print("no hwdata directory found (set MMA_EMU_HWDATA)", file=sys.stderr)
        return 2
    entries = hwdata.load_index(directory)
    if args.files:
        entries = [e for e in entries if e["file"] in args.files]
    jobs = [(e, directory, args.limit, args.c_mode) for e in entries]
    total = total_bad = 0
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        for entry, n, mism, dt in ex.map(_run, jobs):
            total += n
            total_bad += len(mism)
            sp = hwdata.spec_for_entry(entry)
            print(f"{entry['file']:28s} {entry['arch']:5s} {sp.describe():45s} "
                  f"checked {n:5d}  mismatches {len(mism):5d}  ({dt:.1f} s)", flush=True)
            for i, got, want in mism[: args.show]:
                print(f"    sample {i}: reference 0x{got:08x}  hardware 0x{want:08x}")
    print(f"TOTAL checked {total}  mismatches {total_bad}")
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())
