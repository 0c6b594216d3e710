#!/usr/bin/env bash
# Build torch_mma_emu._C (incremental, ninja) and install it next to the package with an
# atomic rename, so running Python processes keep their mapping of the old library.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
MAX_JOBS=${MAX_JOBS:-2} "$PY" setup.py -q build_ext --build-lib build/lib >build/build_ext.log 2>&1 || {
  cat build/build_ext.log; echo "build_ext failed" >&2; exit 1; }
# the library is _C.abi3.so (stable ABI, limited API); a _C.cpython-*.so left by a build
# from before would be imported in its place (Python tries that suffix first): remove it
built=$(ls -t build/lib/torch_mma_emu/_C*.so | head -1)
for old in build/lib/torch_mma_emu/_C*.so torch_mma_emu/_C*.so; do
  [ "$(basename "$old")" = "$(basename "$built")" ] || rm -f "$old"
done
dest="torch_mma_emu/$(basename "$built")"
if ! cmp -s "$built" "$dest" 2>/dev/null; then
  cp "$built" "$dest.tmp.$$" && mv -f "$dest.tmp.$$" "$dest"
fi
