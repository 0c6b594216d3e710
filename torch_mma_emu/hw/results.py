"""Results that survive a cut-off command: ``State`` writes results.json and the report after
every row, ``load_results`` merges the files of several runs (``--resume``, ``--render``)."""
from __future__ import annotations

import json
import os
import time

from .common import atomic_write
from .report import report


class State:
    """meta, the rows of each part, and where they are written after every row."""

    def __init__(self, meta: dict, out: str | None, report_path: str | None):
        self.meta, self.out, self.report_path = meta, out, report_path
        self.identity: list | None = None
        self.native: list | None = None
        self.bench: dict | None = None
        self.t0 = time.time()

    def save(self) -> None:
        self.meta["elapsed"] = self.meta.get("elapsed_before", 0.0) + time.time() - self.t0
        if self.out:
            atomic_write(os.path.join(self.out, "results.json"),
                         json.dumps(dict(meta=self.meta, identity=self.identity,
                                         native=self.native, bench=self.bench),
                                    indent=1, default=str))
        if self.report_path:
            report(self.report_path, self.meta, self.identity, self.native, self.bench)


def load_results(paths: list[str]) -> dict:
    """Merge results.json files of several runs (parts split over commands): later files
    replace rows of earlier ones with the same key."""
    meta, ident, nat, bench = {}, {}, {}, None
    cmds = []
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        m = r.get("meta") or {}
        cmds.append(m.get("command", ""))
        meta = {**meta, **m}
        for row in r.get("identity") or []:
            ident[row["spec"]] = row
        for row in r.get("native") or []:
            nat[(row["format"], row["path"])] = row
        bench = r.get("bench") or bench
    meta["command"] = "; ".join(c for c in cmds if c)
    return dict(meta=meta, identity=list(ident.values()) or None,
                native=list(nat.values()) or None, bench=bench)


def done(row: dict) -> bool:
    """Finished rows are kept by --resume; a row that raised is kept too (re-running it could
    poison the CUDA context again), rows not run are run."""
    return not str(row.get("status", "")).startswith("not run")
