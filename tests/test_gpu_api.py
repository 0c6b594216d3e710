"""The GPU-facing API where there is no GPU: clear errors from native_mm / mma_instruction
for CPU tensors and bad arguments, and a dry run of scripts/validate_hw.py (part 1 with the
CPU kernel on both sides, and its report)."""
import os
import subprocess
import sys

import pytest
import torch

from torch_mma_emu import native
from torch_mma_emu.isa import KERNEL_TYPES

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
    for name, k in native.INSTRUCTIONS.items():
        assert name.startswith("wgmma") == k.sm90a == (k.rows == 64)
        assert k.k in (8, 16, 32) and k.min_cc >= (8, 0)
        assert all(f in KERNEL_TYPES for f in k.inputs)
    assert sorted(v.kind for v in native.INSTRUCTIONS.values()) == list(range(7))


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


def _fake_mma_instr(a, b, c, cfg):
    """A CPU stand-in for torch.ops.mma_emu._mma_instr: the same contract (a (M, K) codes,
    b (N, K) codes, c (M, N), cfg = [kind, a type, b type, accumulator]), computed by the
    emulator, to test the Python glue around the instruction kernel without a GPU."""
    import torch_mma_emu as tme
    kind, at, bt, acc = cfg
    dts = {0: torch.float16, 1: torch.bfloat16, 2: torch.float32, 3: torch.float8_e4m3fn,
           4: torch.float8_e5m2}
    names = {0: "fp16", 1: "bf16", 2: "tf32", 3: "fp8_e4m3", 4: "fp8_e5m2"}
    A = a.view(dts[at])
    B = b.view(dts[bt]).t()
    assert a.is_contiguous() and b.is_contiguous() and c.is_contiguous()
    assert c.dtype == (torch.float32 if acc == 0 else torch.float16)
    tm = 64 if kind >= 4 else 16
    assert A.shape[0] % tm == 0 and B.shape[1] % 8 == 0
    return tme.emulated_mm(A, B, c, arch="sm90", in_format=f"{names[at]},{names[bt]}",
                           out_dtype=c.dtype)


@pytest.mark.parametrize("fmt,dt,ins", [("fp16", torch.float16, "wgmma.m64n8k16"),
                                        ("bf16", torch.bfloat16, "mma.m16n8k16"),
                                        ("tf32", torch.float32, "wgmma.m64n8k8.tf32"),
                                        ("fp8_e4m3", torch.float8_e4m3fn, "wgmma.m64n8k32")])
def test_mma_instruction_glue_pads_and_transposes(monkeypatch, fmt, dt, ins):
    import torch_mma_emu as tme
    monkeypatch.setattr(native, "_need_cuda", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.ops.mma_emu, "_mma_instr", _fake_mma_instr, raising=False)
    g = torch.Generator().manual_seed(7)
    k = native.INSTRUCTIONS[ins][1]
    A = torch.randn(70, 3 * k, generator=g).to(dt)
    B = torch.randn(3 * k, 13, generator=g).to(dt)[:, :11]   # strided B, N off the tile
    C = torch.randn(70, 11, generator=g)
    inf = fmt if fmt == "tf32" else None
    D = native.mma_instruction(A, B, C, in_format=inf, instruction=ins)
    R = tme.emulated_mm(A, B, C, arch="sm90", in_format=inf)
    assert D.shape == (70, 11) and torch.equal(D.view(torch.int32), R.view(torch.int32))
    if fmt == "fp16":
        D16 = native.mma_instruction(A, B, C.half(), out_dtype=torch.float16, instruction=ins)
        R16 = tme.emulated_mm(A, B, C.half(), arch="sm90", out_dtype=torch.float16)
        assert torch.equal(D16.view(torch.int16), R16.view(torch.int16))
    with pytest.raises(ValueError, match="multiple"):
        native.mma_instruction(A[:, :k + 1], B[:k + 1], in_format=inf, instruction=ins)
    # the default instruction on sm90 is wgmma
    assert native.instructions_for(fmt)[0].startswith("wgmma")


def test_native_mm_mma_backend_batches(monkeypatch):
    import torch_mma_emu as tme
    monkeypatch.setattr(native, "_need_cuda", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.ops.mma_emu, "_mma_instr", _fake_mma_instr, raising=False)
    g = torch.Generator().manual_seed(8)
    A = torch.randn(2, 1, 20, 32, generator=g).half()
    B = torch.randn(3, 32, 9, generator=g).half()
    C = torch.randn(9, generator=g)
    D = native.native_mm(A, B, C, backend="mma")
    R = tme.emulated_mm(A, B, C, arch="sm90")
    assert D.shape == (2, 3, 20, 9) and torch.equal(D, R)
