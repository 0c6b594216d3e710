"""The instruction table (torch_mma_emu/isa.py): every registry row points to an
instruction that takes its types on its arch, the native kernels' codes are the CUDA
source's, and instruction= names resolve through the table only."""
from pathlib import Path

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import isa as ins, native, registry
from torch_mma_emu.triton import target_rules

ROOT = Path(__file__).resolve().parents[1]


def test_rows_point_to_instructions_that_take_their_types():
    for r in registry.ROWS:
        i = ins.get(r.instruction)
        where = f"{r.arch} {r.formats} -> {r.out} ({r.instruction})"
        assert set(r.formats) <= set(i.inputs), where
        assert r.out in i.outputs, where
        assert (r.scale_format in i.scales) if r.scale_format else not i.scales, where
        if r.op not in ("fma",) and i.k is not None:    # a fused op covers at most k products
            assert r.params.get("passes", 1) * r.params["L"] <= i.k, where
    used = {r.instruction for r in registry.ROWS}
    # every instruction is run by a row (no dead records)
    assert set(ins.INSTRUCTIONS) == used


def test_records_are_well_formed():
    for i in ins.INSTRUCTIONS.values():
        assert i.family in ins.FAMILIES, i.id
        assert i.kernel is None or i.kernel in ins.KERNELS, i.id
        if i.kernel:                     # the kernel issues this instruction's PTX
            k = ins.KERNELS[i.kernel]
            assert k.k == i.k and set(i.inputs) <= set(k.inputs), i.id
            assert (k.rows == 64) == i.group, i.id
        assert len(i.shape) == 3


def test_kernel_codes_are_the_extensions():
    """The kernels' kind / type codes: csrc/core/layout.h's MMA_INSTR_KINDS / _TYPES, which
    the extension exports; cpp.layout_errors names a drift (checked at import)."""
    from torch_mma_emu import _C, cpp
    layout = _C._layout()
    assert list(layout["instr_kinds"]) == list(ins.KERNELS)
    assert list(layout["instr_types"]) == list(ins.KERNEL_TYPES)
    assert cpp.layout_errors(layout) == []
    moved = dict(layout, instr_kinds=layout["instr_kinds"][::-1])
    assert any("instr_kinds" in e for e in cpp.layout_errors(moved))
    fewer = dict(layout, instr_types=layout["instr_types"][:-1])
    assert any("instr_types" in e for e in cpp.layout_errors(fewer))
    assert native.INSTRUCTIONS is ins.KERNELS
    src = (ROOT / "csrc" / "cuda" / "mma_instr.cu").read_text()
    assert "MMA_INSTR_KINDS(MMA_ENUM_MEMBER)" in src and "MMA_INSTR_TYPES(MMA_ENUM_MEMBER)" in src


@pytest.mark.parametrize("arch,fmt,out,name,want", [
    ("sm90", "fp8_e4m3", torch.float16, "mma.sync", "mma.sync.m16n8k32"),
    ("sm90", "fp8_e4m3", torch.float16, "mma.sync.m16n8k32 (fp8)", "mma.sync.m16n8k32"),
    ("sm90", "fp8_e4m3", torch.float16, "MMA.Sync.M16N8K32", "mma.sync.m16n8k32"),
    ("sm90", "fp8_e4m3", torch.float16, "wgmma", "qgmma.k32"),
    ("sm90", "fp8_e4m3", torch.float16, "QGMMA", "qgmma.k32"),
    ("sm90", "fp16", None, "HGMMA", "hgmma.k16"),
    ("sm90", "fp16", None, "wgmma.m64nNk16", "hgmma.k16"),
    ("sm100", "fp8_e4m3", "fp16", "mma.sync", "mma.sync.m16n8k32"),
    ("sm100", "fp16", None, "kind::f16", "tcgen05.f16"),
    ("sm100", "fp16", None, "tcgen05", "tcgen05.f16"),
    ("sm89", "fp8_e5m2", None, "mma.sync.m16n8k32", "qmma.16832"),
    ("sm80", "fp16", None, "mma.m16n8k16", "hmma.16816"),
    ("sm80", "fp16", None, "HMMA.16816", "hmma.16816"),
    ("sm80", "tf32", None, "mma.m16n8k8", "hmma.1684"),
    ("sm120", "fp16", None, "m16n8k16", "sm120.f16"),
    ("gfx90a", "bf16", None, "v_mfma_f32_32x32x4bf16", "mfma.32x32x4bf16"),
    ("gfx90a", "bf16", None, "mfma", "mfma.32x32x8bf16_1k"),
    ("gfx908", "fp64", None, "v_fma_f64", "v_fma_f64"),
    ("sm80", "fp32", None, "fma", "ffma"),
])
def test_instruction_names_resolve_by_the_table(arch, fmt, out, name, want):
    row = registry.row(arch, fmt, out, instruction=name)
    assert row.instruction == want
    assert tme.spec(arch, fmt, out, instruction=name) == \
        tme.spec(arch, fmt, out, instruction=want)


@pytest.mark.parametrize("name", ["mma", "HMMA", "k8", "x", "m16n8", "gmma"])
def test_parts_of_names_are_not_names(name):
    with pytest.raises(ValueError, match="has no instruction"):
        tme.spec("sm90", "fp8_e4m3", torch.float16, instruction=name)


def test_triton_paths_are_the_table_families():
    assert target_rules.PATHS == ins.FAMILIES
    assert registry.family_archs("wgmma") == ("sm90",)
    assert registry.family_archs("tcgen05") == ("sm100",)
    assert registry.family_archs("mfma") == tuple(
        a for a, x in registry.ARCHS.items() if x.vendor == "amd")


def test_an_instructions_archs_are_its_rows():
    """Derived, not restated: an instruction runs on exactly the archs of its rows, and
    each arch's fp32 / fp64 instructions are the ones its fma rows name."""
    # the archs with an fp64 tensor core (A100, H100, B200) run DMMA, the others DFMA
    assert {"sm80", "sm90", "sm100"} <= set(registry.instruction_archs("dmma"))
    assert {"sm70", "sm75", "sm86", "sm89", "sm120"} <= set(registry.instruction_archs("dfma"))
    assert "gfx908" in registry.instruction_archs("v_fma_f64")       # CDNA1: no fp64 MFMA
    assert "gfx908" not in registry.instruction_archs("mfma.f64")
    assert registry.instruction_archs("ffma") == tuple(
        a for a, x in registry.ARCHS.items() if x.vendor == "nvidia")
    for a in registry.ARCHS.values():
        for fmt, iid in (("fp32", a.fp32), ("fp64", a.fp64)):
            r = registry.row(a.name, fmt)
            assert r.instruction == iid and r.op == "fma", (a.name, fmt)
        assert (a.cdna is not None) == (a.vendor == "amd"), a.name
    with pytest.raises(ValueError, match="unknown instruction id"):
        registry.instruction_archs("hmma.9999")
