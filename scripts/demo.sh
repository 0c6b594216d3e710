#!/usr/bin/env bash
# The main job: set up, then show what the emulator does on this machine.
source "$(dirname "$0")/_setup_env.sh"
set -x
mma-emu archs
mma-emu compare                       # seed 003 eq. 10 on every arch: Table 8
mma-emu compare --random --size 128   # random GEMM: error in ulps against the exact product
"$VPY" scripts/bench_emulator.py      # emulated MAC/s vs torch.matmul, same run
