#!/usr/bin/env bash
# The test suite on a fresh or existing checkout: sets up .venv, builds, compiles the CUDA
# sources with nvcc where nvcc exists, checks that a wheel of the checkout installs into a fresh
# venv and runs (scripts/check_wheel.sh; MMA_EMU_SKIP_WHEEL=1 skips it), runs pytest.
# MMA_EMU_SLOW=1 adds the slow tests.  MMA_EMU_WHEEL_TORCHES="2.13.0+cpu 2.14.1" also runs
# scripts/check_wheels.sh (the one wheel in fresh venvs of those torches; opt-in: a CUDA torch
# is about 2.7 GB of wheels and several minutes to install).
source "$(dirname "$0")/_setup_env.sh"
# the third-party zoo (transformers, timm, torchao: requirements-thirdparty.txt, setup.py's
# "thirdparty" extra) and the peer simulators (mmasim: requirements-peers.txt, the "peers"
# extra) with torch pinned; offline or failing, their tests skip
for req in requirements-thirdparty.txt requirements-peers.txt; do
  missing=$("$VPY" - "$req" <<'PY'
import importlib.util, re, sys
for line in open(sys.argv[1]):
    name = re.split(r"[<>=!~ ]", line.strip(), maxsplit=1)[0]
    if name and not name.startswith("#") and importlib.util.find_spec(name) is None:
        print(name)
PY
)
  if [ -n "$missing" ] && ! online; then
    echo "[test] offline: not installing $(echo $missing) ($req: their tests skip)"
  elif [ -n "$missing" ]; then
    echo "[test] installing $req: $(echo $missing)"
    timeout $((3 * NET_TIMEOUT)) "$VPY" -m pip install -q -r "$req" "$TORCH_PIN" \
      || echo "[test] warning: could not install $req; their tests skip"
  fi
done
# the third-party Triton zoo (Liger-Kernel, fla-core, gemlite, bitsandbytes: pinned in
# requirements-triton-zoo.txt,
# setup.py's "triton-zoo" extra; FlagGems with --no-deps: it pins numpy 1.26), torch and
# triton pinned; offline or failing, tests/triton_emu/test_triton_zoo_*.py skip
if "$VPY" -c "import triton" 2>/dev/null; then
  TRITON_PIN="triton==$("$VPY" -c 'import triton; print(triton.__version__)')"
  zoo_missing=$("$VPY" - <<'PY'
import importlib.util
for mod in ("liger_kernel", "fla", "gemlite", "bitsandbytes", "flag_gems"):
    if importlib.util.find_spec(mod) is None:
        print(mod)
PY
)
  if [ -n "$zoo_missing" ] && ! online; then
    echo "[test] offline: not installing the Triton zoo ($(echo $zoo_missing)); its tests skip"
  elif [ -n "$zoo_missing" ]; then
    echo "[test] installing the Triton zoo: $(echo $zoo_missing)"
    timeout $((3 * NET_TIMEOUT)) "$VPY" -m pip install -q -r requirements-triton-zoo.txt \
      "$TORCH_PIN" "$TRITON_PIN" || echo "[test] warning: could not install the Triton zoo"
    timeout "$NET_TIMEOUT" "$VPY" -m pip install -q --no-deps flag-gems==5.0.2 "$TORCH_PIN" \
      && timeout "$NET_TIMEOUT" "$VPY" -m pip install -q pyyaml sqlalchemy packaging "$TORCH_PIN" \
      || echo "[test] warning: could not install flag-gems; its tests skip"
  fi
fi
# timm pulls PyPI's torchvision, a CUDA build whose C extension cannot load beside a CPU torch:
# then `import torchvision` fails and, with it, `from transformers import LlamaConfig` and
# `import timm` for a user of this venv.  scripts/torchvision_guard.py, installed into the venv
# with a .pth line that imports it, lets torchvision's Python part import (its C ops stay
# unusable, as they are beside a CPU torch); where even that fails, the broken one goes.
if "$VPY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torchvision') is None)" \
    && ! "$VPY" -c "import torchvision" 2>/dev/null; then
  echo "[test] torchvision does not import beside $TORCH_PIN: installing scripts/torchvision_guard.py"
  cp scripts/torchvision_guard.py "$SITE/_mma_emu_torchvision_guard.py"
  echo "import _mma_emu_torchvision_guard" >"$SITE/_mma_emu_torchvision_guard.pth"
  if ! "$VPY" -c "import torchvision" 2>/dev/null; then
    echo "[test] warning: torchvision still does not import; removing it (timm's tests skip)"
    rm -f "$SITE/_mma_emu_torchvision_guard.py" "$SITE/_mma_emu_torchvision_guard.pth"
    "$VPY" -m pip uninstall -q -y torchvision
  fi
fi
if command -v nvcc >/dev/null 2>&1 && [ -f scripts/check_cuda_compile.sh ]; then
  echo "[test] compiling the CUDA sources with nvcc"
  PYTHON="$VPY" bash scripts/check_cuda_compile.sh
fi
if [ "${MMA_EMU_SKIP_WHEEL:-0}" != 1 ]; then
  echo "[test] the wheel a user installs: build, install into a fresh venv, run"
  PYTHON="$VPY" VPY="$VPY" bash scripts/check_wheel.sh
fi
if [ -n "${MMA_EMU_WHEEL_TORCHES:-}" ]; then
  echo "[test] one wheel for every torch: $MMA_EMU_WHEEL_TORCHES"
  VPY="$VPY" bash scripts/check_wheels.sh
fi
marker=()
[ "${MMA_EMU_SLOW:-0}" = 1 ] || marker=(-m "not slow")
echo "[test] pytest"
exec "$VPY" -m pytest -q "${marker[@]}" "$@"
