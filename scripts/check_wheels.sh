#!/usr/bin/env bash
# One wheel for every torch (docs/install.md): build the wheel of this checkout ONCE (torch's
# stable ABI, Python's limited API: tagged cp310-abi3) against .venv's torch, then install it
# into one fresh venv per torch and run scripts/wheel_smoke.py there, from another folder.
# Everything is installed from local wheel folders (pip --no-index): nothing is downloaded.
#
#   bash scripts/check_wheels.sh                              # torch 2.13.0+cpu and 2.14.1
#   MMA_EMU_WHEEL_TORCHES="2.13.0+cpu" bash scripts/check_wheels.sh
#   MMA_EMU_WHEEL_DIRS="/my/wheels" ...                       # where the wheels lie
#
# A torch is given by its version; its wheel must lie in MMA_EMU_WHEEL_DIRS (default: pip's
# find-links folder and this machine's local index folders).  A CUDA build of torch
# (2.14.1 from PyPI: about 2.7 GB of wheels with its CUDA libraries) is installed with
# --no-deps and then each of its requirements found locally (a missing one, e.g.
# cuda-bindings, is named and skipped): without a GPU the CPU kernels run.  Prints the wheel
# (name, size, build time) and one line per torch: pass/fail, install and test seconds.
# The venvs are removed at the end (MMA_EMU_WHEEL_KEEP=1 keeps them).
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
VPY=${VPY:-"$ROOT/.venv/bin/python"}
WORK="$ROOT/build/wheels_check"
TORCHES=${MMA_EMU_WHEEL_TORCHES:-"2.13.0+cpu 2.14.1"}
DIRS=${MMA_EMU_WHEEL_DIRS:-"${PIP_FIND_LINKS:-/opt/wheels} /opt/pypi/files /opt/pypi-more/files"}
export PIP_RETRIES=0 PIP_DEFAULT_TIMEOUT=15 PIP_DISABLE_PIP_VERSION_CHECK=1
LOCAL=(--no-index)
for d in $DIRS; do [ -d "$d" ] && LOCAL+=(--find-links "$d"); done

rm -rf "$WORK"
mkdir -p "$WORK"
t0=$(date +%s)
MAX_JOBS=${MAX_JOBS:-2} "$VPY" -m pip wheel -q --no-build-isolation --no-deps . -w "$WORK/dist" \
  >"$WORK/wheel.log" 2>&1 || { cat "$WORK/wheel.log"; echo "[wheels] building the wheel failed" >&2; exit 1; }
WHEEL=$(ls "$WORK"/dist/torch_mma_emu-*.whl)
case "$(basename "$WHEEL")" in
  *-cp310-abi3-*) ;;
  *) echo "[wheels] $(basename "$WHEEL") is not tagged cp310-abi3" >&2; exit 1 ;;
esac
size=$(du -k "$WHEEL" | cut -f1)
echo "[wheels] built $(basename "$WHEEL") once: $(( size / 1024 )) MiB, $(( $(date +%s) - t0 )) s (against $("$VPY" -c 'import torch; print(torch.__version__)'))"

# torch's own requirements, each installed from local files where it lies there
install_requirements() {
  local py=$1 log=$2 req
  "$py" - <<'PY' >"$log.reqs"
from importlib.metadata import requires
from packaging.requirements import Requirement
for r in requires("torch") or []:
    req = Requirement(r)
    if req.marker is None or req.marker.evaluate({"extra": ""}):
        print(str(req).split(";")[0].strip())
PY
  while IFS= read -r req; do
    if ! "$py" -m pip install -q "${LOCAL[@]}" "$req" >>"$log" 2>&1; then
      echo "[wheels]   (torch requirement $req is not on local disk: skipped)"
    fi
  done <"$log.reqs"
}

fail=0
summary=()
for ver in $TORCHES; do
  venv="$WORK/venv-$ver"
  log="$WORK/install-$ver.log"
  t1=$(date +%s)
  "$VPY" -m venv "$venv"                   # fresh, no system site-packages
  py="$venv/bin/python"
  "$py" -m pip install -q "${LOCAL[@]}" packaging >"$log" 2>&1
  if ! "$py" -m pip install -q "${LOCAL[@]}" --no-deps "torch==$ver" >>"$log" 2>&1; then
    echo "[wheels] torch $ver: no wheel in $DIRS (skipped)"
    summary+=("torch $ver: SKIPPED (no local wheel)")
    continue
  fi
  install_requirements "$py" "$log"
  "$py" -m pip install -q "${LOCAL[@]}" --no-deps "$WHEEL" >>"$log" 2>&1 &&
    "$py" -m pip install -q "${LOCAL[@]}" numpy tqdm >>"$log" 2>&1 ||
    { cat "$log"; echo "[wheels] torch $ver: installing the wheel failed" >&2; fail=1; continue; }
  t2=$(date +%s)
  mkdir -p "$WORK/run-$ver"
  if (cd "$WORK/run-$ver" && PATH="$venv/bin:$PATH" "$py" "$ROOT/scripts/wheel_smoke.py") \
      >"$WORK/smoke-$ver.log" 2>&1; then
    res=pass
  else
    res=FAIL; fail=1
  fi
  sed 's/^/[wheels]   /' "$WORK/smoke-$ver.log"
  summary+=("torch $ver: $res (install $(( t2 - t1 )) s, smoke tests $(( $(date +%s) - t2 )) s, venv $(du -sm "$venv" | cut -f1) MiB)")
done
echo "[wheels] one wheel, $(basename "$WHEEL"):"
for s in "${summary[@]}"; do echo "[wheels]   $s"; done
echo "[wheels] total $(( $(date +%s) - t0 )) s"
# the venvs hold several GB (a CUDA torch): gone unless asked for; the logs stay
[ "${MMA_EMU_WHEEL_KEEP:-0}" = 1 ] || rm -rf "$WORK"/venv-*
exit $fail
