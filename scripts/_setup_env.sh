# Sourced by scripts/demo.sh and scripts/test.sh: create or reuse .venv, install what is
# missing, build the extension.  Safe to run twice; works offline when the packages exist.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BASE_PY=${PYTHON:-python3}
VPY="$ROOT/.venv/bin/python"

# --- GPU machine / offline (issue 10): MMA_EMU_OFFLINE=1 skips every network install step;
# pip and apt-get get a time limit (MMA_EMU_NET_TIMEOUT s) so that no network hangs them; a
# python without ensurepip still gets a venv (without pip).
NET_TIMEOUT=${MMA_EMU_NET_TIMEOUT:-120}
online() { [ "${MMA_EMU_OFFLINE:-0}" != 1 ]; }
if [ ! -x "$VPY" ]; then
  echo "[setup] creating .venv"
  "$BASE_PY" -m venv --system-site-packages .venv 2>/dev/null || {
    echo "[setup] venv with pip failed (no ensurepip?): creating it without pip"
    rm -rf .venv; "$BASE_PY" -m venv --system-site-packages --without-pip .venv; }
fi
# --- end of the GPU machine / offline block
SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The base python may itself be a venv holding torch (the GPU machine's /opt/torch/.venv):
# make its packages visible too.
"$BASE_PY" -c 'import site, sys; print("\n".join(site.getsitepackages()))' >"$SITE/_mma_emu_base.pth" 2>/dev/null || true
echo "$ROOT" >"$SITE/_mma_emu_repo.pth"

torch_ok() {
  "$VPY" - <<'PY'
import sys
try:
    import torch
except Exception:
    sys.exit(1)
v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
sys.exit(0 if (2, 11) <= v <= (2, 14) else 1)
PY
}
if ! torch_ok; then
  online || { echo "[setup] no torch 2.11-2.14 for $VPY and MMA_EMU_OFFLINE=1: cannot install" >&2; exit 1; }
  echo "[setup] installing torch==2.13.0 (CPU build from local disk)"
  timeout "$NET_TIMEOUT" "$VPY" -m pip install -q torch==2.13.0
fi
TORCH_PIN="torch==$("$VPY" -c 'import torch; print(torch.__version__.split("+")[0])')"

missing=()
for spec in numpy:numpy pytest:pytest hypothesis:hypothesis ninja:ninja matplotlib:matplotlib \
            graphviz:graphviz rich:rich tqdm:tqdm setuptools:setuptools wheel:wheel; do
  mod=${spec%%:*}; pkg=${spec##*:}
  "$VPY" -c "import $mod" 2>/dev/null || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ] && ! online; then
  echo "[setup] offline: not installing ${missing[*]} (their tests skip)"
elif [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing ${missing[*]}"
  # pin torch so pip never swaps it; a missing optional package is not fatal offline
  timeout "$NET_TIMEOUT" "$VPY" -m pip install -q "${missing[@]}" "$TORCH_PIN" || echo "[setup] warning: could not install ${missing[*]}"
fi
# Triton: the GPU kernels, and their CPU interpreter in the tests (optional)
if ! "$VPY" -c "import triton" 2>/dev/null && online; then
  timeout "$NET_TIMEOUT" "$VPY" -m pip install -q triton==3.6.0 "$TORCH_PIN" || echo "[setup] warning: triton unavailable; its tests will skip"
fi
if online && ! command -v dot >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "[setup] installing graphviz (dot) for tree pictures"
  (timeout "$NET_TIMEOUT" apt-get install -y -qq graphviz >/dev/null 2>&1 || (timeout "$NET_TIMEOUT" apt-get update -qq >/dev/null 2>&1 && timeout "$NET_TIMEOUT" apt-get install -y -qq graphviz >/dev/null 2>&1)) \
    || echo "[setup] warning: graphviz tools unavailable; rendering tests will skip"
fi

# aarch64 cross compiler and qemu-user: the NEON kernels' exactness test
# (tests/test_cpu_fast_native.py skips without them)
if online && { ! command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || ! command -v qemu-aarch64 >/dev/null 2>&1; } \
    && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "[setup] installing g++-aarch64-linux-gnu and qemu-user (NEON exactness test)"
  (timeout "$NET_TIMEOUT" apt-get install -y -qq g++-aarch64-linux-gnu qemu-user >/dev/null 2>&1 || (timeout "$NET_TIMEOUT" apt-get update -qq >/dev/null 2>&1 && timeout "$((NET_TIMEOUT * 3))" apt-get install -y -qq g++-aarch64-linux-gnu qemu-user >/dev/null 2>&1)) \
    || echo "[setup] warning: aarch64 cross tools unavailable; the NEON test will skip"
fi

# the build needs Python.h (a python without its -dev package has none)
if ! "$VPY" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
  if [ -z "${CPATH:-}" ]; then
    echo "[setup] no Python.h for $VPY: install the python dev package or set CPATH to its folder" >&2
    exit 1
  fi
fi
echo "[setup] building torch_mma_emu._C"
mkdir -p build
PYTHON="$VPY" bash scripts/build_ext.sh

# console script without an editable install
cat >"$ROOT/.venv/bin/mma-emu" <<PY
#!$VPY
import sys
from torch_mma_emu.cli import main
if __name__ == "__main__":
    sys.exit(main())
PY
chmod +x "$ROOT/.venv/bin/mma-emu"
export PATH="$ROOT/.venv/bin:$PATH"
