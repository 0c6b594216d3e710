"""Closed loop of seed 003 (probe -> infer_spec -> verify, with shrinking) and fit on recorded
data.  The 1e5-input verification of every registry entry is scripts/verify_registry.py;
here every distinct arithmetic of the registry is inferred and verified on fewer inputs."""
import json
from pathlib import Path

import pytest
import torch

from torch_mma_emu import probe, reference, registry
from torch_mma_emu.reference.hwdata import spec_for_entry
from torch_mma_emu.probe import search
from torch_mma_emu.probe.fit import fit
from torch_mma_emu.probe.infer import InferenceError, infer, infer_spec
from torch_mma_emu.probe.verify import verify

HW = Path(__file__).parent.parent / "data" / "hwdata"


def _distinct():
    seen = {}
    for sp in registry.all_specs():
        seen.setdefault(search.arith_key(sp), sp)
    return list(seen.values())


def _id(sp):
    fmt = sp.in_format + (f"x{sp.in_format_b}" if sp.in_format_b else "")
    sc = f"-{sp.scale_format}{sp.block_size}" if sp.scaled else ""
    return f"{sp.arch}-{sp.op}-{fmt}-{sp.out_format}{sc}"


DISTINCT = _distinct()


# slow: 128 rows, 2-55 s each (295 s CPU, 872 s wall on the shared 2-core machine); the zero
# corners' fields are read by their deciding probes (probe/corners.py, test_probe_corners)
@pytest.mark.slow
@pytest.mark.parametrize("entry", DISTINCT, ids=[_id(s) for s in DISTINCT])
def test_infer_recovers_the_registry_arithmetic(entry):
    inf = infer(entry, checks=500, seed=1)
    assert inf.spec.arch == "custom"
    res = verify(inf.spec, entry, 4000, seed=2)
    assert search.arith_key(inf.spec) == search.arith_key(entry), inf.describe()
    assert res.ok and res.n == 4000, res.describe()
    assert set(res.by_family) == {"normal", "cancel", "bitstream"}


def test_infer_spec_from_an_arch_name_is_usable_in_emulated_mm():
    from torch_mma_emu import emulated_mm
    sp = infer_spec("sm90", "bf16", "fp32", checks=300)
    assert (sp.op, sp.L, sp.F, sp.rho) == ("t_fdpa", 16, 25, "rz_fp32")
    # the floor -133 (with or without zero_exp=-133: one arithmetic, search.arith_key)
    assert search.arith_key(sp) == search.arith_key(registry.spec("sm90", "bf16", "fp32"))
    g = torch.Generator().manual_seed(0)
    A = torch.randn(8, 40, generator=g).bfloat16()
    B = torch.randn(40, 8, generator=g).bfloat16()
    assert torch.equal(emulated_mm(A, B, arch=sp).view(torch.int32),
                       emulated_mm(A, B, arch="sm90").view(torch.int32))


def test_verify_finds_and_shrinks_a_wrong_model():
    """One fraction bit less than sm80's F: a mismatch is found and shrunk to a handful
    of products that still fail."""
    true = registry.spec("sm80", "fp16", "fp32")
    wrong = true.replace(F=true.F - 1, arch="custom")
    res = verify(wrong, "sm80", 3000, in_format="fp16", seed=3)
    assert not res.ok and res.mismatches > 0
    cx = res.counterexample
    assert cx is not None
    assert cx.nonzero <= cx.before_shrinking and cx.nonzero <= 4, cx.describe()
    assert cx.target_code != cx.model_code
    # the shrunk input still tells the two apart, and the target's value is the hardware's
    A = torch.tensor([cx.a], dtype=torch.float16)
    B = torch.tensor([cx.b], dtype=torch.float16).t()
    C = torch.tensor([[cx.c]], dtype=torch.float32)
    from torch_mma_emu import emulated_mm
    t = emulated_mm(A, B, C, arch="sm80").view(torch.int32).item() & 0xFFFFFFFF
    m = emulated_mm(A, B, C, arch=wrong).view(torch.int32).item() & 0xFFFFFFFF
    assert (t, m) == (cx.target_code, cx.model_code)
    assert "smallest failing input" in res.describe()


def test_verify_rejects_a_spec_for_other_formats():
    sp = registry.spec("sm80", "fp16", "fp32")
    with pytest.raises(ValueError, match="the spec is for"):
        verify(sp, "sm80", 10, in_format="bf16")
    with pytest.raises(ValueError, match="n must be a positive int"):
        verify(sp, "sm80", 0)
    with pytest.raises(TypeError, match="takes a Spec"):
        verify("sm80", "sm80", 10)


def _reference_callable(sp):
    """A Python dot-product function from the independent exact oracle: an 'unknown unit'
    reached only through a callable, as for a simulator or another library."""
    def f(a, b, c):
        ac = [reference.value_code(sp.fmt_a.name, x) for x in a]
        bc = [reference.value_code(sp.fmt_b.name, y) for y in b]
        cc = reference.value_code(sp.out_format, c)
        d = reference.dot(sp, ac, bc, cc)
        return reference.codes_to_tensor(d, sp.out_format)
    return f


@pytest.mark.parametrize("arch,fmt,out", [("sm80", "fp16", "fp32"), ("gfx90a", "bf16", "fp32"),
                                          ("gfx942", "fp16", "fp32")])
def test_infer_a_callable_target_backed_by_the_reference_oracle(arch, fmt, out):
    sp = registry.spec(arch, fmt, out)
    inf = infer(_reference_callable(sp), fmt, out, checks=60)
    # gfx90a: L = 8 flushes of the accumulator apart, P = 4 (acc_flush_interval)
    assert search.arith_key(inf.spec) == search.arith_key(sp), inf.describe()
    assert inf.report.target.startswith("callable")


@pytest.mark.slow   # 262 s on 2 cores (measured with --durations): runs with MMA_EMU_SLOW=1
def test_infer_reports_when_nothing_fits():
    """A unit outside the model space (each product rounded to bf16 before an exact sum) is
    refused with the rounds that were tried, and features() shows why."""
    def f32(x):
        return float(torch.tensor(x, dtype=torch.float64).float())

    def odd(a, b, c):      # blocks of 8 products, each rounded to bf16, summed exactly
        acc = c
        for k in range(0, len(a), 8):
            acc = f32(acc + sum(float(torch.tensor(x * y, dtype=torch.float64).bfloat16())
                                for x, y in zip(a[k:k + 8], b[k:k + 8])))
        return acc
    with pytest.raises(InferenceError, match="no spec of the model space"):
        infer(odd, "fp16", "fp32", checks=40)
    assert probe.features(odd, "fp16", "fp32", order=False).value("products_exact") is False

    def exact(a, b, c):    # one correctly rounded dot product of any length
        import math
        from fractions import Fraction
        if not all(math.isfinite(v) for v in [*a, *b, c]):
            return f32(sum(x * y for x, y in zip(a, b)) + c)
        return f32(sum((Fraction(x) * Fraction(y) for x, y in zip(a, b)), Fraction(c)))
    with pytest.raises(InferenceError, match="model space stops at L = 256"):
        infer(exact, "fp16", "fp32", checks=40)


def _hw_entries():
    return json.loads((HW / "index.json").read_text())


# the three multi-pass recordings and one single-pass file run in the fast suite
_FAST_FIT = {"H100_fp8_e4m3_to_fp16.npz", "B200_fp8_e4m3_to_fp16.npz",
             "B200_fp8_e4m3_to_fp32.npz", "V100_fp16_to_fp32.npz"}


@pytest.mark.parametrize("entry", [
    e if e["file"] in _FAST_FIT else pytest.param(e, marks=pytest.mark.slow)
    for e in _hw_entries()], ids=lambda e: e["file"])
def test_fit_recorded_hardware_returns_the_registry_spec(entry):
    """Fitted on the first 2,000 samples, the best spec is the registry's model of the
    instruction the index names and reproduces all 5,000."""
    import numpy as np
    z = np.load(HW / entry["file"])
    res = fit(tuple(z[k][:2000] for k in "abcd"), entry["in_format"], entry["out_dtype"])
    want = spec_for_entry(entry)
    keys = [search.arith_key(s) for s in res.specs]
    assert keys and keys[0] == search.arith_key(want), res.describe()
    # every candidate shown really reproduces every sample
    s = probe.samples.load(HW / entry["file"])
    assert all(search.mismatches(sp, s, stop_at=0) == 0 for sp in res.specs[:3])
    if entry["out_dtype"] == "fp16":     # fp16 outputs hide the fused width: ties are listed
        assert len(res.specs) > 1
    assert any("NaN encoding" in u for u in res.undetermined)


def test_fit_finds_the_pass_structure_without_the_registry(monkeypatch):
    """With no registry entry to lean on, the fp16 recording alone pins the layout
    (alternating pairs) and where c joins (last); only F stays open, and fit says so."""
    monkeypatch.setattr(search, "known_specs", lambda sp: [])
    z = __import__("numpy").load(HW / "H100_fp8_e4m3_to_fp16.npz")
    res = fit(tuple(z[k][:2000] for k in "abcd"), "fp8_e4m3", "fp16", ops=["t_fdpa"])
    assert res.specs and all((sp.passes, sp.width, sp.c_join, sp.L) == (2, 2, "final", 16)
                             for sp in res.specs), res.describe()
    assert any(u.startswith("F: ") for u in res.undetermined)
    assert res.multipass_checked > 0


def test_fit_says_when_nothing_fits_and_shows_the_closest():
    """Without multi-pass models the fp16 mma.sync recording fits nothing; fit says so and
    shows the nearest single-pass candidates with their mismatch counts."""
    z = __import__("numpy").load(HW / "B200_fp8_e4m3_to_fp16.npz")
    res = fit(tuple(z[k][:600] for k in "abcd"), "fp8_e4m3", "fp16", passes=False)
    assert not res.specs and res.best is None
    assert res.closest and all(bad > 0 for _, bad in res.closest)
    assert [b for _, b in res.closest] == sorted(b for _, b in res.closest)
    text = res.describe()
    assert "no spec of the model space fits" in text and "samples differ" in text


def test_fit_takes_torch_tensors_of_natural_dtypes():
    """a, b as fp8 / bf16 tensors, c, d in the output dtype (the formats read off the
    dtypes), or int tensors of fp32 bit patterns: the same fit as from the arrays."""
    import numpy as np
    z = np.load(HW / "B200_fp8_e4m3_to_fp16.npz")
    f32 = {k: torch.from_numpy(z[k][:300].astype(np.int64).astype(np.int32)).view(torch.float32)
           for k in "abcd"}
    t = (f32["a"].to(torch.float8_e4m3fn), f32["b"].to(torch.float8_e4m3fn),
         f32["c"].to(torch.float16), f32["d"].to(torch.float16))
    res = fit(t, ops=["t_fdpa"])
    ref_res = fit(tuple(z[k][:300] for k in "abcd"), "fp8_e4m3", "fp16", ops=["t_fdpa"])
    assert res.specs and [search.arith_key(s) for s in res.specs] == \
        [search.arith_key(s) for s in ref_res.specs]
    bits = tuple(torch.from_numpy(z[k][:300].astype(np.int64)) for k in "abcd")
    assert search.arith_key(fit(bits, "fp8_e4m3", "fp16", ops=["t_fdpa"]).best) == \
        search.arith_key(res.best)
    h = next(e for e in _hw_entries() if e["file"] == "H100_bf16_to_fp32.npz")
    zb = np.load(HW / h["file"])
    fb = {k: torch.from_numpy(zb[k][:200].astype(np.int64).astype(np.int32)).view(torch.float32)
          for k in "abcd"}
    rb = fit((fb["a"].bfloat16(), fb["b"].bfloat16(), fb["c"], fb["d"]), ops=["t_fdpa"],
             passes=False)
    assert rb.best is not None and rb.best.in_format == "bf16" and rb.best.out_format == "fp32"
    with pytest.raises(ValueError, match="say in_format"):
        fit((fb["a"], fb["b"], fb["c"], fb["d"]))            # float32: fp32, tf32 or xf32?
    with pytest.raises(TypeError, match="a is torch.float8_e4m3fn but b is"):
        fit((t[0], t[1].float(), t[2], t[3]))
    with pytest.raises(TypeError, match="pass all four as tensors"):
        fit((t[0], t[1], z["c"][:300], t[3]))


def test_fit_takes_arrays_and_rejects_models_that_do_not_fit():
    z = __import__("numpy").load(HW / "V100_fp16_to_fp32.npz")
    res = fit((z["a"], z["b"], z["c"], z["d"]), "fp16", "fp32")
    assert res.best.describe().startswith("t_fdpa L=4 F=23")
    d = z["d"].copy()
    d[0] ^= 1                         # one flipped bit: the true model no longer fits
    res2 = fit({"a": z["a"], "b": z["b"], "c": z["c"], "d": d}, "fp16", "fp32", ops=["t_fdpa"])
    assert all(search.arith_key(s) != search.arith_key(res.best) for s in res2.specs)
    with pytest.raises(TypeError, match="samples must be"):
        fit(42, "fp16")
    with pytest.raises(FileNotFoundError):
        fit(HW / "nope.npz")


@pytest.mark.parametrize("fmt,out", [("fp16", "fp32"), ("bf16", "fp32"), ("fp8_e4m3", "fp16")])
def test_native_target_glue_through_a_cpu_stand_in(monkeypatch, fmt, out):
    """infer_spec("native") without a GPU: NativeTarget's batching (outputs on the diagonal
    of R x R products, K padded to the instruction's K) and native.mma_instruction's glue run
    for real; only the instruction itself is the emulator's sm90 (tests/test_gpu_api.py)."""
    from test_gpu_api import _fake_mma_instr
    from torch_mma_emu import native
    from torch_mma_emu.probe.targets import NativeTarget, interface
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "stand-in H100")
    monkeypatch.setattr(native, "_need_cuda", lambda *a: None)
    monkeypatch.setattr(torch.ops.mma_emu, "_mma_instr", _fake_mma_instr, raising=False)
    t = NativeTarget(interface(fmt, out), device="cpu")
    assert t.label.startswith("native stand-in H100 (sm90, wgmma")
    inf = infer(t, checks=300)
    want = registry.spec("sm90", fmt, out)
    assert search.arith_key(inf.spec) == search.arith_key(want), inf.describe()
    assert verify(inf.spec, t, 2000).ok


def test_probe_native_script_through_the_stand_in(monkeypatch, tmp_path, capsys):
    """hw.probe (scripts/probe_native.py, run by validate_hw.sh on a GPU machine) end to end."""
    from test_gpu_api import _fake_mma_instr
    from torch_mma_emu import native
    from torch_mma_emu.hw import probe as probe_step
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 stand-in")
    monkeypatch.setattr(native, "_need_cuda", lambda *a: None)
    monkeypatch.setattr(torch.ops.mma_emu, "_mma_instr", _fake_mma_instr, raising=False)
    rep = tmp_path / "H100_probe.md"
    rc = probe_step.main(["-n", "500", "--formats", "fp16,tf32", "--device", "cpu",
                   "--report", str(rep)])
    assert rc == 0, capsys.readouterr().out
    text = rep.read_text()
    assert "fp16 -> fp32: inferred `t_fdpa L=16 F=25 rho=rz_fp32 zero_sign=plus zero_exp=-133`" \
        in text
    assert "(same)" in text and "DIFFERENT" not in text and "0 mismatches in 500" in text
    assert "Model parameters (seed 003 Table 4)" in text and "Feature tests" in text
