# Sourced by scripts/demo.sh and scripts/test.sh: create or reuse .venv, install what is
# missing, build the extension.  Safe to run twice; works offline when the packages exist.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BASE_PY=${PYTHON:-python3}
VPY="$ROOT/.venv/bin/python"

if [ ! -x "$VPY" ]; then
  echo "[setup] creating .venv"
  "$BASE_PY" -m venv --system-site-packages .venv
fi
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
  echo "[setup] installing torch==2.13.0 (CPU build from local disk)"
  "$VPY" -m pip install -q torch==2.13.0
fi
TORCH_PIN="torch==$("$VPY" -c 'import torch; print(torch.__version__.split("+")[0])')"

missing=()
for spec in numpy:numpy pytest:pytest hypothesis:hypothesis ninja:ninja matplotlib:matplotlib \
            graphviz:graphviz rich:rich tqdm:tqdm setuptools:setuptools wheel:wheel; do
  mod=${spec%%:*}; pkg=${spec##*:}
  "$VPY" -c "import $mod" 2>/dev/null || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[setup] installing ${missing[*]}"
  # pin torch so pip never swaps it; a missing optional package is not fatal offline
  "$VPY" -m pip install -q "${missing[@]}" "$TORCH_PIN" || echo "[setup] warning: could not install ${missing[*]}"
fi
# Triton: the GPU kernels, and their CPU interpreter in the tests (optional)
if ! "$VPY" -c "import triton" 2>/dev/null; then
  "$VPY" -m pip install -q triton==3.6.0 "$TORCH_PIN" || echo "[setup] warning: triton unavailable; its tests will skip"
fi
if ! command -v dot >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "[setup] installing graphviz (dot) for tree pictures"
  (apt-get install -y -qq graphviz >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq graphviz >/dev/null 2>&1)) \
    || echo "[setup] warning: graphviz tools unavailable; rendering tests will skip"
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
