#!/usr/bin/env bash
# Build torch_mma_emu._C (incremental, ninja) and install it next to the package with an
# atomic rename, so running Python processes keep their mapping of the old library.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
MAX_JOBS=${MAX_JOBS:-2} "$PY" setup.py -q build_ext --build-lib build/lib >build/build_ext.log 2>&1 || {
  cat build/build_ext.log; echo "build_ext failed" >&2; exit 1; }
for so in build/lib/torch_mma_emu/_C*.so; do
  dest="torch_mma_emu/$(basename "$so")"
  if ! cmp -s "$so" "$dest" 2>/dev/null; then
    cp "$so" "$dest.tmp.$$" && mv -f "$dest.tmp.$$" "$dest"
  fi
done
