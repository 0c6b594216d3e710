"""scripts/bench_emulator.py --avx2: both sides of the ratio capped to AVX2 (the emulator's
kernels and torch's matmul), so an AVX2-only CPU is measured on an AVX-512 one."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"),
                    reason="needs an x86 CPU with AVX2")
def test_avx2_caps_both_sides():
    env = {k: v for k, v in os.environ.items()
           if k not in ("MMA_EMU_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")}
    env["PYTHONPATH"] = str(ROOT)
    r = subprocess.run([sys.executable, str(ROOT / "scripts/bench_emulator.py"), "--all", "--avx2",
                        "--size", "64", "--reps", "1", "--threads", "1", "--only", "sm90 fp16"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "MMA_EMU_CPU_ISA=avx2" in r.stdout and "capability now AVX2" in r.stdout
    rows = [line for line in r.stdout.splitlines() if "t_fdpa" in line]
    assert rows and all("avx2:fdpa" in line for line in rows)
