"""Compile ATen's CUDA kernels from the installed torch wheel's headers to sm_90 PTX for the
PTX interpreter (issue 43 item 2): tests/data/aten_kernels/aten_kernels.cu ->
tests/data/aten_kernels/aten_kernels_sm90.ptx.gz.

    python scripts/regen_aten_kernel_ptx.py          # needs nvcc (13.0) and torch 2.13.0

Flags: torch's device flags as scripts/regen_aten_math_ptx.py uses them (no fast-math, no
FTZ, contraction on: nvcc's defaults; c10's half / bfloat16 operators).  The CPU wheel ships
ATen's headers but not the CUDA libraries' (cuSPARSE, cuBLAS, cuBLASLt, cuSOLVER) nor the
generated ``ATen/cuda/CUDAConfig.h`` and ``c10/cuda/impl/cuda_cmake_macros.h``, which
``Reduce.cuh`` includes through ``CUDAContext.h``: this script writes stand-ins for them in a
temporary directory (opaque handle and status typedefs, the config macros), which host code
only declares with; no device code reads them.  tests/test_ptx_aten.py runs the PTX.
"""
from __future__ import annotations

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


def main() -> int:
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
