"""torch_mma_emu.aten_cuda.elementwise against the code itself: nvcc 13.0's PTX of ATen's
elementwise lambdas (tests/data/aten_math, compiled with PyTorch's device flags by
scripts/regen_aten_math_ptx.py), run instruction by instruction by gpu_math.ptx_run.
Every float16 and bfloat16 input here; the float32 sweep of 10^6 inputs is slow."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from torch_mma_emu.aten_cuda import elementwise as ew
from torch_mma_emu.gpu_math import ptx_run

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("regen_aten_math_ptx",
                                               ROOT / "scripts" / "regen_aten_math_ptx.py")
regen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(regen)

PTX = regen.PTX.read_text()


def mismatches(op, dtype, x):
    with np.errstate(all="ignore"):
        got = regen.model_values(op, dtype, x)
        want = regen.ptx_values(PTX, op, dtype, x)
    return int((~regen.same(got, want, dtype)).sum())


def test_ptx_is_nvcc_13_0_sm90_with_every_kernel():
    assert "Cuda compilation tools, release 13.0" in PTX
    assert ".target sm_90" in PTX
    for op in ew.OPS:
        for s in ("f32", "f16", "bf16"):
            assert f".entry {op}_{s}(" in PTX


@pytest.mark.parametrize("op", sorted(ew.OPS))
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_every_half_input_matches_the_ptx(op, dtype):
    assert mismatches(op, dtype, regen.inputs(dtype, 0)) == 0


@pytest.mark.parametrize("op", sorted(ew.OPS))
def test_fp32_inputs_match_the_ptx(op):
    assert mismatches(op, "float32", regen.fp32_inputs(30_000, seed=1)) == 0


@pytest.mark.slow
@pytest.mark.parametrize("op", sorted(ew.OPS))
def test_fp32_million_inputs_match_the_ptx(op):
    assert mismatches(op, "float32", regen.fp32_inputs(1_000_000, seed=2)) == 0


def test_the_models_are_not_the_cpu():
    """The kernels differ from CPU torch on a good share of inputs (what emulate changes)."""
    import torch
    x = np.random.default_rng(3).uniform(-8, 8, 20_000).astype(np.float32)
    with np.errstate(all="ignore"):
        for op, f in [("exp", torch.exp), ("erf", torch.erf), ("tanh", torch.tanh),
                      ("log", torch.log)]:
            xx = np.abs(x) if op == "log" else x
            cpu = f(torch.from_numpy(xx)).numpy()
            assert (ew.evaluate(op, xx) != cpu).mean() > 0.005, op


def test_known_values():
    with np.errstate(all="ignore"):
        assert ew.evaluate("exp", np.float32([0, -np.inf, np.inf])).tolist() == [1, 0, np.inf]
        assert ew.evaluate("log", np.float32([1, 0, -1]))[:2].tolist() == [0, -np.inf]
        assert np.isnan(ew.evaluate("log", np.float32([-1]))[0])
        assert ew.evaluate("tanh", np.float32([0, 20, -20])).tolist() == [0, 1, -1]
        assert ew.evaluate("erf", np.float32([0, 5, -5])).tolist() == [0, 1, -1]
        assert ew.evaluate("sigmoid", np.float16([0]), "float16").tolist() == [0.5]
        h = ew.evaluate("gelu", np.array([0x3F80], np.uint16), "bfloat16")   # bf16 1.0
        assert h.dtype == np.uint16 and abs(ew.widen(h, "bfloat16")[0] - 0.8413) < 4e-3


def test_bad_op_and_dtype():
    with pytest.raises(ValueError, match="unknown op 'cos'"):
        ew.evaluate("cos", np.float32([1]))
    with pytest.raises(ValueError, match="float64"):
        ew.evaluate("exp", np.float32([1]), "float64")


def test_ptx_run_copysign_and_half_conversions():
    ptx = """
    .entry k(
    ld.global.u16 %rs1, [%rd1];
    { cvt.f32.f16 %f1, %rs1;}
    mov.f32 %f2, 0f40000000;
    copysign.f32 %f3, %f1, %f2;
    { cvt.rn.bf16.f32 %rs2, %f3;}
    st.global.u16 [%rd2], %rs2;
    """
    prog, src, dst = ptx_run.routine(ptx)
    x = np.float16([-3.0, 0.5, -0.0]).view(np.uint16)
    out = ptx_run.run(prog, src, dst, x).view(np.uint32) & 0xFFFF
    # copysign d, a, b: b's magnitude (2) with a's sign; bf16 2.0 = 0x4000
    assert out.tolist() == [0xC000, 0x4000, 0xC000]
