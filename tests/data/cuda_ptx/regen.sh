#!/bin/bash
# Regenerate gemm_cuda_sm80.ptx.gz: nvcc's sm_80 PTX of csrc/cuda/gemm_cuda.cu with the
# build's flags (scripts/check_cuda_compile.sh), gzipped (7 MB of PTX, 1 MB stored).  Needs
# nvcc and a Python with torch (PYTHON=..., as for check_cuda_compile.sh); the tests read the
# committed file.  Rerun after editing csrc/ (the PTX is deterministic: same bytes each run).
set -e
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
MMA_EMU_CHECK_PTX="$tmp" MMA_EMU_CHECK_ARCHS=80 MMA_EMU_CHECK_SOURCES=csrc/cuda/gemm_cuda.cu \
  bash "$here/../../../scripts/check_cuda_compile.sh"
gzip -9 -n -c "$tmp/gemm_cuda_sm80.ptx" >"$here/gemm_cuda_sm80.ptx.gz"
echo "wrote $here/gemm_cuda_sm80.ptx.gz"
