"""Extract tests/data/cublaslt_epilogue/split_rtx4060.{npz,json} from mmaemu 0.1.0's sdist
(Apache-2.0; ``tests/data/hw_mini``: outputs recorded on an RTX 4060, cuBLASLt 12.8.3.14,
torch 2.7.1): every plain ``torch._scaled_mm`` / accumulator output it holds that ran
split (S > 1), with the operand rows and columns it needs; to stay small, the cases whose
operands take at most 8 KiB plus, for every (S, order, fast accumulation, output dtype)
they leave uncovered, the smallest case (of at most 16 KiB) that has it.

    python scripts/data/cublaslt_split_recordings.py PATH/mmaemu-0.1.0/tests/data/hw_mini
"""
import json
import os
import sys

import numpy as np


def main(src, dst="tests/data/cublaslt_epilogue/split_rtx4060"):
    index = json.load(open(os.path.join(src, "index.json")))
    files, arrays, cases = {}, {}, []

    def arr(ref):
        f, k = ref
        if f not in files:
            files[f] = np.load(os.path.join(src, f))
        return files[f][k]

    def put(ref):
        name = f"{ref[0].split('.')[0]}_{ref[1]}"
        arrays[name] = arr(ref)
        return name
    for c in index["cases"]:
        if c["kind"] != "gemm" or "a" not in c.get("inputs", {}):
            continue
        outs = []
        for o in c.get("outputs", []):
            p = {**c.get("params", {}), **o.get("params", {})}
            sk = p.get("splitk") or {"S": 1}
            if p.get("call") not in (None, {}) or "bits" not in o.get("expect", {}) or \
                    "fmt_a" not in p or p.get("out_dtype") is None or sk["S"] == 1:
                continue
            outs.append({"name": o["name"], "bits": o["expect"]["bits"],
                         "sel": o.get("sel"), "shape": o["expect"]["shape"],
                         **{k: p.get(k) for k in ("fmt_a", "fmt_b", "out_dtype", "fast",
                                                  "scale_a_bits", "scale_b_bits",
                                                  "scale_result_bits")},
                         "S": sk["S"], "scheme": sk["scheme"]})
        if outs:
            cases.append({"id": c["id"], "a": c["inputs"]["a"], "b": c["inputs"]["b"],
                          "outputs": outs})
    size = {c["id"]: arr(c["a"]).nbytes + arr(c["b"]).nbytes for c in cases}
    cases.sort(key=lambda c: (size[c["id"]], c["id"]))

    def combos(c):
        return {(o["S"], o["scheme"], o["fast"], o["out_dtype"]) for o in c["outputs"]}
    kept, seen = [], set()
    for c in cases:
        if size[c["id"]] <= 8192 or (combos(c) - seen and size[c["id"]] <= 16384):
            kept.append(c)
            seen |= combos(c)
    for c in kept:
        c["a"], c["b"] = put(c["a"]), put(c["b"])
        for o in c["outputs"]:
            o["bits"] = put(o["bits"])
    cases = kept
    np.savez_compressed(dst + ".npz", **arrays)
    json.dump({"source": "mmaemu 0.1.0 sdist tests/data/hw_mini (Apache-2.0)",
               "hardware": "NVIDIA GeForce RTX 4060 (sm_89, 24 SMs), cuBLASLt 12.8.3.14, "
                           "torch 2.7.1+cu128",
               "layout": "a uint8 [rows, K], b uint8 [cols, K]: torch._scaled_mm(a, b.t()); "
                         "bits: the recorded output at sel (rows, cols) when given",
               "cases": cases}, open(dst + ".json", "w"), separators=(",", ":"))
    print(len(cases), "cases", sum(len(c["outputs"]) for c in cases), "outputs")


if __name__ == "__main__":
    main(*sys.argv[1:])
