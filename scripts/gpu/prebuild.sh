#!/usr/bin/env bash
# Build the GPU machine's extension HERE, before the first device call, so that call 1 carries
# it (`.gpu_build/build-<hash>/`) instead of spending device minutes on the build.
#
# The lent machine runs Python 3.12 with torch 2.11.0+cu130 (the device tool's KINDS.md); this
# makes the same pair in .venv-gpu/ (git-ignored; torch from the package index, a CUDA build of
# about 4.6 GB), builds the CPU and CUDA kernels for TORCH_CUDA_ARCH_LIST (9.0a: the wgmma
# kernels) and leaves the library where steps.sh's `build` step looks for a carried build.
# A binary built here may still not load there (other system libraries): steps.sh then
# builds there as before.  Safe to run twice; about 5 minutes on 2 cores (measured:
# 144 s for the build, 47 s for the torch install).
#
#   bash scripts/gpu/prebuild.sh                 # then carry .gpu_build in call 1
#   MMA_EMU_GPU_PYTHON=python3.12  MMA_EMU_GPU_TORCH=2.11.0  TORCH_CUDA_ARCH_LIST=9.0a
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
GPY=${MMA_EMU_GPU_PYTHON:-python3.12}
TORCH_V=${MMA_EMU_GPU_TORCH:-2.11.0}
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0a}
VENV="$ROOT/.venv-gpu"
VPY="$VENV/bin/python"

command -v nvcc >/dev/null || { echo "prebuild: no nvcc on PATH" >&2; exit 2; }
if [ ! -x "$VPY" ]; then
  command -v "$GPY" >/dev/null || { echo "prebuild: no $GPY (set MMA_EMU_GPU_PYTHON)" >&2; exit 2; }
  "$GPY" -m venv "$VENV"
fi
have=$("$VPY" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)
if [ "${have%%+*}" != "$TORCH_V" ] || [ "$("$VPY" -c 'import torch; print(torch.version.cuda is not None)' 2>/dev/null)" != True ]; then
  echo "[prebuild] installing torch==$TORCH_V (CUDA build) into .venv-gpu"
  "$VPY" -m pip install -q "torch==$TORCH_V" numpy setuptools wheel ninja
fi
"$VPY" -c 'import numpy, setuptools, ninja' 2>/dev/null || "$VPY" -m pip install -q numpy setuptools wheel ninja "torch==$TORCH_V"

# the same source hash as scripts/gpu/env.sh (steps.sh installs the build only when it matches)
PYTHON="$VPY" OUT=/tmp/mma_emu_prebuild_out source scripts/gpu/env.sh
h=$(src_hash)
mkdir -p build
echo "[prebuild] building for torch $("$VPY" -c 'import torch; print(torch.__version__)'), TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST (log: build/build_ext.log)"
t0=$(date +%s)
PYTHON="$VPY" MAX_JOBS=${MAX_JOBS:-2} bash scripts/build_ext.sh
so=torch_mma_emu/_C.abi3.so   # the stable-ABI build (any CPython from 3.10)
PYTHON="$VPY" so_loaded_with_cuda || { echo "prebuild: $so does not load with its CUDA kernels" >&2; exit 1; }
dest=".gpu_build/build-$h"
rm -rf "$dest"; mkdir -p "$dest"
if [ "$(stat -c %s "$so")" -gt $((15 << 20)) ]; then gzip -1 -c "$so" >"$dest/$(basename "$so").gz"
else cp "$so" "$dest/"; fi
echo "[prebuild] done in $(( $(date +%s) - t0 )) s: $(ls -l "$dest" | tail -n +2 | awk '{print $5, $9}')"
echo "[prebuild] carry .gpu_build in the first device call (docs/hardware/RUNBOOK.md)"
