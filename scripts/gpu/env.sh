# Sourced by scripts/gpu/steps.sh: the GPU machine's environment for torch_mma_emu.
#
# The lent GPU machine (docs/hardware/RUNBOOK.md) has python3 with CUDA torch and Triton,
# nvcc, ninja, and no network.  No venv there: python3 runs the checkout through PYTHONPATH.
# Sets PY, ROOT, OUT, TORCH_CUDA_ARCH_LIST (9.0a on Hopper: the wgmma kernels), MAX_JOBS,
# CPATH (where Python.h lives when sysconfig's folder lacks it), MMA_EMU_OFFLINE=1, and
# installs a carried build (.gpu_build/build-<hash>/_C*.so) when it matches the sources.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/mma_emu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 MMA_EMU_OFFLINE=1 PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export MAX_JOBS=${MAX_JOBS:-$(nproc 2>/dev/null || echo 4)}

# hash of everything the extension is built from: a carried build is used only if it matches
src_hash() {
  (cd "$ROOT" && find csrc setup.py -type f \( -name '*.cpp' -o -name '*.cu' -o -name '*.h' \
     -o -name '*.cuh' -o -name setup.py \) -print0 | sort -z | xargs -0 cat | sha1sum | cut -c1-12)
}

if [ -z "${TORCH_CUDA_ARCH_LIST:-}" ]; then
  TORCH_CUDA_ARCH_LIST=$(timeout 120 "$PY" -c 'import torch
c = torch.cuda.get_device_capability() if torch.cuda.is_available() else None
print("" if c is None else f"{c[0]}.{c[1]}" + ("a" if c[0] == 9 else ""))' 2>/dev/null || true)
  [ -n "$TORCH_CUDA_ARCH_LIST" ] && export TORCH_CUDA_ARCH_LIST
fi

python_h() {   # the folder holding Python.h for $PY, or nothing
  local inc
  inc=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
  if [ -f "$inc/Python.h" ]; then echo "$inc"; return; fi
  local ver base
  ver=$("$PY" -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')
  base=$("$PY" -c 'import sys; print(sys.base_prefix)')
  for d in "$base/include/$ver" "/usr/include/$ver" "/usr/local/include/$ver"; do
    [ -f "$d/Python.h" ] && { echo "$d"; return; }
  done
  timeout 30 find / -xdev -path "*/$ver/Python.h" 2>/dev/null | head -1 | xargs -r dirname
}

so_loaded_with_cuda() {   # the extension in the checkout imports and has the CUDA kernels
  timeout 120 "$PY" -c 'import torch, torch_mma_emu
import sys; sys.exit(0 if hasattr(torch.ops.mma_emu, "_mma_instr") else 1)' >/dev/null 2>&1
}

install_carried_build() {   # .gpu_build/build-<hash>/_C*.so[.gz] -> torch_mma_emu/
  local h dir
  h=$(src_hash)
  dir="$ROOT/.gpu_build/build-$h"
  if [ ! -d "$dir" ]; then
    if ls -d "$ROOT"/.gpu_build/build-* >/dev/null 2>&1; then
      echo "[env] the carried build is for other sources (want build-$h): rebuilding"
    fi
    return 1
  fi
  for f in "$dir"/_C*.so.gz; do [ -f "$f" ] && gunzip -c "$f" >"$ROOT/torch_mma_emu/$(basename "${f%.gz}")"; done
  for f in "$dir"/_C*.so; do [ -f "$f" ] && cp "$f" "$ROOT/torch_mma_emu/"; done
  echo "[env] installed the carried build build-$h"
}
