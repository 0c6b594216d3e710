"""Compile ATen's CUDA kernels from the installed torch wheel's headers to sm_90 PTX for the
PTX interpreter (issue 43 item 2): tests/data/aten_kernels/aten_kernels.cu ->
tests/data/aten_kernels/aten_kernels_sm90.ptx.gz.

    python scripts/regen_aten_kernel_ptx.py          # needs nvcc (13.0) and torch 2.13.0
    python scripts/regen_aten_kernel_ptx.py --check  # run the committed PTX: one launch per
                                                     # branch against the models, speed and
                                                     # instruction coverage (no nvcc)

Flags: torch's device flags as scripts/regen_aten_math_ptx.py uses them (no fast-math, no
FTZ, contraction on: nvcc's defaults; c10's half / bfloat16 operators).  The CPU wheel ships
ATen's headers but not the CUDA libraries' (cuSPARSE, cuBLAS, cuBLASLt, cuSOLVER) nor the
generated ``ATen/cuda/CUDAConfig.h`` and ``c10/cuda/impl/cuda_cmake_macros.h``, which
``Reduce.cuh`` includes through ``CUDAContext.h``: this script writes stand-ins for them in a
temporary directory (opaque handle and status typedefs, the config macros), which host code
only declares with; no device code reads them.  tests/test_ptx_aten.py runs the PTX.
"""
from __future__ import annotations

import argparse
import gzip
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "aten_kernels"
SOURCE, OUT = DATA / "aten_kernels.cu", DATA / "aten_kernels_sm90.ptx.gz"
TORCH_FLAGS = ["-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
               "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
               "--expt-relaxed-constexpr", "--expt-extended-lambda", "-std=c++17",
               "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE"]
STANDINS = {
    "cusparse.h": "typedef struct cusparseContext* cusparseHandle_t;\n"
                  "typedef int cusparseStatus_t;\n",
    "cublas_v2.h": "typedef struct cublasContext* cublasHandle_t;\n"
                   "typedef int cublasStatus_t;\n",
    "cublasLt.h": "typedef struct cublasLtContext* cublasLtHandle_t;\n",
    "cusolverDn.h": "typedef struct cusolverDnContext* cusolverDnHandle_t;\n",
    "cusolver_common.h": "typedef int cusolverStatus_t;\n",
    "ATen/cuda/CUDAConfig.h": "#define AT_CUDNN_ENABLED() 1\n#define AT_CUSPARSELT_ENABLED() 0\n"
                              "#define AT_HIPSPARSELT_ENABLED() 0\n#define AT_ROCM_ENABLED() 0\n"
                              "#define AT_MAGMA_ENABLED() 0\n#define NVCC_FLAGS_EXTRA \"\"\n",
}


def check() -> int:
    """One launch per kernel branch against the aten_cuda models; prints mismatches, the
    interpreter's speed and which of the module's opcodes ran."""
    import numpy as np
    import torch
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT))
    import aten_kernels_ptx as ak
    from torch_mma_emu.aten_cuda import host_softmax, norms, sums
    from torch_mma_emu.aten_cuda import softmax as persistent
    from torch_mma_emu.ptx import coverage
    from torch_mma_emu.registry import gpu

    h100, t4 = gpu("H100"), gpu("T4")
    rng = np.random.default_rng(0)
    base = torch.from_numpy((rng.standard_normal(300_000) *
                             np.exp2(rng.integers(-14, 12, 300_000))).astype(np.float32))

    def v(off, shape, dtype=torch.float32):
        return base[off:off + int(np.prod(shape))].reshape(shape).to(dtype)

    def diff(got, want):
        g, w = got.float().reshape(-1).numpy(), want.float().reshape(-1).numpy()
        if got.dtype != torch.float32:
            g = got.reshape(-1).view(torch.int16).numpy()
            w = want.reshape(-1).to(got.dtype).view(torch.int16).numpy()
            nan = np.isnan(got.float().reshape(-1).numpy())
            return int((~((g == w) | (nan & np.isnan(want.float().reshape(-1).numpy())))).sum())
        return int((~((g.view(np.uint32) == w.view(np.uint32)) |
                      (np.isnan(g) & np.isnan(w)))).sum())

    rows, ran = [], {}
    t0 = __import__("time").perf_counter()
    ak.module()
    parse = __import__("time").perf_counter() - t0
    for what, x, dim, op, dev in [
            ("sum fp32 1-d, shift 1", v(1, (1000,)), None, "sum", h100),
            ("sum fp32 rows, shifts 0-3", v(0, (8, 301)), 1, "sum", h100),
            ("mean fp32 strided rows", v(0, (5, 200))[:, ::2], 1, "mean", h100),
            ("sum fp32 two reduced dims", v(0, (4, 6, 50)).permute(1, 0, 2), (1, 2), "sum", h100),
            ("sum fp32 warps split", v(0, (4, 9000)), 1, "sum", h100),
            ("sum fp32 dim 0, output vec 4", v(0, (300, 8)), 0, "sum", h100),
            ("mean fp32 dim 0, output vec 2", v(0, (300, 6)), 0, "mean", h100),
            ("sum fp32 1-d, CTAs + semaphore", v(3, (131_077,)), None, "sum", h100),
            ("sum fp32 dim 0, CTAs", v(0, (32_768, 4)), 0, "sum", h100),
            ("sum fp32 dim 0, CTAs, 2 outputs groups", v(0, (1024, 256)), 0, "sum", t4),
            ("sum fp16 rows, shifts 0-7", v(0, (8, 301), torch.float16), 1, "sum", h100),
            ("mean bf16 rows, shifts 0-7", v(0, (8, 301), torch.bfloat16), 1, "mean", h100)]:
        got, cfg, st, _ = ak.launch_reduce(x, dim, op, dev)
        want = sums.reduce(x, dim, op=op, gpu=dev)
        rows.append((f"reduce_kernel {what}", cfg.describe().split(" (")[0], st, diff(got, want)))
    for n, dtype, log in [(3, torch.float32, False), (100, torch.float32, False),
                          (1000, torch.float32, True), (2048, torch.float32, False),
                          (100, torch.float16, False), (1000, torch.bfloat16, False)]:
        x = (v(n, (7, n)) * 1e-3).to(dtype)
        got, st = ak.launch_softmax(x, log)
        with np.errstate(all="ignore"):
            want = persistent.softmax(x, log_softmax=log)
        rows.append((f"softmax_warp_forward {'log ' if log else ''}{dtype} n={n}",
                     "7 rows", st, diff(got, want)))
    x = v(0, (6, 3000)) + 3
    mean, var, st = ak.launch_welford(x)
    wm, wv = norms.moments(x.numpy())
    rows.append(("WelfordOps + BlockReduce (RowwiseMoments)", "6 rows of 3000", st,
                 diff(torch.from_numpy(mean), torch.from_numpy(wm)) +
                 diff(torch.from_numpy(var), torch.from_numpy(wv))))
    s = v(0, (4, 1024)).numpy().copy()
    got, st = ak.launch_block_reduce(s)
    rows.append(("cuda_utils::BlockReduce sum", "4 x 1024 threads", st,
                 diff(torch.from_numpy(got), torch.from_numpy(host_softmax.block_reduce(s)))))
    bad = 0
    print(f"{'kernel':<52} {'launch':<58} {'CTAs':>5} {'thread-instr':>12} {'M/s':>5} "
          f"mismatches")
    for what, lay, st, miss in rows:
        bad += miss
        for op, n in st.executed.items():
            ran[op] = ran.get(op, 0) + n
        print(f"{what:<52} {lay:<58} {st.ctas:>5} {st.thread_instructions:>12} "
              f"{st.rate / 1e6:>5.1f} {miss}")
    ops = coverage.opcodes(ak.module())
    print(f"parse {parse:.1f} s; {len(ak.module().kernels)} kernels, {len(ops)} opcodes "
          f"({sum(ops.values())} instructions), missing: {coverage.missing(ak.module()) or 'none'}; "
          f"executed: {len(set(ran) & set(ops))} opcodes")
    print("not executed:", " ".join(sorted(set(ops) - set(ran))))
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="run the committed PTX only")
    if ap.parse_args(argv).check:
        return check()
    return regen()


def regen() -> int:
    import torch
    import torch.utils.cpp_extension as ext
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        sys.exit("regen_aten_kernel_ptx: nvcc is not on PATH")
    if torch.__version__.split("+")[0] != "2.13.0":
        print(f"warning: torch {torch.__version__}; the committed PTX is of 2.13.0's headers")
    with tempfile.TemporaryDirectory() as tmp:
        for name, body in STANDINS.items():
            p = Path(tmp) / "standin" / name
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("#pragma once\n// stand-in (scripts/regen_aten_kernel_ptx.py)\n" + body)
        out = Path(tmp) / "aten_kernels_sm90.ptx"
        inc = [f"-I{p}" for p in ext.include_paths()] + [f"-I{Path(tmp) / 'standin'}"]
        subprocess.run([nvcc, "-arch=sm_90", "-ptx", *TORCH_FLAGS, *inc, str(SOURCE), "-o",
                        str(out)], check=True)
        text = out.read_text()
    # the anonymous namespace's mangled name carries a hash of the temporary path: make
    # it stable so that a rerun gives the same bytes
    text = re.sub(r"_ZN\d+_GLOBAL__N__[0-9a-f]+_\d+_aten_kernels_cu_[0-9a-f]+",
                  "_ZN24_GLOBAL__N__aten_kernels", text)
    OUT.write_bytes(gzip.compress(text.encode(), 9, mtime=0))
    n = len(re.findall(r"\.entry\s", text))
    print(f"wrote {OUT.relative_to(ROOT)}: {n} kernels, {len(text)} bytes of PTX "
          f"({OUT.stat().st_size} gzipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
