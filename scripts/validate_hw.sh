#!/usr/bin/env bash
# The whole GPU validation in one command, for a GPU machine without a time limit per command:
# every step of scripts/gpu/steps.sh in order (env, build + smoke test per instruction kind,
# part 1 identity, part 2 native paths, the probe, the GPU tests, the benchmarks), then the
# reports copied to docs/hardware/.  On the lent machine (10-minute commands, 8 files back)
# run the steps in separate calls instead: docs/hardware/RUNBOOK.md.
#
#   bash scripts/validate_hw.sh                 # OUT=/some/dir keeps logs, results, archive
#   bash scripts/validate_hw.sh --dry-run       # print the commands only
#   MMA_EMU_STEPS="identity native" bash scripts/validate_hw.sh     # a subset
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
[ "${1:-}" = "--dry-run" ] && export MMA_EMU_DRY_RUN=1
[ $# -gt 0 ] && [ "$1" != "--dry-run" ] && {
  echo "usage: bash scripts/validate_hw.sh [--dry-run]  (steps: MMA_EMU_STEPS, see scripts/gpu/steps.sh)" >&2; exit 2; }
export OUT=${OUT:-/tmp/mma_emu_validate}
export MMA_EMU_BUDGET=${MMA_EMU_BUDGET:-7200}
rc=0
bash "$ROOT/scripts/gpu/steps.sh" ${MMA_EMU_STEPS:-env build smoke identity native probe tests bench} || rc=$?
if [ "${MMA_EMU_DRY_RUN:-0}" != 1 ]; then
  for f in "$OUT"/*.md; do
    [ -f "$f" ] && cp "$f" "$ROOT/docs/hardware/" && echo "[validate_hw] docs/hardware/$(basename "$f")"
  done
fi
echo "[validate_hw] exit $rc; logs, results.json and mismatches.tar under $OUT"
exit $rc
