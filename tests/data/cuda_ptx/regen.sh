#!/bin/bash
# Regenerate gemm_cuda_sm80.ptx.gz: nvcc's sm_80 PTX of csrc/cuda/gemm_cuda.cu with the
# build's flags (scripts/check_cuda_compile.sh), gzipped (7 MB of PTX, 1 MB stored).  Needs
# nvcc; tests/test_ptx_cuda_gemm.py reads the committed file.  Rerun after editing csrc/.
set -e
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
MMA_EMU_CHECK_PTX="$tmp" MMA_EMU_CHECK_ARCHS=80 MMA_EMU_CHECK_SOURCES=csrc/cuda/gemm_cuda.cu \
  bash "$here/../../../scripts/check_cuda_compile.sh"
gzip -9 -n -c "$tmp/gemm_cuda_sm80.ptx" >"$here/gemm_cuda_sm80.ptx.gz"
echo "wrote $here/gemm_cuda_sm80.ptx.gz"
