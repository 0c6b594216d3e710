"""Fit every recorded file of tests/data/hwdata on its first N samples (default 2,000) and
check the best spec on all of them; prints per-file time, the spec, and whether it is the
registry's model of the instruction the index names.  Timings are noisy on a shared machine.

    python scripts/fit_hwdata.py [--first 2000] [FILE ...]
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from torch_mma_emu.probe import search
from torch_mma_emu.probe.fit import fit
from torch_mma_emu.probe.samples import from_arrays, load
from torch_mma_emu.reference.hwdata import spec_for_entry

ROOT = Path(__file__).resolve().parents[1]

HW = ROOT / "tests" / "data" / "hwdata"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--first", type=int, default=2000)
    ap.add_argument("files", nargs="*")
    args = ap.parse_args(argv)
    index = json.loads((HW / "index.json").read_text())
    if args.files:
        index = [e for e in index if e["file"] in args.files or e["file"][:-4] in args.files]
    total, bad_files = 0.0, 0
    for e in index:
        z = np.load(HW / e["file"])
        n = args.first
        s = from_arrays(z["a"][:n], z["b"][:n], z["c"][:n], z["d"][:n], e["in_format"],
                        e["out_dtype"], source=e["file"])
        t0 = time.perf_counter()
        res = fit(s)
        dt = time.perf_counter() - t0
        total += dt
        full = load(HW / e["file"])
        miss = search.mismatches(res.best, full, stop_at=0) if res.best else None
        same = res.best is not None and \
            search.arith_key(res.best) == search.arith_key(spec_for_entry(e))
        ok = miss == 0
        bad_files += not ok
        print(f"{e['file']:28s} {dt:6.1f} s  {len(res.candidates):4d} fit  "
              f"{'-' if res.best is None else res.best.describe()}  "
              f"mismatches on all {len(full)}: {miss}  registry: {'yes' if same else 'no'}",
              flush=True)
    print(f"total {total:.1f} s over {len(index)} files; {bad_files} without a spec "
          f"reproducing every sample")
    return 1 if bad_files else 0


if __name__ == "__main__":
    sys.exit(main())
