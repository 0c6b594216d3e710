#!/usr/bin/env bash
# Steps of the GPU validation, each fitting the lent machine's 10-minute commands, run in the
# order given within one time budget; everything they write goes to $OUT in at most 8 files
# (docs/hardware/RUNBOOK.md says which call runs which steps and what to commit).
#
#   bash scripts/gpu/steps.sh cmd1     # the 15-minute lease's first command (about 9 minutes)
#   bash scripts/gpu/steps.sh cmd2     # its second, only with 5 minutes or more left
#   bash scripts/gpu/steps.sh env build smoke identity          # any steps, in this order
#   bash scripts/gpu/steps.sh native:fp16,bf16,tf32,fp32,fp64   # part 2 for these formats
#   bash scripts/gpu/steps.sh identity@150 probe@200            # STEP@SECONDS: its time limit
#   MMA_EMU_BUDGET=570   seconds for all the steps of this call (each gets what is left)
#   MMA_EMU_DRY_RUN=1    print the commands, run nothing (no GPU needed)
#   MMA_EMU_STAND_IN=1   run the steps that have a CPU stand-in with it (rehearsal timing)
#   MMA_EMU_SANITIZE=0   smoke: skip the compute-sanitizer pass
#   MMA_EMU_FORCE_BUILD=1  build even if a build is there
#   MMA_EMU_VALIDATE_ARGS="--native-outputs 300000"   extra validate_hw.py options
#   MMA_EMU_PROBE_ARGS="--instructions all"           extra probe_native.py options
#
# Steps: env, build, smoke, identity, native[:FORMATS], mma (native, the instruction kernels
# only), speed (emulated_mm 4096^3 against cuBLAS), probe, tests, bench, profile, fprev,
# preview, schedules, triton, approx, reductions.  Plans (RUNBOOK.md): cmd1 = env build@150
# smoke@60 identity@90 mma@120 triton@75 speed@40 (validate outputs 200000, no sanitizer);
# cmd2 = approx@120 reductions@30 schedules@60 fprev@60 (MMA_EMU_BUDGET=240 unless set).  Every step after `build` builds first when no CUDA build is there (a carried
# .gpu_build/build-<hash>/ is installed when it matches the sources).  Files under $OUT:
#   steps.log             every command and its output (env, build log on failure, smoke,
#                         probe, tests, bench, profile, fprev, preview)
#   build-<hash>/_C*.so   the extension built in this call (.so.gz above 15 MiB): copy the
#                         folder to .gpu_build/ here and carry it in later calls
#   results.json, <GPU>.md, validate.log, mismatches.tar   validate_hw.py (identity, native, bench)
#   <GPU>_probe.md        probe_native.py;  fprev_trees.tar  trees (JSON + PNG) of fprev
#   schedules.md          scripts/gpu/schedules.py: library calls against the schedule presets
#   triton.md, triton_mismatches.tar   scripts/gpu/triton_emulate.py: Triton kernels natively
#                         against torch_mma_emu.triton.emulate(this GPU's arch), bit for bit
#   approx.npz, approx.md scripts/gpu/approx.py: the approximate fp32 instructions recorded,
#                         the gpu_math models swept against them
#   reductions.npz        scripts/gpu/reductions.py: CUDA sum / softmax / layer_norm recorded,
#                         issue 39's cases (hw/aten_checks.py; --compare checks the models)
set -uo pipefail
# the plans of the 15-minute lease (docs/hardware/RUNBOOK.md): one argument expands to steps
if [ "$#" = 1 ] && [ "$1" = cmd1 ]; then
  set -- env build@150 smoke@60 identity@90 mma@120 triton@75 speed@40
  export MMA_EMU_SANITIZE=${MMA_EMU_SANITIZE:-0} MMA_EMU_IDENTITY_OUTPUTS=${MMA_EMU_IDENTITY_OUTPUTS:-200000} \
    MMA_EMU_NATIVE_OUTPUTS=${MMA_EMU_NATIVE_OUTPUTS:-200000}
elif [ "$#" = 1 ] && [ "$1" = cmd2 ]; then
  set -- approx@120 reductions@30 schedules@60 fprev@60
  export MMA_EMU_BUDGET=${MMA_EMU_BUDGET:-240}
fi
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
BUDGET=${MMA_EMU_BUDGET:-570}
START=$(date +%s)
LOG="$OUT/steps.log"
DRY=${MMA_EMU_DRY_RUN:-0}
RC=0

left() { echo $(( BUDGET - ($(date +%s) - START) )); }
say() { echo "$*" | tee -a "$LOG"; }
# run LIMIT CMD...: the command under a time limit, its output in the log; its exit code
run() {
  local limit=$1; shift
  say "+ [${limit}s] $*"
  [ "$DRY" = 1 ] && return 0
  timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  [ "$rc" = 124 ] && say "[steps] time limit: $*"
  return "$rc"
}
# limit_for WANT: seconds for a command that would like WANT, from what is left of the budget
# and of the step's own limit (STEP@SECONDS; STEP_END) (0: skip it)
STEP_END=0
limit_for() {
  local l s; l=$(( $(left) - 15 ))
  if [ "$STEP_END" -gt 0 ]; then s=$(( STEP_END - $(date +%s) )); [ "$s" -lt "$l" ] && l=$s; fi
  [ "$l" -lt 30 ] && { echo 0; return; }
  [ "$l" -lt "$1" ] && echo "$l" || echo "$1"
}

gpu_key() {
  [ "$DRY" = 1 ] && { echo GPU; return; }
  timeout 120 "$PY" -c 'import re, torch
n = torch.cuda.get_device_name() if torch.cuda.is_available() else "nogpu"
m = re.search(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b", n)
print(m.group(1) if m else re.sub(r"[^A-Za-z0-9]+", "_", n).strip("_"))' 2>/dev/null || echo GPU
}

step_env() {
  say "[env] $(date -u) budget ${BUDGET}s, OUT=$OUT, MAX_JOBS=$MAX_JOBS, TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-}"
  [ "$DRY" = 1 ] && return 0
  { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv 2>&1
    nvcc --version 2>&1 | tail -2
    "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], sys.executable); print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1
    "$PY" -c 'import triton; print("triton", triton.__version__)' 2>&1 | tail -1
    echo "Python.h: $(python_h || true)"
    for t in ninja compute-sanitizer ncu cuobjdump dot; do echo "$t: $(command -v $t || echo missing)"; done
    echo "cpus $(nproc), disk: $(df -h "$ROOT" | tail -1)"
  } 2>&1 | tee -a "$LOG"
}

step_build() {
  if [ "$DRY" != 1 ] && [ "${MMA_EMU_FORCE_BUILD:-0}" != 1 ] && [ "${MMA_EMU_STAND_IN:-0}" != 1 ]; then
    so_loaded_with_cuda && { say "[build] a CUDA build is there"; return 0; }
    install_carried_build | tee -a "$LOG"
    so_loaded_with_cuda && { say "[build] using the carried build"; return 0; }
  fi
  local inc lim h
  if [ "$DRY" != 1 ]; then
    inc=$(python_h || true)
    if [ -z "$inc" ]; then
      say "[build] FAIL: no Python.h for $PY (the build needs the Python headers; RUNBOOK.md: contingency)"
      return 1
    fi
    export CPATH="$inc${CPATH:+:$CPATH}"
  fi
  lim=$(limit_for 420)
  [ "$lim" = 0 ] && { say "[build] skipped: no time left"; return 1; }
  mkdir -p "$ROOT/build"
  local t0; t0=$(date +%s)
  (cd "$ROOT" && run "$lim" env PYTHON="$PY" bash scripts/build_ext.sh) || {
    say "[build] FAIL; the end of build/build_ext.log:"; tail -60 "$ROOT/build/build_ext.log" 2>/dev/null | tee -a "$LOG"; return 1; }
  say "[build] done in $(( $(date +%s) - t0 )) s"
  [ "$DRY" = 1 ] || [ "${MMA_EMU_STAND_IN:-0}" = 1 ] && return 0
  so_loaded_with_cuda || { say "[build] FAIL: the build has no CUDA kernels (torch without CUDA? nvcc missing?)"; return 1; }
  h=$(src_hash)
  mkdir -p "$OUT/build-$h"
  for so in "$ROOT"/torch_mma_emu/_C*.so; do
    if [ "$(stat -c %s "$so")" -gt $((15 << 20)) ]; then gzip -1 -c "$so" >"$OUT/build-$h/$(basename "$so").gz"
    else cp "$so" "$OUT/build-$h/"; fi
  done
  say "[build] $(ls -l "$OUT/build-$h" | tail -n +2)"
  (command -v cuobjdump >/dev/null && cuobjdump --list-elf "$ROOT"/torch_mma_emu/_C*.so 2>&1 | head -5) | tee -a "$LOG"
}

step_smoke() {
  local kinds k lim
  [ "${MMA_EMU_STAND_IN:-0}" = 1 ] && { say "[smoke] no CPU stand-in"; return 0; }
  if [ "$DRY" = 1 ]; then kinds="emulated mma:wgmma.m64n8k16 triton cublas"
  else kinds=$(timeout 120 "$PY" scripts/gpu/smoke.py --list 2>>"$LOG") || { say "[smoke] FAIL: cannot list kinds"; return 1; }
  fi
  for k in $kinds; do        # each kind in its own process: a sticky CUDA error stays there
    lim=$(limit_for 120); [ "$lim" = 0 ] && { say "[smoke] $k skipped: no time left"; continue; }
    run "$lim" "$PY" scripts/gpu/smoke.py "$k"
    say "[smoke] $k exit $?"
  done
  if [ "${MMA_EMU_SANITIZE:-1}" = 1 ] && { [ "$DRY" = 1 ] || command -v compute-sanitizer >/dev/null; }; then
    lim=$(limit_for "${WANT:-240}"); [ "$lim" = 0 ] && { say "[smoke] sanitizer pass skipped: no time left"; return 0; }
    run "$lim" compute-sanitizer --tool memcheck --error-exitcode 9 --print-limit 20 \
      "$PY" scripts/gpu/smoke.py --instructions
    say "[smoke] compute-sanitizer memcheck over the instruction kernels and emulated_mm: exit $? (9: memory errors)"
  fi
}

validate() {   # validate_hw.py, resuming from this call's and carried results
  local lim; lim=$(limit_for "${WANT:-$1}"); shift
  local counts=()     # the plans' smaller counts (cmd1), else validate_hw.py's defaults
  [ -n "${MMA_EMU_IDENTITY_OUTPUTS:-}" ] && counts+=(--outputs "$MMA_EMU_IDENTITY_OUTPUTS")
  [ -n "${MMA_EMU_NATIVE_OUTPUTS:-}" ] && counts+=(--native-outputs "$MMA_EMU_NATIVE_OUTPUTS")
  [ "${MMA_EMU_STAND_IN:-0}" = 1 ] && counts+=(--device cpu)
  [ "$lim" = 0 ] && { say "[validate] $* skipped: no time left"; return 0; }
  local resume=()
  for f in "$ROOT"/.gpu_build/results*.json "$OUT/results.json"; do [ -f "$f" ] && resume+=("$f"); done
  # shellcheck disable=SC2086   (MMA_EMU_VALIDATE_ARGS: extra options, split on purpose)
  run "$lim" "$PY" scripts/validate_hw.py --out "$OUT" --report "$OUT/$GPU.md" \
    --time-limit $(( lim - 30 > 30 ? lim - 30 : 30 )) "$@" ${counts[@]:+"${counts[@]}"} \
    ${MMA_EMU_VALIDATE_ARGS:-} ${resume[@]:+--resume "${resume[@]}"}
}

step_probe() {
  local lim; lim=$(limit_for "${WANT:-480}"); [ "$lim" = 0 ] && { say "[probe] skipped: no time left"; return 0; }
  run "$lim" "$PY" scripts/probe_native.py -n "${MMA_EMU_PROBE_N:-100000}" \
    --time-limit $(( lim - 20 )) --report "$OUT/${GPU}_probe.md" ${MMA_EMU_PROBE_ARGS:-}
}

step_tests() {
  local lim; lim=$(limit_for "${WANT:-420}"); [ "$lim" = 0 ] && { say "[tests] skipped: no time left"; return 0; }
  run "$lim" "$PY" -m pytest -q -m gpu tests -p no:cacheprovider -rfE --timeout 240
}

step_bench() {
  local lim; lim=$(limit_for "${WANT:-300}"); [ "$lim" = 0 ] && { say "[bench] skipped: no time left"; return 0; }
  run "$lim" "$PY" scripts/bench_emulator.py --device cuda --size "${MMA_EMU_BENCH_SIZE:-4096}" --all
  validate 120 --parts bench --bench-size "${MMA_EMU_BENCH_SIZE:-4096}"
}

step_profile() {   # where the time of the sm90 fp16 emulated GEMM goes (ncu, no clock control)
  local lim; lim=$(limit_for "${WANT:-240}"); [ "$lim" = 0 ] && { say "[profile] skipped: no time left"; return 0; }
  run "$lim" ncu --clock-control none --target-processes all --kernel-name regex:gemm \
    --launch-skip 1 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    "$PY" -c 'import torch, torch_mma_emu as tme
A = torch.randn(4096, 4096, device="cuda").half(); B = torch.randn(4096, 4096, device="cuda").half()
for _ in range(2): tme.emulated_mm(A, B, arch="sm90")
torch.cuda.synchronize()'
}

step_fprev() {     # FPRev on torch.sum and cuBLAS: trees as JSON in one tar (PNGs: RUNBOOK.md)
  local d=/tmp/mma_emu_fprev lim c name k n dev=cuda be=cublas
  [ "${MMA_EMU_STAND_IN:-0}" = 1 ] && { dev=cpu; be=torch; }
  rm -rf "$d"; mkdir -p "$d"
  for n in 1024 4099 100000; do     # torch.sum first: its trees are the reductions' anchor
    lim=$(limit_for 60); [ "$lim" = 0 ] && break
    # n = 1e5 is above reveal's default bound of 2^16 summands (torch_mma_emu/limits.py)
    run "$lim" env MMA_EMU_MAX_REVEAL_N=100000 "$PY" -m torch_mma_emu reveal sum --n "$n" \
      --device "$dev" --dtype float32 --no-progress --out "$d/torch_sum_fp32_n$n.json"
  done
  local cases=("fp32:--dtype float32 --in-format fp32" "tf32:--dtype float32 --in-format tf32"
               "fp16:--dtype float16" "bf16:--dtype bfloat16" "fp8_e4m3:--dtype float8_e4m3fn")
  for c in "${cases[@]}"; do
    local ks="64 1024"      # fp8 e4m3: FPRev's masks leave room for at most 16 summands
    [[ "$c" == fp8* ]] && ks="16"
    for k in $ks; do
      lim=$(limit_for 90); [ "$lim" = 0 ] && { say "[fprev] the rest skipped: no time left"; break 2; }
      name="cublas_${c%%:*}_m64n64k$k"
      # shellcheck disable=SC2086   (the case's arguments split on purpose)
      run "$lim" "$PY" -m torch_mma_emu reveal matmul --backend "$be" --device "$dev" ${c#*:} \
        --m 64 --n 64 --k "$k" --no-progress --out "$d/$name.json"
    done
  done
  [ "$DRY" = 1 ] || (cd "$d" && tar cf "$OUT/fprev_trees.tar" . && say "[fprev] $(tar tf "$OUT/fprev_trees.tar" | grep -c json) trees in fprev_trees.tar")
}

step_preview() {
  local lim; lim=$(limit_for "${WANT:-300}"); [ "$lim" = 0 ] && { say "[preview] skipped: no time left"; return 0; }
  run "$lim" "$PY" scripts/gpu/preview_cuda.py
}

step_schedules() {  # library schedules (cuBLAS split-K, _scaled_mm, Triton fp8) vs presets
  local lim; lim=$(limit_for "${WANT:-240}"); [ "$lim" = 0 ] && { say "[schedules] skipped: no time left"; return 0; }
  local si=(); [ "${MMA_EMU_STAND_IN:-0}" = 1 ] && si=(--stand-in)
  run "$lim" "$PY" scripts/gpu/schedules.py --out "$OUT/schedules.md" ${si[@]:+"${si[@]}"}
}

step_triton() {   # whole Triton programs: native kernels vs torch_mma_emu.triton.emulate
  local lim; lim=$(limit_for "${WANT:-240}"); [ "$lim" = 0 ] && { say "[triton] skipped: no time left"; return 0; }
  local si=(); [ "${MMA_EMU_STAND_IN:-0}" = 1 ] && si=(--stand-in --quick)
  run "$lim" "$PY" scripts/gpu/triton_emulate.py --out "$OUT/triton.md" \
    --archive "$OUT/triton_mismatches.tar" ${si[@]:+"${si[@]}"}
}

step_approx() {   # the approximate fp32 instructions: recording + the models' sweep
  local lim; lim=$(limit_for "${WANT:-150}"); [ "$lim" = 0 ] && { say "[approx] skipped: no time left"; return 0; }
  local si=(); [ "${MMA_EMU_STAND_IN:-0}" = 1 ] && si=(--stand-in)
  run "$lim" "$PY" scripts/gpu/approx.py --out "$OUT/approx.npz" --report "$OUT/approx.md" \
    --time-limit $(( lim > 60 ? lim - 40 : lim / 2 )) ${si[@]:+"${si[@]}"}
}

step_reductions() {   # CUDA sum / softmax / layer_norm on seeded inputs, for offline fitting
  local lim; lim=$(limit_for "${WANT:-60}"); [ "$lim" = 0 ] && { say "[reductions] skipped: no time left"; return 0; }
  local dev=cuda; [ "${MMA_EMU_STAND_IN:-0}" = 1 ] && dev=cpu
  run "$lim" "$PY" scripts/gpu/reductions.py --device "$dev" --out "$OUT/reductions.npz"
}

[ $# -gt 0 ] || { echo "usage: bash scripts/gpu/steps.sh STEP [STEP ...]  (see the header)" >&2; exit 2; }
for s in "$@"; do
  s=${s%@*}
  case "${s%%:*}" in
    env|build|smoke|identity|native|mma|speed|probe|tests|bench|profile|fprev|preview|schedules|triton|approx|reductions) ;;
    *) echo "steps.sh: unknown step '$s'; steps: env build smoke identity native[:FORMATS] mma speed probe tests bench profile fprev preview schedules triton approx reductions; plans: cmd1 cmd2" >&2; exit 2 ;;
  esac
done
cd "$ROOT"
GPU=$(gpu_key)
say "[steps] $* (GPU key $GPU)"
for s in "$@"; do
  t0=$(date +%s)
  WANT="" STEP_END=0                       # STEP@SECONDS: the step's own time limit
  [[ "$s" == *@* ]] && { WANT=${s##*@}; s=${s%@*}; STEP_END=$(( t0 + WANT )); }
  case "$s" in
    env) step_env ;;
    build) step_build || { RC=1; say "[steps] no build: the remaining steps cannot run"; break; } ;;
    *)
      if [ "$DRY" != 1 ] && [ "${MMA_EMU_STAND_IN:-0}" != 1 ] && ! so_loaded_with_cuda; then
        step_build || { RC=1; say "[steps] no build: the remaining steps cannot run"; break; }
      fi
      if [ "${MMA_EMU_STAND_IN:-0}" = 1 ] && [[ "$s" =~ ^(native|mma|speed|bench|probe|tests|profile|preview) ]]; then
        say "[$s] no CPU stand-in"; say "[steps] $s: 0 s, $(left) s left"; continue
      fi
      case "$s" in
        smoke) step_smoke ;;
        identity) validate 300 --parts identity ;;
        native) validate 540 --parts native ;;
        native:*) validate 540 --parts native --formats "${s#native:}" ;;
        mma) validate 540 --parts native --paths mma ;;
        speed) validate 60 --parts bench --bench-size "${MMA_EMU_BENCH_SIZE:-4096}" ;;
        approx) step_approx ;;
        reductions) step_reductions ;;
        probe) step_probe ;;
        tests) step_tests ;;
        bench) step_bench ;;
        profile) step_profile ;;
        fprev) step_fprev ;;
        preview) step_preview ;;
        schedules) step_schedules ;;
        triton) step_triton ;;
      esac
      rc=$?; [ "$rc" != 0 ] && RC=1 ;;
  esac
  say "[steps] $s: $(( $(date +%s) - t0 )) s, $(left) s left"
done
say "[steps] done, exit $RC; files under $OUT: $(ls "$OUT" | tr '\n' ' ')"
exit $RC
