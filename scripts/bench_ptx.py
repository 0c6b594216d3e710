"""Speed of the PTX interpreter (torch_mma_emu.ptx) in thread-instructions per second, on
the test kernels (tests/data/ptx_kernels), with NumPy's own a + b as the same-run baseline.

    python scripts/bench_ptx.py
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from torch_mma_emu import ptx

ROOT = Path(__file__).resolve().parent.parent
mod = ptx.Module((ROOT / "tests/data/ptx_kernels/kernels_sm80.ptx").read_text())
n = 16 * 1024
rng = np.random.default_rng(0)
a, b = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
c = np.zeros(n, np.float32)
t0 = time.perf_counter()
for _ in range(100):
    np.add(a, b, out=c)
numpy_s = (time.perf_counter() - t0) / 100
runs = [("vadd 16 x 1024 threads", "vadd", 16, 1024, [a, b, c, np.int32(n)]),
        ("vadd 512 x 32 threads", "vadd", 512, 32, [a, b, c, np.int32(n)]),
        ("block_sum 16 x 1024 (an atomic a thread)", "block_sum", 16, 1024,
         [a, np.zeros(16, np.float32), np.zeros(1, np.int32), np.int32(n)])]
for what, k, g, blk, args in runs:
    st = mod.launch(k, g, blk, args)
    print(f"{what:42s} {st.thread_instructions:8d} thread-instructions, {st.seconds:6.3f} s: "
          f"{st.rate / 1e6:5.2f} M/s; {st.seconds / numpy_s:8.0f}x NumPy's a + b "
          f"({numpy_s * 1e6:.1f} us)")

# our CUDA GEMM (csrc/cuda/gemm_cuda.cu's committed sm_80 PTX) at the test's shape, one
# registry spec per kernel it launches (decode kernels included), against the CPU kernel
import sys  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
import test_ptx_cuda_gemm as T  # noqa: E402

gm = T.R.load_module()
for spec in T.FAST:
    t0 = time.perf_counter()
    suffix, bad, nout, stats = T.check(gm, spec)
    ti, sec = sum(s.thread_instructions for s in stats), sum(s.seconds for s in stats)
    print(f"gemm {T._spec_id(spec)[:58]:58s} {suffix[:34]:34s} {ti:8d} thread-instructions, "
          f"{sec:6.3f} s: {ti / sec / 1e6:5.2f} M/s; {bad} of {nout} differ from the CPU kernel")

# the instruction kernels (csrc/cuda/mma_instr.cu, sm_90a's PTX): mma.sync and wgmma over
# 128 x 64 outputs, K = 4 instructions; and the schedule kernel (sched_cuda.cu, sm_80) on
# cublas_split_k_4's CUDA route
import cuda_instr_ptx as I  # noqa: E402
import torch  # noqa: E402

from torch_mma_emu import emulated_mm  # noqa: E402
from torch_mma_emu.native import instruction_spec  # noqa: E402

im = I.load("sm90a")
for name, fa in (("mma.m16n8k16", "fp16"), ("wgmma.m64n8k16", "fp16"),
                 ("wgmma.m64n8k32", "fp8_e4m3")):
    k = I.KERNELS[name].k
    dt = torch.float16 if fa == "fp16" else torch.float8_e4m3fn
    A = torch.randn(128, 4 * k).to(dt)
    Bt = torch.randn(64, 4 * k).to(dt)
    C = torch.randn(128, 64)
    code = lambda t: t.view({1: torch.uint8, 2: torch.int16}[t.element_size()]).numpy()  # noqa: E731
    d, err, st = I.run(im, "sm90", name, fa, fa, "fp32", code(A), code(Bt), C.numpy())
    spec, _ = instruction_spec("sm90", fa, torch.float32, name)
    ref = emulated_mm(A, Bt.t(), C, arch=spec).numpy()
    bad = int((d.view(np.uint32) != ref.view(np.uint32)).sum())
    print(f"mma_instr {name:16s} {fa:9s} 128 x 64 x {4 * k:3d} {st.thread_instructions:8d} "
          f"thread-instructions, {st.seconds:6.3f} s: {st.rate / 1e6:5.2f} M/s; {bad} differ")

import test_ptx_cuda_sched as S  # noqa: E402

sm = S.R.load("sm80")
t0 = time.perf_counter()
log = S._run(sm, "cublas_split_k_4", S.SCHEDULES["cublas_split_k_4"], S.ROWS[0])
ti = sum(x[2] for x in log)
print(f"sched_cuda cublas_split_k_4 {S.SHAPE} {ti:8d} thread-instructions, "
      f"{time.perf_counter() - t0:6.3f} s (with the CPU kernel's run): "
      f"{sum(x[0] for x in log)} differ")
