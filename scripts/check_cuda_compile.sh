#!/usr/bin/env bash
# Compile every CUDA source of the project with nvcc (no GPU and no CUDA build of torch
# needed: torch's CPU wheel ships the ATen/c10 CUDA headers), so a CUDA compile error cannot
# land unseen.  Objects go to a temporary folder and are thrown away.
#
#   bash scripts/check_cuda_compile.sh               # sm_80 and sm_90a (the default)
#   MMA_EMU_CHECK_ARCHS="80 89 90a" bash scripts/check_cuda_compile.sh
#   MMA_EMU_CHECK_VERBOSE=1 ...                      # ptxas register / spill report
#   MMA_EMU_CHECK_PTX=DIR MMA_EMU_CHECK_ARCHS=80 ... # keep each source's PTX in DIR (one arch)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
NVCC=${NVCC:-nvcc}
if ! command -v "$NVCC" >/dev/null 2>&1; then
  echo "[check_cuda_compile] nvcc not found; nothing to check" >&2
  exit 0
fi
ARCHS=${MMA_EMU_CHECK_ARCHS:-"80 90a"}
mapfile -t INC < <("$PY" - <<'PY'
import sysconfig
from torch.utils.cpp_extension import include_paths
for p in include_paths() + [sysconfig.get_paths()["include"]]:
    print(p)
PY
)
ABI=$("$PY" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
# the stable-ABI defines setup.py gives every source (TORCH_TARGET_VERSION, ...) and nvcc's
# USE_CUDA, read from setup.py (one copy)
mapfile -t DEFS < <("$PY" - <<'PY'
import importlib.util
spec = importlib.util.spec_from_file_location("mma_emu_setup", "setup.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)     # defines the tables; setup() runs only as __main__
for name, value in mod.STABLE_MACROS + mod.NVCC_MACROS:
    print(f"-D{name}={value}")
PY
)
gencode=()
for a in $ARCHS; do gencode+=("-gencode=arch=compute_${a},code=sm_${a}"); done
incflags=()
for p in "${INC[@]}"; do incflags+=("-isystem" "$p"); done
# the flags torch.utils.cpp_extension gives nvcc, plus setup.py's own
flags=(-O3 -std=c++20 --fmad=false -lineinfo --expt-relaxed-constexpr
       -D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__
       -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__
       -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_C -DMMA_EMU_WITH_CUDA=1
       "-D_GLIBCXX_USE_CXX11_ABI=$ABI" "${DEFS[@]}" -Xcompiler -fPIC -Werror=all-warnings)
[ "${MMA_EMU_CHECK_VERBOSE:-0}" = 1 ] && flags+=(-Xptxas -v)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# torch's CPU wheel lacks c10's generated CUDA config header; supply its (one-line) content
if [ ! -f "${INC[0]}/c10/cuda/impl/cuda_cmake_macros.h" ]; then
  mkdir -p "$TMP/stub/c10/cuda/impl"
  echo '#pragma once
#define C10_CUDA_BUILD_SHARED_LIBS' >"$TMP/stub/c10/cuda/impl/cuda_cmake_macros.h"
  incflags+=("-isystem" "$TMP/stub")
fi
mapfile -t SRCS < <(ls ${MMA_EMU_CHECK_SOURCES:-csrc/cuda/*.cu csrc/native/*.cu} 2>/dev/null || true)
if [ ${#SRCS[@]} -eq 0 ]; then
  echo "[check_cuda_compile] no CUDA sources"
  exit 0
fi
# one nvcc per source; MMA_EMU_CHECK_JOBS=N runs N at a time (default 1: nvcc is memory hungry)
jobs=${MMA_EMU_CHECK_JOBS:-1}
check_one() {
  local src=$1 obj="$TMP/$(basename "$1").o" start
  local mode=(-c "${gencode[@]}")
  if [ -n "${MMA_EMU_CHECK_PTX:-}" ]; then
    mode=(-ptx "-arch=sm_${ARCHS%% *}")
    obj="$MMA_EMU_CHECK_PTX/$(basename "$1" .cu)_sm${ARCHS%% *}.ptx"
  fi
  start=$(date +%s)
  if "$NVCC" "${flags[@]}" "${mode[@]}" "${incflags[@]}" "$src" -o "$obj" >"$obj.log" 2>&1; then
    cat "$obj.log"
    echo "[check_cuda_compile] ok   $src (archs: $ARCHS, $(( $(date +%s) - start )) s)"
  else
    cat "$obj.log" >&2
    echo "[check_cuda_compile] FAIL $src" >&2
    return 1
  fi
}
fail=0
pids=()
for src in "${SRCS[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
  check_one "$src" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || fail=1; done
exit $fail
