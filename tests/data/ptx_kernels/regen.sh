#!/bin/bash
# Regenerate kernels_sm80.ptx from kernels.cu (needs nvcc; the tests read the committed PTX).
# nvcc 13.0's -arch=sm_90 PTX of these kernels differs only in its .target line.
set -e
cd "$(dirname "$0")"
nvcc -arch=sm_80 -ptx -O3 kernels.cu -o kernels_sm80.ptx
