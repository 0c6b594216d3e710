#!/usr/bin/env bash
# The test suite on a fresh or existing checkout: sets up .venv, builds, compiles the CUDA
# sources with nvcc where nvcc exists, checks that a wheel of the checkout installs into a fresh
# venv and runs (scripts/check_wheel.sh; MMA_EMU_SKIP_WHEEL=1 skips it), runs pytest.
# MMA_EMU_SLOW=1 adds the slow tests.
source "$(dirname "$0")/_setup_env.sh"
if command -v nvcc >/dev/null 2>&1 && [ -f scripts/check_cuda_compile.sh ]; then
  echo "[test] compiling the CUDA sources with nvcc"
  bash scripts/check_cuda_compile.sh
fi
if [ "${MMA_EMU_SKIP_WHEEL:-0}" != 1 ]; then
  echo "[test] the wheel a user installs: build, install into a fresh venv, run"
  VPY="$VPY" bash scripts/check_wheel.sh
fi
marker=()
[ "${MMA_EMU_SLOW:-0}" = 1 ] || marker=(-m "not slow")
echo "[test] pytest"
exec "$VPY" -m pytest -q "${marker[@]}" "$@"
