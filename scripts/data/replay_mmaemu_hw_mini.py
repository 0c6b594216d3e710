"""Replay mmaemu 0.1.0's RTX 4060 recordings (its sdist's ``tests/data/hw_mini``, Apache-2.0;
cuBLASLt 12.8.3.14, torch 2.7.1) through ``torch._scaled_mm`` under ``emulate("sm89")``,
each split call with the interleaved layout at its recorded S and order, and count the
outputs that give the recorded bits.

    python scripts/data/replay_mmaemu_hw_mini.py PATH/mmaemu-0.1.0/tests/data/hw_mini [split|unsplit]

(Plain calls only: strides, offsets and bias variants and the calls cuBLASLt rejected are
counted as skipped.)"""
import collections
import json
import os
import sys
import time

import numpy as np
import torch

import torch_mma_emu as tme
from torch_mma_emu import Schedule

F8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
IV = {4: torch.int32, 2: torch.int16, 1: torch.uint8}


def f32(b):
    return torch.tensor([b], dtype=torch.int64).to(torch.int32).view(torch.float32)[0]


def main(src, which="all"):
    index = json.load(open(os.path.join(src, "index.json")))
    files = {}

    def arr(ref):
        if ref[0] not in files:
            files[ref[0]] = np.load(os.path.join(src, ref[0]))
        return files[ref[0]][ref[1]]
    res, t = collections.Counter(), time.time()
    for c in index["cases"]:
        if c["kind"] != "gemm" or "a" not in c.get("inputs", {}):
            continue
        for o in c.get("outputs", []):
            p = {**c.get("params", {}), **o.get("params", {})}
            if p.get("call") not in (None, {}) or "bits" not in o.get("expect", {}) or \
                    "fmt_a" not in p or p.get("out_dtype") is None:
                res["skipped"] += 1
                continue
            sk = p.get("splitk") or {"S": 1}
            S = sk["S"]
            if (which == "split" and S == 1) or (which == "unsplit" and S > 1):
                continue
            a = torch.from_numpy(arr(c["inputs"]["a"])).view(F8[p["fmt_a"]])
            b = torch.from_numpy(arr(c["inputs"]["b"])).view(F8[p["fmt_b"]])
            sched = None if S == 1 else {"scaled_mm": Schedule(
                split_k=S, split_grain=64, split_layout="interleaved",
                reduce="halves" if sk["scheme"] == "pairwise" else "sequential",
                promote_every=None if p["fast"] else 128)}
            kw = {} if p.get("scale_result_bits") is None else \
                {"scale_result": f32(p["scale_result_bits"])}
            with tme.emulate("sm89", schedule=sched):
                r = torch._scaled_mm(a, b.t(), f32(p["scale_a_bits"]), f32(p["scale_b_bits"]),
                                     out_dtype=getattr(torch, p["out_dtype"]),
                                     use_fast_accum=p["fast"], **kw)
            sel = o.get("sel")
            if tuple(r.shape) != tuple(o["expect"]["shape"]):
                if not sel or max(sel["rows"]) >= r.shape[0] or \
                        max(sel["cols"]) >= r.shape[1]:
                    res["skipped"] += 1
                    continue
                r = r[sel["rows"]][:, sel["cols"]]
            want = torch.from_numpy(arr(o["expect"]["bits"]).astype(np.int64)).reshape(r.shape)
            got = r.contiguous().view(IV[r.element_size()]).to(torch.int64) & \
                ((1 << (8 * r.element_size())) - 1)
            key = ("split" if S > 1 else "unsplit") + (" equal" if torch.equal(got, want)
                                                       else " DIFFERENT")
            res[key] += 1
            if not torch.equal(got, want):
                print("differs:", c["id"], o["name"], f"S={S}", sk.get("scheme"))
    print(dict(res), f"{time.time() - t:.0f} s")


if __name__ == "__main__":
    main(*sys.argv[1:])
