#!/usr/bin/env bash
# Times the T-FDPA inner loop with this project's vector layer, ATen's at::vec::Vectorized and
# Google Highway (skipped without libhwy-dev), for AVX2 and AVX-512 (docs/cpu_fast.md).
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-../../.venv/bin/python}
TI=$("$PY" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "include"))')
OUT=${TMPDIR:-/tmp}/vector_layers; mkdir -p "$OUT"
F="-std=c++20 -O3 -ffp-contract=off"
for isa in avx2 avx512; do
  if [ $isa = avx2 ]; then M="-mavx2 -mfma -mf16c"; CAP="-DCPU_CAPABILITY=AVX2 -DCPU_CAPABILITY_AVX2"; else
    M="-mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq"; CAP="-DCPU_CAPABILITY=AVX512 -DCPU_CAPABILITY_AVX512"; fi
  g++ $F -DLAYER_REPO=1 -DISA512=$([ $isa = avx512 ] && echo 1 || echo 0) tfdpa_loop.cpp -o "$OUT/repo_$isa"
  g++ $F $M $CAP -DLAYER_ATEN=1 -I"$TI" tfdpa_loop.cpp -o "$OUT/aten_$isa"
  echo "$isa repo:  $("$OUT/repo_$isa")"
  echo "$isa aten:  $("$OUT/aten_$isa")"
  if [ -f /usr/include/hwy/highway.h ]; then
    # Highway picks its static target from -march (all of its AVX2 / AVX3 requirements)
    H=$([ $isa = avx2 ] && echo "-march=haswell" || echo "-march=skylake-avx512")
    g++ $F $H -DLAYER_HWY=1 tfdpa_loop.cpp -o "$OUT/hwy_$isa"
    echo "$isa hwy:   $("$OUT/hwy_$isa")"
  fi
done
