"""The evidence for torch_mma_emu.order.nccl_pat: NCCL's own ``PatRSAlgorithm`` (the PAT
reduce-scatter schedule, src/include/collectives.h) compiled on the host with g++ and run
for 2-16 ranks, every rank, a few sizes; its step sequences go into a committed table
(tests/data/nccl/pat_rs_steps.json) that tests/order/test_order_nccl_pat.py compares the
Python port with.

    git clone --branch v2.30.7-1 https://github.com/NVIDIA/nccl /tmp/nccl
    python scripts/regen_nccl_pat.py /tmp/nccl [--out tests/data/nccl/pat_rs_steps.json]

Nothing of NCCL is committed: in a temporary folder the script writes a C++ file that
includes the checkout's src/include/bitops.h (log2Up, COMPILER_FFS / COMPILER_POPCOUNT32
through compiler.h) and the text of the ``ncclPatStep`` struct and of the
``PatRSAlgorithm`` class cut from the checkout's collectives.h, with ``__host__`` and
``__device__`` defined empty (bitops.h does that off nvcc), compiles it with g++ and runs
it.  Every ``getNextOp`` call gets a fresh step struct filled with a sentinel, so the table
shows which fields a step leaves unset (the kernel reuses a ring of 32 shared-memory
steps; a skipped step's stale fields are never read).  The kernel's arguments
(src/device/reduce_scatter.h): stepSize = chunkCount * sizeof(T), stepDepth = NCCL_STEPS
(8), maxParallelFactor = NCCL_PAT_NWORKERS / WARP_SIZE (16); T = float here.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "nccl", "pat_rs_steps.json")
FIELDS = ("recvDim", "sendDim", "recvOffset", "sendOffset", "stepOffset", "postRecv",
          "postSend", "nelem", "last", "flags", "inpIx", "outIx")
SENTINEL = -77
# (offset, end, count, chunkCount) in elements: one chunk, aggregation (a channel part much
# smaller than a step), several chunks with a short last one, a second channel's part
SIZES = ((0, 1024, 1024, 1024), (0, 64, 64, 1024), (0, 1000, 1000, 128),
         (500, 1000, 1000, 128), (0, 4096, 4096, 512), (0, 8, 8, 128))
FULL_UP_TO = 5          # ranks whose sequences are stored in full; larger: length + sha256

HARNESS = r"""
#include <cstdio>
#include <cstddef>
#include <sys/types.h>
#include "bitops.h"
static constexpr int PatUsed = 0x1, PatSkipped = 0x2;
%(step_struct)s
%(pat_class)s
int main(int argc, char** argv) {
  int nranks = atoi(argv[1]), rank = atoi(argv[2]);
  size_t offset = atol(argv[3]), end = atol(argv[4]), count = atol(argv[5]);
  int chunkCount = atoi(argv[6]);
  PatRSAlgorithm<float> algo(chunkCount * sizeof(float), 8, 512 / 32, offset, end, count,
                             chunkCount, rank, nranks);
  printf("pf %%d\n", algo.getParallelFactor());
  for (int i = 0; i < 1000000; i++) {
    ncclPatStep ps;
    ps.recvDim = ps.sendDim = ps.recvOffset = ps.sendOffset = ps.stepOffset = %(s)d;
    ps.postRecv = ps.postSend = ps.nelem = ps.last = ps.flags = %(s)d;
    ps.inpIx = ps.outIx = (size_t)(%(s)d);
    algo.getNextOp(&ps);
    printf("%%d %%d %%d %%d %%d %%d %%d %%d %%d %%d %%lld %%lld\n", ps.recvDim, ps.sendDim,
           ps.recvOffset, ps.sendOffset, ps.stepOffset, ps.postRecv, ps.postSend, ps.nelem,
           ps.last, ps.flags, (long long)ps.inpIx, (long long)ps.outIx);
    if (ps.last == 2) return 0;
  }
  return 1;
}
"""


def cut(text: str, start: str, stop: str) -> str:
    i = text.index(start)
    return text[i:text.index(stop, i)]


def build(checkout: str, tmp: str) -> str:
    inc = os.path.join(checkout, "src", "include")
    with open(os.path.join(inc, "collectives.h")) as f:
        src = f.read()
    step = cut(src, "struct ncclPatStep {", "};") + "};"
    pat = cut(src, "template <typename T>\nclass PatRSAlgorithm", "template <typename T>\nclass PatAGAlgorithm")
    # the device-only atomic store under __CUDA_ARCH__ >= 600 drops out on the host
    cc = os.path.join(tmp, "pat.cc")
    with open(cc, "w") as f:
        f.write("#include <cstdlib>\n" + HARNESS % dict(step_struct=step, pat_class=pat, s=SENTINEL))
    exe = os.path.join(tmp, "pat")
    subprocess.run(["g++", "-std=c++17", "-O1", "-I", inc, cc, "-o", exe], check=True)
    return exe


def run(exe: str, nranks: int, rank: int, size) -> dict:
    out = subprocess.run([exe, str(nranks), str(rank), *map(str, size)], check=True,
                         capture_output=True, text=True).stdout.split("\n")
    pf = int(out[0].split()[1])
    steps = [[int(v) for v in line.split()] for line in out[1:] if line]
    for s in steps:                       # size_t sentinel printed as a huge / negative value
        for k in (10, 11):
            if s[k] == SENTINEL or s[k] == (SENTINEL & (2**64 - 1)):
                s[k] = SENTINEL
    return {"parallelFactor": pf, "steps": steps}


def digest(steps) -> str:
    return hashlib.sha256(json.dumps(steps, separators=(",", ":")).encode()).hexdigest()


def version(checkout: str) -> str:
    try:
        with open(os.path.join(checkout, "makefiles", "version.mk")) as f:
            mk = f.read()
        return ".".join(re.search(rf"NCCL_{k}\s*:=\s*(\d+)", mk).group(1)
                        for k in ("MAJOR", "MINOR", "PATCH"))
    except (OSError, AttributeError):
        return "unknown"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help="an NCCL source checkout (src/include/collectives.h)")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    if not os.path.isfile(os.path.join(args.checkout, "src", "include", "collectives.h")):
        print(f"error: {args.checkout} has no src/include/collectives.h", file=sys.stderr)
        return 2
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build(args.checkout, tmp)
        for nranks in range(2, 17):
            for size in SIZES:
                for rank in range(nranks):
                    got = run(exe, nranks, rank, size)
                    case = dict(zip(("offset", "end", "count", "chunkCount"), size),
                                nranks=nranks, rank=rank, parallelFactor=got["parallelFactor"],
                                nsteps=len(got["steps"]), sha256=digest(got["steps"]))
                    if nranks <= FULL_UP_TO:
                        case["steps"] = got["steps"]
                    cases.append(case)
    table = {"nccl_version": version(args.checkout), "fields": FIELDS, "sentinel": SENTINEL,
             "element_size": 4, "stepDepth": 8, "maxParallelFactor": 16,
             "source": "src/include/collectives.h PatRSAlgorithm, compiled with g++ "
                       "(scripts/regen_nccl_pat.py)", "cases": cases}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(table, f, separators=(",", ":"))
        f.write("\n")
    print(f"{len(cases)} cases, NCCL {table['nccl_version']} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
