"""The GPU recordings of issue 29 without a GPU: the approximate instructions' recording and
sweep (torch_mma_emu.hw.approx) through their stand-in, the inline PTX compiled and assembled
for sm_90 on the CPU, the CUDA reductions' recording on the CPU, the ``tiny`` corner family,
and the diagnosis of a sign-of-zero difference."""
import importlib.util
import shutil
import zlib

import numpy as np
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu.hw import approx, diagnose, reductions
from torch_mma_emu.inputs import ALL_FAMILIES, CORNER_FAMILIES, FAMILIES, operands
from torch_mma_emu.registry import spec as registry_spec

HAVE_GPU_MATH = importlib.util.find_spec("torch_mma_emu.gpu_math") is not None


def test_recording_inputs_cover_every_segment_and_the_specials():
    ins = approx.recording_inputs()
    x = ins["x"]
    assert x.dtype == np.uint32 and np.array_equal(np.unique(x[: 1 << 16] >> 16),
                                                   np.arange(1 << 16))
    assert set(approx.SPECIALS.tolist()) <= set(x.tolist())
    assert ins["x2"].size == ins["y"].size == x.size + approx.SPECIALS.size ** 2
    assert np.array_equal(ins["x"], approx.recording_inputs()["x"])      # seeded


@pytest.mark.parametrize("name", list(approx.INSTRUCTIONS))
def test_inline_ptx_moves_bits_only(name):
    a = approx.asm(name)
    assert name in a and a.count("mov.b32") == approx.INSTRUCTIONS[name][0] + 1
    assert ("$2" in a) == (approx.INSTRUCTIONS[name][0] == 2)


@pytest.mark.skipif(importlib.util.find_spec("triton") is None or shutil.which("ptxas") is None,
                    reason="needs triton and ptxas")
def test_the_kernels_compile_to_sm90_cubin_with_the_instruction():
    """What the GPU runs, read without one: each instruction's kernel through Triton's CUDA
    backend to PTX and (ptxas) a cubin, the instruction in the PTX exactly once per element."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    sig = {"x_ptr": "*i32", "y_ptr": "*i32", "o_ptr": "*i32", "n": "i32", "ASM": "constexpr",
           "BLOCK_SIZE": "constexpr"}
    for name in ("ex2.approx.ftz.f32", "rsqrt.approx.f32", "div.full.f32"):
        src = ASTSource(fn=approx._kernel(approx.INSTRUCTIONS[name][0]), signature=sig,
                        constexprs={"ASM": approx.asm(name), "BLOCK_SIZE": 1024})
        c = triton.compile(src, target=GPUTarget("cuda", 90, 32))
        lines = [ln for ln in c.asm["ptx"].splitlines() if f" {name} " in ln]
        assert lines and all("mov.b32 a, %r" in ln for ln in lines), name
        assert len(c.asm["cubin"]) > 1000


def test_stand_in_records_and_reports(tmp_path):
    out, rep = tmp_path / "a.npz", tmp_path / "a.md"
    rc = approx.main(["--stand-in", "--out", str(out), "--report", str(rep), "--time-limit", "0",
                      "--only", "rcp.approx.f32,div.full.f32"])
    assert rc == 0
    z = np.load(out)
    assert z["rcp_approx_f32"].size == z["x"].size and z["div_full_f32"].size == z["y"].size
    # the stand-in's "hardware" is the model where gpu_math has one, else float64 math
    # rounded: each array holds its own instruction's outputs on the recorded inputs
    for name, ops in (("rcp.approx.f32", (z["x"],)), ("div.full.f32", (z["x2"], z["y"]))):
        want = (approx.model(name, *ops) if name in approx.model_table()
                else approx.float64_reference(name, *ops))
        assert approx.same(z[name.replace(".", "_")], want).all(), name
    x = z["x"].view(np.float32)
    r = z["rcp_approx_f32"].view(np.float32)
    ok = np.isfinite(x) & (np.abs(x) > 1e-30) & (np.abs(x) < 1e30)
    rel = np.abs(r[ok].astype(np.float64) * x[ok] - 1)
    assert rel.max() < 2.0 ** -20                    # a reciprocal, whichever function made it
    text = rep.read_text()
    assert "`rcp.approx.f32`" in text and "`ex2.approx.f32`" in text
    assert approx.main(["--stand-in", "--only", "nope.f32"]) == 2


def test_same_treats_every_nan_alike():
    a = np.array([0x7FC00000, 0x7FFFFFFF, 0x00000000, 0x3F800000], dtype=np.uint32)
    b = np.array([0xFFC00001, 0x7FC00000, 0x80000000, 0x3F800001], dtype=np.uint32)
    assert approx.same(a, b).tolist() == [True, True, False, False]


@pytest.mark.skipif(not HAVE_GPU_MATH, reason="torch_mma_emu.gpu_math not present")
def test_sweep_counts_the_perturbed_outputs():
    """The sweep against a 'hardware' that is the model with the last bit of every 997th
    output flipped: exactly those are counted and kept, with their inputs."""
    names = [n for n in approx.model_table() if approx.INSTRUCTIONS[n][0] == 1][:1]
    if not names:
        pytest.skip("gpu_math models no one-operand instruction")

    def hw(name, *xs):
        out = approx.model(name, *xs).copy()
        out[::997] ^= 1
        return out

    res = approx.sweep(names, hw, time_limit=600, workers=1, log=lambda s: None,
                       blocks=[513])
    r = res[names[0]]
    n = approx.BLOCK
    assert r["checked"] == n
    flipped = np.arange(0, n, 997)
    out = approx.model(names[0], (flipped + 513 * n).astype(np.uint32))
    nan = np.isnan(out.view(np.float32))
    assert r["mismatches"] == int((~nan).sum())
    kept = np.concatenate(r["kept"], 1)
    assert kept[0, 0] == 513 * n and kept[1, 0] == (kept[2, 0] ^ 1)


def test_reductions_record_on_the_cpu(tmp_path):
    out = tmp_path / "r.npz"
    assert reductions.main(["--device", "cpu", "--out", str(out)]) == 0
    z = np.load(out)
    key = "fp32_spread_n4099"
    x = torch.from_numpy(z[f"in_{key}"]).view(torch.float32)
    assert x.shape == (reductions.ROWS, 4099)
    s = torch.from_numpy(z[f"sum_{key}"]).view(torch.float32)
    assert torch.equal(s, x.sum(-1))
    assert z["softmax_bf16_normal_n1024"].shape == (reductions.ROWS, 1024)
    # the spread family makes the order show: a float64 sum differs from the fp32 one
    assert not torch.equal(x.double().sum(-1).float(), s)


def test_tiny_family_is_outside_the_classic_three():
    assert FAMILIES == ("normal", "cancel", "bitstream") and CORNER_FAMILIES == ("tiny",)
    assert ALL_FAMILIES == FAMILIES + CORNER_FAMILIES
    with pytest.raises(ValueError, match="tiny"):
        operands(registry_spec("sm90", "fp16"), 2, 2, 2, "huge", torch.Generator())


@pytest.mark.parametrize("arch,fmt,odt", [("sm90", "fp16", torch.float16),
                                          ("sm80", "bf16", torch.float32),
                                          ("sm70", "fp16", torch.float16),
                                          ("sm80", "tf32", torch.float32)])
def test_tiny_family_reaches_signed_zero_results(arch, fmt, odt):
    """The family exists to reach zero results of both signs and subnormal outputs, with
    signed zeros in every operand."""
    s = registry_spec(arch, fmt, odt)
    g = torch.Generator().manual_seed(zlib.crc32(f"{arch}{fmt}".encode()))
    kw = operands(s, 64, 64, 3 * s.instr_k, "tiny", g)
    for t in (kw["A"], kw["B"], kw["C"]):
        v = t.float()
        assert ((v == 0) & torch.signbit(v)).any() and ((v == 0) & ~torch.signbit(v)).any()
    D = tme.emulated_mm(**kw)
    assert (D == 0).any() and not ((D == 0) & torch.signbit(D)).any()     # zero_sign="plus"
    assert ((D != 0) & (D.abs() < torch.finfo(D.dtype).tiny)).float().mean() > 0.2
    keep = tme.emulated_mm(**dict(kw, arch=s.replace(zero_sign="keep")))    # the corner
    assert ((keep == 0) & torch.signbit(keep)).any()


def test_diagnose_names_the_zero_corners():
    """A 'native' result computed with the other sign-of-zero rule (or another zero-term
    exponent) is explained by that corner's alternative, and an unrelated bit flip is not."""
    s = registry_spec("sm90", "fp16", torch.float16)
    assert s.zero_sign == "plus"               # MMA-Sim 2.1's rule, issue 31
    g = torch.Generator().manual_seed(3)
    kw = operands(s, 64, 64, 48, "tiny", g)
    keep = tme.emulated_mm(**dict(kw, arch=s.replace(zero_sign="keep")))
    assert ((keep == 0) & torch.signbit(keep)).any()
    found = diagnose.diagnose("mma:x", s, kw, keep, "cpu", "chain", "sm90", torch.float16)
    assert any(f.startswith("zero_sign=keep") for f in found), found
    other = tme.emulated_mm(**kw).clone()
    other.view(torch.int16)[0, 0] ^= 1
    found = diagnose.diagnose("mma:x", s, kw, other, "cpu", "chain", "sm90", torch.float16)
    assert not any(f.startswith("zero_") for f in found), found
    labels = [lab for lab, _ in diagnose.corner_alternatives(s)]
    assert "zero_sign=keep" in labels and "zero_exp=None" in labels and "zero_exp=-15" in labels
