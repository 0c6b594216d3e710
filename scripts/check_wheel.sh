#!/usr/bin/env bash
# The install a user does, checked: build a wheel of this checkout against .venv's torch
# (reusing build/'s compiled objects: only the link runs when nothing changed), install it
# into a fresh virtual environment without system site-packages, and from another folder
# import the package, run one emulated_mm and the mma-emu script.  Run by scripts/test.sh;
# MMA_EMU_SKIP_WHEEL=1 skips it.  Never downloads a torch: torch comes from a local wheel
# (pip's find-links) at .venv's exact version, else .venv's torch folder is linked in.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
VPY=${VPY:-"$ROOT/.venv/bin/python"}
WORK="$ROOT/build/wheel_check"
t0=$(date +%s)
rm -rf "$WORK"
mkdir -p "$WORK"
MAX_JOBS=${MAX_JOBS:-1} "$VPY" -m pip wheel -q --no-build-isolation --no-deps . -w "$WORK/dist" \
  >"$WORK/wheel.log" 2>&1 || { cat "$WORK/wheel.log"; echo "[wheel] building the wheel failed" >&2; exit 1; }
WHEEL=$(ls "$WORK"/dist/torch_mma_emu-*.whl)
"$VPY" - "$WHEEL" <<'PY'
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = ["torch_mma_emu/__init__.py", "torch_mma_emu/py.typed",
        "torch_mma_emu/triton_kernels/__init__.py", "torch_mma_emu/triton_kernels/gemm.py",
        "torch_mma_emu/fprev/collective_worker.py"]
missing = [n for n in need if n not in names]
if not any(n.startswith("torch_mma_emu/_C") and n.endswith(".so") for n in names):
    missing.append("torch_mma_emu/_C*.so")
if missing:
    sys.exit(f"[wheel] the wheel lacks {', '.join(missing)}")
PY

TORCH_VER=$("$VPY" -c 'import torch; print(torch.__version__)')
"$VPY" -m venv "$WORK/venv"         # no --system-site-packages
WPY="$WORK/venv/bin/python"
PIP=("$WPY" -m pip)
export PIP_RETRIES=0 PIP_DEFAULT_TIMEOUT=15 PIP_DISABLE_PIP_VERSION_CHECK=1
WSITE=$("$WPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# A pin with a local label (2.13.0+cpu) matches no PyPI file, so this never downloads a
# multi-GB torch; without a label (a PyPI build), link .venv's torch instead.
if [[ "$TORCH_VER" == *+* ]] && "${PIP[@]}" install -q "torch==$TORCH_VER" >"$WORK/torch.log" 2>&1; then
  how="torch $TORCH_VER installed from local files"
else   # no local wheel of this torch (a CUDA build, another machine): link .venv's torch in
  "$VPY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' \
    >"$WSITE/_venv_torch.pth"
  how="torch $TORCH_VER linked from .venv"
fi
"${PIP[@]}" install -q --no-deps "$WHEEL"
if ! "${PIP[@]}" install -q "$WHEEL" >"$WORK/deps.log" 2>&1; then   # numpy, tqdm (offline: .venv's)
  "$VPY" -c 'import os, numpy, tqdm; print("\n".join(os.path.dirname(os.path.dirname(m.__file__)) for m in (numpy, tqdm)))' \
    >>"$WSITE/_venv_deps.pth"
fi
cd "$WORK"   # not the checkout: the installed package must be the one imported
"$WPY" - <<'PY'
import os, torch, torch_mma_emu as tme
assert "site-packages" in tme.__file__, tme.__file__
A = torch.tensor([[-2.0 ** 13, -0.5, -0.25, -0.125]], dtype=torch.float16)
B = torch.tensor([[2.0 ** 10], [1.0], [1.0], [1.0]], dtype=torch.float16)
C = torch.tensor([[2.0 ** 23]])
assert tme.emulated_mm(A, B, C, arch="sm90").item() == -0.75   # seed 003 Table 8
import importlib.util
assert importlib.util.find_spec("torch_mma_emu.triton_kernels") is not None
PY
"$WORK/venv/bin/mma-emu" compare --arch sm90 >/dev/null
if "$WORK/venv/bin/mma-emu" compare --random --size 0 2>"$WORK/err.txt"; then
  echo "[wheel] mma-emu accepted --size 0" >&2; exit 1
fi
[ "$(wc -l <"$WORK/err.txt")" = 1 ] || { cat "$WORK/err.txt"; echo "[wheel] error is not one line" >&2; exit 1; }
echo "[wheel] $(basename "$WHEEL") installs into a fresh venv ($how) and runs: $(( $(date +%s) - t0 )) s"
