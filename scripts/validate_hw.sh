#!/usr/bin/env bash
# The one command for a GPU machine: set up .venv (reusing the machine's CUDA torch), build
# torch_mma_emu._C for this GPU (sm_90a on Hopper, for the wgmma kernels), run the hardware
# validation (writes docs/hardware/<GPU>.md), then the GPU tests.
#
#   bash scripts/validate_hw.sh [validate_hw.py options]     e.g. --quick, --time-limit 300
#   MMA_EMU_GPU_TESTS=0 bash scripts/validate_hw.sh          # skip the pytest -m gpu run
#   MMA_EMU_PROBE=0 / MMA_EMU_PROBE_N=10000                 # skip / shorten scripts/probe_native.py
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BASE_PY=${PYTHON:-python3}
if [ -z "${TORCH_CUDA_ARCH_LIST:-}" ]; then
  TORCH_CUDA_ARCH_LIST=$("$BASE_PY" -c 'import torch
c = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
print("" if c is None else f"{c[0]}.{c[1]}" + ("a" if c[0] == 9 else ""))')
  export TORCH_CUDA_ARCH_LIST
fi
echo "[validate_hw] TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-<none: no GPU visible>}"
start=$(date +%s)
source "$ROOT/scripts/_setup_env.sh"
echo "[validate_hw] build done in $(( $(date +%s) - start )) s"
out=${OUT:-/tmp/mma_emu_validate}
rc=0
"$VPY" "$ROOT/scripts/validate_hw.py" --out "$out" "$@" || rc=$?
if [ "${MMA_EMU_PROBE:-1}" = 1 ]; then   # issue 5: infer_spec("native") per format
  "$VPY" "$ROOT/scripts/probe_native.py" ${MMA_EMU_PROBE_N:+-n $MMA_EMU_PROBE_N} || rc=1
fi
if [ "${MMA_EMU_GPU_TESTS:-1}" = 1 ]; then
  "$VPY" -m pytest -q -m gpu "$ROOT/tests" -x -q 2>&1 | tail -15 || rc=1
fi
echo "[validate_hw] total $(( $(date +%s) - start )) s, exit $rc"
exit $rc
