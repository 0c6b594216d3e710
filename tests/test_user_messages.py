"""What a user reads (issue 33): a Spec named by what it computes, not "custom(custom)";
an arch without block scales says which archs have them (derived from the registry); entering
``emulate`` prints no PyTorch deprecation warnings; ``mma-emu preview`` times both sides warm
and never prints a ratio as "0x"."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import registry
from torch_mma_emu.cli import main
from torch_mma_emu.preview import emulate, preview_model
from torch_mma_emu.preview.cli import fmt_ratio, render
from torch_mma_emu.preview.mode import EmulateMode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- a Spec given as arch ------------------------------------------------------------------
def _native_warnings(arch) -> list[str]:
    A, v = torch.randn(4, 8).half(), torch.randn(8).half()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with emulate(arch):
            torch.mv(A, v)                       # no emulation of mv: warned by name
    return [str(w.message) for w in seen if "multiplies matrices" in str(w.message)]


def test_a_custom_spec_is_named_by_its_description():
    spec = tme.spec("sm90", "fp16").replace(F=27)
    [msg] = _native_warnings(spec)
    assert "custom(" not in msg, msg
    assert msg.startswith(f"emulate(custom Spec [fp16 -> fp32: {spec.describe()}]): "
                          "aten.mv.default multiplies matrices"), msg
    assert "F=27" in msg and "t_fdpa L=16" in msg


def test_a_registry_spec_and_a_hand_built_one_say_what_they_are():
    mixed = tme.spec("sm100", "fp8_e4m3", in_format_b="fp8_e5m2")
    [msg] = _native_warnings(mixed)
    assert msg.startswith(f"emulate(sm100 Spec [fp8_e4m3 x fp8_e5m2 -> fp32: "
                          f"{mixed.describe()}]): "), msg
    hand = tme.Spec(op="fma", in_format="fp32", out_format="fp32")
    [msg] = _native_warnings(hand)
    assert msg.startswith("emulate(custom Spec [fp32 -> fp32: fma L=1 rho=rne_fp32]): "), msg


def test_attention_notes_say_which_gpu_a_custom_spec_is_taken_as():
    q = torch.randn(1, 2, 5, 8, generator=torch.Generator().manual_seed(0))
    with emulate(tme.spec("sm90", "fp16").replace(F=27), record=True) as em:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.25)
    [rec] = em.records
    assert rec.note == "flash form, dropout_p=0.25 (efficient on custom, taken as sm90)"
    assert rec.arch.startswith("custom Spec [fp16 -> fp32: t_fdpa L=16 F=27 ")


def test_fprev_names_a_spec_by_its_description_not_its_repr():
    from torch_mma_emu import fprev
    from torch_mma_emu.fprev.targets.matmul import MatmulTarget
    spec = tme.spec("sm90", "fp16").replace(F=27)
    t = MatmulTarget(4, 1, 8, backend="emulated", arch=spec, dtype=torch.float16)
    assert t.label == (f"emulated_mm(arch=custom Spec [fp16 -> fp32: {spec.describe()}]) "
                       "[4x8] @ [8x1]")
    narrow = spec.replace(in_format="fp8_e4m3", L=32)
    with pytest.raises(fprev.ProbeRangeError) as e:
        fprev.reveal_matmul(4, 1, 200, "emulated", arch=narrow, dtype=torch.float8_e4m3fn)
    assert str(e.value).startswith("custom Spec [fp8_e4m3 -> fp32: t_fdpa L=32 F=27 ")
    assert "Spec(" not in str(e.value) and "notes=" not in str(e.value)


# -- scale formats an arch lacks -----------------------------------------------------------
def _archs_with_mx_fp8() -> list[str]:
    return [a for a in registry.archs() if any(r.scale_format == "ue8m0" and "fp8_e4m3" in
                                               r.formats for r in registry.rows_for(a))]


def test_no_block_scales_names_the_archs_that_have_them():
    with pytest.raises(ValueError) as e:
        registry.row("sm90", "fp8_e4m3", scale_format="ue8m0")
    msg = str(e.value)
    assert "None" not in msg and "available scale formats" not in msg
    assert msg.startswith("sm90 (Hopper) has no fp8_e4m3 instruction with ue8m0 block scales; "
                          "its fp8_e4m3 instructions take no scales; fp8_e4m3 with ue8m0 "
                          "block scales needs sm100 (Blackwell) or sm120 (RTX Blackwell)"), msg
    assert _archs_with_mx_fp8() == ["sm100", "sm120"]      # what the rows say
    # through emulated_mm, as a user meets it
    A = torch.randn(32, 64).to(torch.float8_e4m3fn)
    B = torch.randn(64, 32).to(torch.float8_e4m3fn)
    sa = torch.full((32, 2), 127, dtype=torch.uint8)
    sb = torch.full((2, 32), 127, dtype=torch.uint8)
    with pytest.raises(ValueError, match="needs sm100 \\(Blackwell\\) or sm120"):
        tme.emulated_mm(A, B, arch="H100", scale_a=sa, scale_b=sb)
    with pytest.raises(TypeError, match=r"^emulated_mm: the spec takes no scales, got ue8m0 "
                                        r"block scales \(scale_a / scale_b\)$"):
        tme.emulated_mm(A, B, arch=tme.spec("sm90", "fp8_e4m3"), scale_a=sa, scale_b=sb)


def test_the_archs_named_come_from_the_rows(monkeypatch):
    import dataclasses
    mx = next(r for r in registry.rows_for("sm100") if r.scale_format == "ue8m0"
              and "fp8_e4m3" in r.formats)
    monkeypatch.setattr(registry, "ROWS", registry.ROWS + [dataclasses.replace(mx, arch="sm89")])
    with pytest.raises(ValueError, match=r"fp8_e4m3 with ue8m0 block scales needs sm89 \(Ada "
                                         r"Lovelace\), sm100 \(Blackwell\) or sm120"):
        registry.row("sm90", "fp8_e4m3", scale_format="ue8m0")


def test_scales_no_arch_takes_and_formats_an_arch_lacks():
    with pytest.raises(ValueError) as e:
        registry.row("sm100", "fp8_e4m3", scale_format="ue4m3")
    assert str(e.value) == (
        "sm100 (Blackwell) has no fp8_e4m3 instruction with ue4m3 block scales; its fp8_e4m3 "
        "instructions take no scales and ue8m0 block scales; no arch in the registry takes "
        "fp8_e4m3 with ue4m3 block scales (ue4m3 scales go with fp4_e2m1 inputs)")
    with pytest.raises(ValueError, match=r"^sm80 \(Ampere\) has no instruction for fp8_e4m3 "
                       r"inputs; supported input formats: bf16, fp16, fp32, fp64, tf32; "
                       r"fp8_e4m3 runs on sm89 \(Ada Lovelace\), sm90 \(Hopper\), sm100 "
                       r"\(Blackwell\) or sm120 \(RTX Blackwell\)$"):
        registry.row("sm80", "fp8_e4m3")


def test_emulate_names_the_archs_with_a_format_an_arch_lacks():
    with pytest.raises(ValueError) as e:
        emulate("sm80", formats={"mm": "fp8_e4m3"})
    assert str(e.value) == (
        "formats['mm']='fp8_e4m3': sm80 has no fp8_e4m3 instruction; it supports fp64, fp32, "
        "tf32, fp16, bf16; fp8_e4m3 runs on sm89 (Ada Lovelace), sm90 (Hopper), sm100 "
        "(Blackwell) or sm120 (RTX Blackwell)")
    with pytest.raises(ValueError, match=r"xf32 instruction; .*; xf32 runs on gfx942 "
                                         r"\(CDNA3\)$"):
        emulate("H100", fp32_format="xf32")
    a = torch.randn(4, 4).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    with emulate("MI300X"):
        with pytest.raises(ValueError) as e:
            torch._scaled_mm(a, a.t().contiguous().t(), one, one, out_dtype=torch.float32)
    assert str(e.value) == (
        "emulate(gfx942): aten._scaled_mm.default (tensorwise scales): gfx942 has no fp8_e4m3 "
        "instruction (PyTorch has no fp8_e4m3 GEMM there either); it supports fp64, fp32, "
        "xf32, fp16, bf16, fp8_e4m3fnuz, fp8_e5m2fnuz; fp8_e4m3 runs on sm89 (Ada Lovelace), "
        "sm90 (Hopper), sm100 (Blackwell) or sm120 (RTX Blackwell)")


def test_probe_command_names_the_archs_with_block_scales(capsys):
    assert main(["probe", "--arch", "sm90", "--scale-format", "ue8m0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("mma-emu probe: sm90 has no instruction with ue8m0 block scales; ue8m0 "
                   "block scales need sm100 (Blackwell) or sm120 (RTX Blackwell)"), err


# -- entering emulate ----------------------------------------------------------------------
_ENTER = textwrap.dedent("""
    import sys, warnings, torch
    import torch_mma_emu as tme
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with tme.emulate("sm90"):
            torch.randn(4, 8) @ torch.randn(8, 4)
    print("WARNINGS", [f"{w.category.__name__}: {w.message}" for w in seen])
""")

_ENTER_STRICT = textwrap.dedent("""
    import sys, torch
    import torch_mma_emu as tme
    with tme.emulate("sm90"):
        torch.randn(4, 8) @ torch.randn(8, 4)
        cf = sys.modules["torch._inductor.compile_fx"].compile_fx
        print("PATCHED", getattr(cf, "_mma_emu_keeps", False))
""")


def _python(code: str, *flags: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, *flags, "-c", code], capture_output=True,
                          text=True, env=env, timeout=300, cwd=ROOT)


def test_entering_emulate_prints_no_deprecation_warnings():
    r = _python(_ENTER)
    assert r.returncode == 0, r.stderr
    assert "WARNINGS []" in r.stdout, r.stdout          # torch.jit.script_method's, ...
    assert "Deprecat" not in r.stderr, r.stderr


def test_entering_emulate_under_error_warnings_keeps_its_patches():
    # (the import that warned failed under -W error, and the Inductor patch went missing)
    r = _python(_ENTER_STRICT, "-W", "error::DeprecationWarning")
    assert r.returncode == 0, r.stderr
    assert "PATCHED True" in r.stdout, r.stdout + r.stderr


# -- mma-emu preview's timings -------------------------------------------------------------
_LAST = ["native"]


class _ColdAfterSwitch(torch.nn.Module):
    """A Linear whose first call after a switch between native and emulated runs takes
    1.5 s longer (a cold cache, a lazily built kernel): a side timed without its own
    warm-up shows it."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x):
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
        kind = "emulated" if any(isinstance(m, EmulateMode)
                                 for m in _get_current_dispatch_mode_stack()) else "native"
        if kind != _LAST[0]:
            _LAST[0] = kind
            time.sleep(1.5)
        return self.lin(x)


def test_preview_times_native_and_emulated_after_a_warm_up_each():
    res = preview_model(_ColdAfterSwitch(), torch.randn(2, 8), layers=[],
                        archs=["sm80", "gfx90a"], formats=["fp16"])
    assert [(r.fmt, r.arch) for r in res.runs] == [("fp16", "native"), ("fp16", "sm80"),
                                                   ("fp16", "gfx90a")]
    # gfx90a's native pass follows sm80's emulated ones: timed cold it took >= 1.5 s
    for r in res.runs:
        assert 0 < r.native_seconds < 1 and 0 < r.seconds < 1, (r.arch, r.native_seconds,
                                                               r.seconds)
    # ratios far below 1 (a disturbed native run) print with their digits, never as "0x"
    for r in res.runs:
        r.native_seconds, r.seconds = 2.0, (2.0 if r.arch == "native" else 1e-3)
    text = render(res, res.layers)
    assert not re.search(r"(?<![\d.])0(\.0)?x", text), text
    assert "<0.01x" in text
    assert "note: emulated ran faster than native (fp16 gfx90a, fp16 sm80)" in text


@pytest.mark.parametrize("x, shown", [(0.2, "0.2x"), (0.0123, "0.0123x"), (0.004, "<0.01x"),
                                      (0.0, "<0.01x"), (1.0, "1x"), (14.23, "14.2x"),
                                      (412.6, "413x"), (float("nan"), "-")])
def test_ratios_print_with_the_digits_they_need(x, shown):
    assert fmt_ratio(x) == shown
