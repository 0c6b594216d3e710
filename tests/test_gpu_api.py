"""The GPU-facing API where there is no GPU: clear errors from native_mm / mma_instruction
for CPU tensors and bad arguments, and a dry run of scripts/validate_hw.py (part 1 with the
CPU kernel on both sides, and its report)."""
import os
import subprocess
import sys

import pytest
import torch

from torch_mma_emu import native

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_native_mm_needs_a_cuda_device():
    A = torch.randn(4, 8).half()
    with pytest.raises(ValueError, match="native_mm needs a CUDA device"):
        native.native_mm(A, A.t())
    with pytest.raises(ValueError, match="mma_instruction needs a CUDA device"):
        native.mma_instruction(A, A.t())
    with pytest.raises(TypeError, match="torch.Tensor"):
        native.native_mm(A, [[1.0]])


def test_argument_errors_before_any_kernel(monkeypatch):
    # the checks that do not touch the device: run them with the device check bypassed
    monkeypatch.setattr(native, "_need_cuda", lambda *a: None)
    A = torch.randn(4, 8)
    with pytest.raises(ValueError, match="backend"):
        native.native_mm(A.half(), A.t().half(), backend="cutlass")
    with pytest.raises(ValueError, match="in_format='tf32'"):
        native.native_mm(A, A.t())
    with pytest.raises(ValueError, match="accumulate"):
        native.native_mm(A.bfloat16(), A.t().bfloat16(), out_dtype=torch.float16)
    with pytest.raises(ValueError, match="cannot be"):
        native.native_mm(A.half(), A.half())
    with pytest.raises(ValueError, match="only fp8 formats mix"):
        native.native_mm(A.half(), A.t().bfloat16())
    with pytest.raises(ValueError, match="does not broadcast"):
        native.native_mm(A.half(), A.t().half(), torch.zeros(3, 3))
    with pytest.raises(ValueError, match="c_mode"):
        native.native_mm(A.half(), A.t().half(), torch.zeros(4, 4), backend="cublas", c_mode="chain")
    with pytest.raises(TypeError, match="takes"):
        native.native_mm(A.half(), A.t().half(), in_format="tf32")
    with pytest.raises(ValueError, match="no tensor-core instruction"):
        native.mma_instruction(A.double(), A.t().double())


def test_instruction_table_is_consistent():
    for name, (kind, k, tm, fmts, need, sm90a) in native.INSTRUCTIONS.items():
        assert name.startswith("wgmma") == sm90a == (tm == 64)
        assert k in (8, 16, 32) and need >= (8, 0)
        assert all(f in native._TYPE_CODE for f in fmts)
    assert sorted(v[0] for v in native.INSTRUCTIONS.values()) == list(range(7))


def test_validate_hw_dry_run(tmp_path):
    report = tmp_path / "report.md"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "validate_hw.py"),
                        "--device", "cpu", "--outputs", "50", "--out", str(tmp_path),
                        "--report", str(report)], capture_output=True, text=True, timeout=600,
                       cwd=ROOT)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    text = report.read_text()
    from torch_mma_emu.registry import all_specs
    assert f"{len(all_specs())} registry entries" in text
    assert "**0 mismatches**" in text


def test_validate_hw_without_gpu_says_so(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "validate_hw.py"),
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no CUDA device" in r.stderr
