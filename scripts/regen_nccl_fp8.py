"""The evidence for NCCL's fp8 hop arithmetic in torch_mma_emu.order.nccl (``fp8_add``,
``fp8_premul``): the CUDA headers' own fp8 / half code, compiled for the host with g++, run
on every pair of e4m3 and e5m2 codes; the results go into a committed table
(tests/data/nccl/fp8_hops.npz) that tests/order/test_order_nccl_extra.py compares with.

    python scripts/regen_nccl_fp8.py [--cuda-include /usr/local/cuda/include] [--out PATH]

The expressions are NCCL 2.30.7's (src/device/reduce_kernel.h, sm90+): a hop is
``__nv_fp8_e4m3(__hadd(__half(x), __half(y)))`` (e5m2 alike); PreMulSum multiplies
``__half(x)`` by the scalar ``__nv_cvt_float_to_fp8(float(1.0 / n), __NV_SATFINITE, ...)``
widened to half (``__hmul``), back to fp8 (src/enqueue.cc for AVG's scalar).  cuda_fp16.h
and cuda_fp8.h carry host implementations of these functions; the device's ``add.f16`` /
``cvt.rn.satfinite`` give the same roundings (not checked on a GPU here).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "nccl", "fp8_hops.npz")
RANKS = tuple(range(2, 17))

HARNESS = r"""
#include <cuda_fp8.h>
#include <cstdio>
template <typename F8> void run(__nv_fp8_interpretation_t kind) {
  for (int a = 0; a < 256; a++) {
    for (int b = 0; b < 256; b++) {
      F8 x, y;
      x.__x = a; y.__x = b;
      F8 z = F8(__hadd(__half(x), __half(y)));
      printf("%d ", (int)z.__x);
    }
    printf("\n");
  }
  for (int n = 2; n <= 16; n++) {
    __half s = __half(__nv_cvt_fp8_to_halfraw(
        __nv_cvt_float_to_fp8(float(1.0 / n), __NV_SATFINITE, kind), kind));
    for (int a = 0; a < 256; a++) {
      F8 x;
      x.__x = a;
      printf("%d ", (int)F8(__hmul(__half(x), s)).__x);
    }
    printf("\n");
  }
}
int main() {
  run<__nv_fp8_e4m3>(__NV_E4M3);
  run<__nv_fp8_e5m2>(__NV_E5M2);
  return 0;
}
"""


def cuda_include() -> str:
    nvcc = shutil.which("nvcc")
    for base in ([os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))] if nvcc else []) \
            + [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"]:
        if base and os.path.isfile(os.path.join(base, "include", "cuda_fp8.h")):
            return os.path.join(base, "include")
    return ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cuda-include", default=None, help="folder with cuda_fp8.h")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args(argv)
    inc = args.cuda_include or cuda_include()
    if not inc or not os.path.isfile(os.path.join(inc, "cuda_fp8.h")):
        print("error: no cuda_fp8.h found; pass --cuda-include", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        cc, exe = os.path.join(tmp, "fp8.cc"), os.path.join(tmp, "fp8")
        with open(cc, "w") as f:
            f.write(HARNESS)
        subprocess.run(["g++", "-std=c++17", "-O1", "-I", inc, cc, "-o", exe], check=True)
        rows = subprocess.run([exe], check=True, capture_output=True,
                              text=True).stdout.split("\n")
    rows = np.array([[int(v) for v in r.split()] for r in rows if r.strip()], np.uint8)
    per = 256 + len(RANKS)
    out = {}
    for k, name in enumerate(("e4m3", "e5m2")):
        block = rows[k * per:(k + 1) * per]
        out[f"add_{name}"] = block[:256]
        out[f"avg_{name}"] = block[256:]
    with open(os.path.join(inc, "cuda.h")) as f:
        ver = next((ln.split()[2] for ln in f if ln.startswith("#define CUDA_VERSION")), "?")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    np.savez_compressed(args.out, ranks=np.array(RANKS), cuda_version=np.array(ver), **out)
    print(f"CUDA {ver} headers: 2 x 65536 hops, 2 x {len(RANKS)} x 256 PreMulSum -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
