#!/usr/bin/env bash
# The main job: set up, then show what the emulator does on this machine.
source "$(dirname "$0")/_setup_env.sh"
set -x
mma-emu archs
mma-emu compare                       # seed 003 eq. 10 on every arch: Table 8
mma-emu compare --random --size 128   # random GEMM: error in ulps against the exact product
"$VPY" scripts/bench_emulator.py      # emulated MAC/s vs torch.matmul, same run
mma-emu probe --arch sm90 --format fp8_e4m3 --verify 10000   # features, inferred spec, verified
mma-emu fit tests/data/hwdata/H100_bf16_to_fp32.npz --limit 3 # a model from recorded H100 data
mma-emu reveal matmul --backend emulated --arch sm80 --dtype float16 --m 1 --n 1 --k 32 --no-progress  # FPRev
mma-emu fit tests/data/hwdata/H100_fp8_e4m3_to_fp16.npz --limit 3  # a multi-pass instruction found in H100 data
mma-emu compare --arch sm90 --arch sm100 --schedule cublas_split_k_4  # a library schedule on top of the instructions
mma-emu preview --arch sm80,H100,MI300X --out build/preview.png --no-progress  # TinyGPT per layer on three GPUs
