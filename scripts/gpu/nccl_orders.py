"""The GPU step for issue 40: does real NCCL sum in the order ``torch_mma_emu.order.nccl``
models?  Needs a machine with 2 or more GPUs (a one-GPU lease records why it cannot run).

    python scripts/gpu/nccl_orders.py --out DIR [--world-sizes 2,3,4] [--numel 3000]
    python scripts/gpu/nccl_orders.py --compare DIR/nccl_orders.json     # on any machine

For each pinned setting (algorithm, protocol, channel count: ``NCCL_ALGO``, ``NCCL_PROTO``,
``NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS``, written into the environment the ranks
inherit) it reveals the all-reduce's trees with FPRev over ``backend="nccl"``
(``fprev.reveal_allreduce``), keeps NCCL's own ``Channel`` / ``Trees`` log lines
(``NCCL_DEBUG=INFO`` into ``NCCL_DEBUG_FILE``) and writes both to ``nccl_orders.json``.
``--compare`` rebuilds the model's ranges from the recorded log lines and settings
(``order.nccl.ring_allreduce`` / ``tree_allreduce``) and prints, per case, whether the
revealed trees equal them; exit 1 when one differs.  The comparison runs on the CPU, so a
recording made on a GPU machine is checked here.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile

CASES = [  # (algo, proto, channels): what users pin to make a run reproducible
    ("ring", "simple", 1), ("ring", "ll", 2), ("ring", "ll128", 2), ("ring", "simple", 4),
    ("tree", "simple", 2), ("tree", "ll", 2),
]
_NCCL_NAMES = {"ring": "Ring", "tree": "Tree", "simple": "Simple", "ll": "LL",
               "ll128": "LL128"}


def model_ranges(case: dict):
    """The modelled ranges of a recorded case (its settings and NCCL's log lines)."""
    from torch_mma_emu.order import nccl
    ws, numel, ch = case["world_size"], case["numel"], case["channels"]
    if case["algo"] == "ring":
        rings = case.get("rings") or None
        return nccl.ring_allreduce(ws, numel, "float32", proto=case["proto"], nchannels=ch,
                                   rings=rings)
    trees = nccl.parse_trees(case["tree_lines"]) if case.get("tree_lines") else None
    return nccl.tree_allreduce(ws, numel, "float32", proto=case["proto"], nchannels=ch,
                               trees=trees)


def compare(record: dict) -> int:
    """Print one line per case; the number of cases whose revealed trees differ."""
    from torch_mma_emu.order.ranges import Ranges
    bad = 0
    for case in record["cases"]:
        name = f"{case['algo']}/{case['proto']}/{case['channels']}ch ws={case['world_size']}"
        if "error" in case:
            print(f"{name}: not run ({case['error']})")
            continue
        got = Ranges.from_list(case["revealed"])
        want = model_ranges(case)
        same = [(s, e, t) for s, e, t in got] == [(s, e, t) for s, e, t in want]
        bad += not same
        print(f"{name}: {'equal' if same else 'DIFFERENT'} ({len(got)} revealed ranges, "
              f"{len(want)} modelled)")
    return bad


def _log_lines(folder: str) -> tuple:
    """The rings (``Channel cc/NN : 0 a b ...``, by channel) and the ``Trees`` lines of
    every rank's NCCL debug file."""
    from torch_mma_emu.order import nccl
    rings, trees = {}, []
    for path in sorted(glob.glob(os.path.join(folder, "nccl.*"))):
        with open(path, errors="replace") as f:
            for line in f:
                if " Channel " in line and " : " in line and "via" not in line:
                    try:
                        ring = nccl.parse_ring(line.split("NCCL INFO", 1)[-1])
                    except ValueError:
                        continue
                    c = int(line.split("Channel", 1)[1].split("/")[0])
                    rings.setdefault(c, ring)
                elif "Trees [" in line:
                    trees.append(line.split("NCCL INFO", 1)[-1].strip())
    return [rings[c] for c in sorted(rings)], trees


def record(out: str, world_sizes: list, numel: int) -> dict:
    import torch
    from torch_mma_emu import fprev
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    cases = []
    for ws in world_sizes:
        for algo, proto, ch in CASES:
            case = dict(algo=algo, proto=proto, channels=ch, world_size=ws, numel=numel)
            if n < ws:
                case["error"] = f"needs {ws} GPUs, this machine has {n}"
                cases.append(case)
                continue
            with tempfile.TemporaryDirectory() as logs:
                env = {"NCCL_ALGO": f"allreduce:{_NCCL_NAMES[algo]}",
                       "NCCL_PROTO": _NCCL_NAMES[proto], "NCCL_MIN_NCHANNELS": str(ch),
                       "NCCL_MAX_NCHANNELS": str(ch), "NCCL_DEBUG": "INFO",
                       "NCCL_DEBUG_SUBSYS": "INIT,GRAPH",
                       "NCCL_DEBUG_FILE": os.path.join(logs, "nccl.%h.%p")}
                old = {k: os.environ.get(k) for k in env}
                os.environ.update(env)
                try:
                    res = fprev.reveal_allreduce(ws, backend="nccl", numel=numel, checks=2)
                    case["revealed"] = res.to_dict()["ranges"]
                except Exception as e:          # recorded, the next case still runs
                    case["error"] = f"{type(e).__name__}: {e}"[:300]
                finally:
                    for k, v in old.items():
                        os.environ.pop(k, None) if v is None else os.environ.update({k: v})
                case["rings"], case["tree_lines"] = _log_lines(logs)
            cases.append(case)
            _write(out, dict(nccl=_nccl_version(), cases=cases))   # as it goes
    rec = dict(nccl=_nccl_version(), cases=cases)
    _write(out, rec)
    return rec


def _nccl_version() -> str:
    try:
        import torch
        return ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as e:                     # no CUDA / NCCL here
        return f"unknown ({type(e).__name__})"


def _write(out: str, rec: dict) -> None:
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "nccl_orders.json"), "w") as f:
        json.dump(rec, f, indent=1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="folder for nccl_orders.json (records on this machine)")
    p.add_argument("--compare", help="a recorded nccl_orders.json to check against the model")
    p.add_argument("--world-sizes", default="2,3,4")
    p.add_argument("--numel", type=int, default=3000)
    a = p.parse_args(argv)
    try:
        if a.compare:
            with open(a.compare) as f:
                rec = json.load(f)
            if not isinstance(rec, dict) or not isinstance(rec.get("cases"), list):
                raise ValueError(f"{a.compare}: not a nccl_orders.json record")
            print(f"NCCL {rec.get('nccl')}")
            return 1 if compare(rec) else 0
        if not a.out:
            raise ValueError("give --out DIR (record) or --compare FILE")
        sizes = [int(w) for w in a.world_sizes.split(",")]
        if any(w < 2 for w in sizes) or a.numel < 1:
            raise ValueError("world sizes must be >= 2 and --numel positive")
        rec = record(a.out, sizes, a.numel)
        return 1 if compare(rec) else 0
    except (ValueError, OSError) as e:
        print(f"nccl_orders: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
