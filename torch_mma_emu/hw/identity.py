"""Part 1: the CUDA kernel against the CPU kernel, bit for bit, for every registry entry."""
from __future__ import annotations

import math
import traceback
import zlib

import torch

from ..inputs import ALL_FAMILIES, operands
from ..ops import emulated_mm
from ..registry import all_specs
from .archive import SAVE_OUTPUTS, Archive, samples
from .common import (Clock, compare, error_status, hexbits, lost_context, not_run, safe_name,
                     spec_id, to_dev)
from .results import State, done


def part_identity(args, dev, budget: float, log, state: State | None = None,
                  archive: Archive | None = None, previous: dict | None = None):
    clock = Clock(budget)
    rows = []
    if state is not None:
        state.identity = rows
    specs = all_specs()
    per_family = max(1, math.ceil(args.outputs / len(ALL_FAMILIES)))
    side = max(1, int(math.ceil(math.sqrt(per_family))))
    poisoned = None
    for idx, spec in enumerate(specs):
        sid = spec_id(spec)
        if previous and sid in previous and done(previous[sid]):
            rows.append(previous[sid])
            continue
        row = dict(spec=sid, outputs=0, mismatches=0, first=None, status="ok")
        why = not_run(poisoned, clock)
        if why:
            row["status"] = why
            rows.append(row)
            continue
        try:
            K = 2 * spec.L + spec.L // 2 + 1
            cases = []
            for fam in ALL_FAMILIES:
                g = torch.Generator().manual_seed(zlib.crc32(f"{spec.to_string()}|{fam}".encode()))
                cases.append((operands(spec, side, side, K, fam, g), "chain", fam))
            # batched, transposed A, broadcast C, and the epilogue mode
            g = torch.Generator().manual_seed(zlib.crc32(spec.to_string().encode()))
            kw = operands(spec, 9, 11, K, "bitstream", g, batch=(3,))
            kw["A"] = kw["A"].mT.contiguous().mT
            kw["C"] = kw["C"][:1, :1]
            cases.append((kw, "chain", "batched"))
            cases.append((operands(spec, 33, 17, K, "normal", g), "epilogue", "normal"))
            for kw, mode, fam in cases:
                cpu = emulated_mm(**kw, c_mode=mode)
                gpu = emulated_mm(**to_dev(kw, dev), c_mode=mode)
                n, first, _, where = compare(cpu, gpu)
                row["outputs"] += cpu.numel()
                row["mismatches"] += n
                if n and row["first"] is None:
                    row["first"] = dict(index=first, cpu=hexbits(cpu, first),
                                        cuda=hexbits(gpu, first), c_mode=mode, family=fam)
                    if archive is not None:
                        obj = dict(spec=spec.to_string(), c_mode=mode, family=fam,
                                   **samples(kw, where[:SAVE_OUTPUTS], cpu=cpu, cuda=gpu.cpu()))
                        row["saved"] = archive.add(f"identity_{idx:03d}_{safe_name(sid)}.pt", obj)
        except Exception as e:  # noqa: BLE001  (report, go on)
            row["status"] = error_status(e)
            log(traceback.format_exc())
            poisoned = lost_context(dev, log, "identity", "entries")
        rows.append(row)
        if idx % 25 == 24:
            log(f"[identity] {idx + 1}/{len(specs)} entries, {clock.left():.0f} s left")
        if row["mismatches"] or row["status"] != "ok":
            log(f"[identity] {row['spec']}: {row['mismatches']} mismatches / {row['outputs']} "
                f"({row['status']})")
        if state is not None and (idx % 10 == 9 or row["mismatches"] or row["status"] != "ok"):
            state.save()
    if state is not None:
        state.save()
    return rows
