#!/bin/bash
# Regenerate the committed PTX of csrc/cuda/ (nvcc 13.0, the build's flags through
# scripts/check_cuda_compile.sh), gzipped; the tests read these files.  Needs nvcc and a
# Python with torch (PYTHON=..., as for check_cuda_compile.sh).  Rerun after editing csrc/
# (nvcc makes the same PTX each run but for the names it derives from the build's paths and the
# target, and the .file paths: tests/test_ptx_cuda_targets.py compares without those).
#   gemm_cuda_sm80        every kernel (7 MB of PTX, 1 MB stored)
#   gemm_cuda_sm100a      only the kernels tests/test_ptx_cuda_targets.py launches
#                         (sm_90a's PTX is sm_80's and sm_120a's is sm_100a's but for the
#                         .target line and the anonymous namespace's hash: that test's slow
#                         part checks it with nvcc)
#   mma_instr_sm80, sm89, sm90a, sm100a, sm120a   the instruction kernels (14-20 kB each)
#   sched_cuda_sm80, sm100a                        the schedule kernel
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../../..
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ptx() {  # source arch
  MMA_EMU_CHECK_PTX="$tmp" MMA_EMU_CHECK_ARCHS=$2 MMA_EMU_CHECK_SOURCES=csrc/cuda/$1.cu \
    bash "$root/scripts/check_cuda_compile.sh" >/dev/null
}
ptx gemm_cuda 80
gzip -9 -n -c "$tmp/gemm_cuda_sm80.ptx" >"$here/gemm_cuda_sm80.ptx.gz"
for a in 80 89 90a 100a 120a; do
  ptx mma_instr $a
  gzip -9 -n -c "$tmp/mma_instr_sm$a.ptx" >"$here/mma_instr_sm$a.ptx.gz"
done
for a in 80 100a; do
  ptx sched_cuda $a
  gzip -9 -n -c "$tmp/sched_cuda_sm$a.ptx" >"$here/sched_cuda_sm$a.ptx.gz"
done
ptx gemm_cuda 100a
(cd "$root/tests" && "${PYTHON:-python}" -c "
import sys, gzip, test_ptx_cuda_targets as T
text = T.keep_kernels(open(sys.argv[1]).read())
open(sys.argv[2], 'wb').write(gzip.compress(text.encode(), 9, mtime=0))
" "$tmp/gemm_cuda_sm100a.ptx" "$here/gemm_cuda_sm100a.ptx.gz")
echo "wrote $here/*.ptx.gz"
