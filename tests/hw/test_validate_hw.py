"""The live validation (torch_mma_emu.hw, scripts/validate_hw.py) without a GPU: the model
chosen per instruction, the paths per format, Triton's padded chain, results that survive a
cut-off run, the mismatch archive, --resume and --render.  The native paths are CPU stand-ins computed by the emulator (one of them
deliberately with a wrong model), so the comparison, diagnosis and bookkeeping run for real."""
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import native, registry
from torch_mma_emu.inputs import FAMILIES, operands
from torch_mma_emu.hw import (archive, common, diagnose, identity, paths, report, results,
                              validate)
from helpers import bits

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------
# the model of the instruction that runs
# ---------------------------------------------------------------------------------------

def test_instruction_spec_per_instruction_on_sm90():
    s, src = native.instruction_spec("sm90", "fp16", torch.float32, "wgmma.m64n8k16")
    assert s == registry.spec("sm90", "fp16") and "HGMMA" in src
    s, src = native.instruction_spec("sm90", "fp16", torch.float32, "mma.m16n8k16")
    assert (s.L, s.F) == (16, 25) and "wmma" in src
    s, src = native.instruction_spec("sm90", "fp16", torch.float16, "mma.m16n8k8")
    assert (s.op, s.L, s.F, s.rho) == ("t_fdpa", 8, 25, "rne_fp16") and "L = 8" in src
    s, _ = native.instruction_spec("sm90", "tf32", None, "wgmma.m64n8k8.tf32")
    assert s == registry.spec("sm90", "tf32")
    # sm80/sm89: the registry rows name the mma.sync instructions
    s, src = native.instruction_spec("sm89", "fp8_e4m3", "fp16", "mma.m16n8k32",
                                     in_format_b="fp8_e5m2")
    assert s == registry.spec("sm89", "fp8_e4m3", "fp16", in_format_b="fp8_e5m2")
    assert "QMMA" in src
    s, _ = native.instruction_spec("sm80", "tf32", None, "mma.m16n8k8.tf32")
    assert (s.L, s.F) == (4, 24)
    with pytest.raises(ValueError, match="sm90 only"):
        native.instruction_spec("sm80", "fp16", None, "wgmma.m64n8k16")
    with pytest.raises(ValueError, match="unknown instruction"):
        native.instruction_spec("sm90", "fp16", None, "mma.m8n8k4")
    with pytest.raises(ValueError, match="no instruction for fp8"):
        native.instruction_spec("sm80", "fp8_e4m3", None, "mma.m16n8k32")


def _variant_rows():
    return [r for r in registry.rows_for("sm90") if r.instr.kernel == "mma.m16n8k32"]


def test_warp_level_fp8_mma_on_hopper_has_its_own_model_or_none():
    s, src = native.instruction_spec("sm90", "fp8_e4m3", torch.float32, "mma.m16n8k32")
    if _variant_rows():        # the registry has the instruction variant: it is used
        assert s is not None and "mma.sync.m16n8k32" in s.instruction.lower()
        assert s != registry.spec("sm90", "fp8_e4m3")
    else:
        assert s is None and src.startswith("no model yet") and "sm90" in src


def test_instruction_variant_rows_are_looked_up_by_kernel(monkeypatch):
    """A registry row whose instruction the kernel issues wins over rules 2 and 3."""
    row = registry.Row("sm90", registry.FP8, "fp32", "t_fdpa", "mma.sync.m16n8k32",
                       dict(L=16, F=23, rho="rz_fp32"), default=False, source="test variant")
    others = [r for r in registry.ROWS
              if not (r.arch == "sm90" and r.instr.kernel == "mma.m16n8k32")]
    monkeypatch.setattr(registry, "ROWS", others + [row])
    s, src = native.instruction_spec("sm90", "fp8_e5m2", torch.float32, "mma.m16n8k32")
    assert (s.L, s.F, s.notes) == (16, 23, "test variant")
    assert src == "registry row 'mma.sync.m16n8k32 (fp8)'"
    # the default (wgmma) is unchanged
    assert native.instruction_spec("sm90", "fp8_e5m2", None, "wgmma.m64n8k32")[0].L == 32


@pytest.mark.parametrize("fam", FAMILIES)
def test_k8_model_is_a_chain_of_zero_padded_k16_chunks(fam):
    """Rule 3's claim, checked: L = 8 on K = 16 equals two L = 16 operations on each half
    zero-padded to 16 (zero products move neither the alignment nor the sum)."""
    s16 = registry.spec("sm90", "fp16")
    s8, _ = native.instruction_spec("sm90", "fp16", torch.float32, "mma.m16n8k8")
    g = torch.Generator().manual_seed(zlib.crc32(fam.encode()))
    kw = operands(s16, 24, 16, 16, fam, g)
    A, B, C = kw["A"], kw["B"], kw["C"]
    z = torch.zeros(24, 8, dtype=A.dtype)
    zb = torch.zeros(8, 16, dtype=B.dtype)
    half1 = tme.emulated_mm(torch.cat([A[:, :8], z], 1), torch.cat([B[:8], zb]), C, arch=s16)
    chain = tme.emulated_mm(torch.cat([A[:, 8:], z], 1), torch.cat([B[8:], zb]), half1, arch=s16)
    assert torch.equal(bits(chain), bits(tme.emulated_mm(A, B, C, arch=s8)))


# ---------------------------------------------------------------------------------------
# paths per format, Triton's padded chain
# ---------------------------------------------------------------------------------------

def test_paths_for_skips_cublas_e5m2_pairs(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    p = dict(paths.paths_for("fp8_e5m2", "fp8_e5m2", torch.float32, "cpu", True))
    assert p["cublas"] == p["cublas-promote"] == paths.CUBLAS_NO_E5M2
    assert p["mma:wgmma.m64n8k32"] is None and p["mma:mma.m16n8k32"] is None
    assert p["triton"] is None
    p = dict(paths.paths_for("fp8_e4m3", "fp8_e5m2", torch.float16, "cpu", True))
    assert p["cublas"] is None and p["cublas-promote"] is None
    p = dict(paths.paths_for("fp16", "fp16", torch.float32, "cpu", False))
    assert list(p) == ["mma:wgmma.m64n8k16", "mma:mma.m16n8k16", "mma:mma.m16n8k8", "cublas"]
    assert not any(k.startswith("mma") for k in
                   dict(paths.paths_for("bf16", "bf16", torch.float16, "cpu", True)))
    assert list(dict(paths.paths_for("fp64", "fp64", torch.float64, "cpu", True))) == ["cublas"]
    # 4 cuBLAS rows of the e5m2 pair are skipped on sm90: 2 outputs x 2 cuBLAS paths
    skipped = [(c, p) for c in paths.format_cases((9, 0))
               for p, why in paths.paths_for(*c, "cpu", True) if why]
    assert len(skipped) == 4


def test_triton_run_k_pads_to_whole_blocks():
    from torch_mma_emu.triton_kernels import block_k_for, run_k
    assert block_k_for(8, 8) == 16 and run_k(8, "tf32") == 16 and run_k(8, "fp32") == 16
    assert run_k(16, "tf32") == 16 and run_k(24, "tf32") == 32 and run_k(13, "fp32") == 16
    assert run_k(8, "fp16") == 16 and run_k(20, "fp16") == 32 and run_k(32, "fp8_e4m3") == 32
    assert run_k(0, "fp16") == 0 and run_k(40, "fp16", block_k=64) == 64
    for K in range(1, 200):
        for fmt, ik in (("fp16", 16), ("bf16", 16), ("fp8_e4m3", 32), ("tf32", 8)):
            whole = -(-K // ik) * ik        # the instructions the model runs
            extra = run_k(K, fmt) - whole   # all-zero instructions Triton adds
            if ik >= 16:
                assert extra == 0, (fmt, K)
            else:                           # tf32: one k8 instruction when K % 16 in 1..8
                assert extra == (8 if 1 <= K % 16 <= 8 else 0), (fmt, K)
        k2 = run_k(K, "fp32")               # FMA path: padded to a whole block
        assert k2 >= K and k2 % 16 == 0 and k2 - K < 64


@pytest.mark.parametrize("fmt", ["tf32", "fp32"])
def test_padding_the_chain_changes_only_the_sign_of_zeros(fmt):
    """The all-zero steps Triton appends at K = 8 (a k8 tf32 instruction, 8 FMAs): outputs
    differ at most in the sign of a zero, and validate_hw's pad_k runs the same chain."""
    spec = registry.spec("sm90", fmt)
    diff_total = 0
    for fam in FAMILIES:
        g = torch.Generator().manual_seed(zlib.crc32(f"pad{fam}".encode()))
        kw = operands(spec, 64, 64, 8, fam, g)
        kw["A"][:16] = -0.0                    # rows of -0 products ...
        kw["C"][:8] = -0.0                     # ... on a -0 accumulator: IEEE keeps -0
        plain = tme.emulated_mm(**kw)
        padded = paths.pad_k(kw, 16)
        assert padded["A"].shape == (64, 16) and padded["B"].shape == (16, 64)
        p = tme.emulated_mm(**padded)
        d = bits(plain) != bits(p)
        diff_total += int(d.sum())
        assert torch.all(plain[d] == 0) and torch.all(p[d] == 0)
    if fmt == "fp32":      # fma(+0, +0, -0) = +0: the padded FMAs turn -0 results into +0
        assert diff_total > 0


def test_samples_pick_the_dot_products_of_batched_broadcast_outputs():
    spec = registry.spec("sm90", "bf16")
    g = torch.Generator().manual_seed(11)
    kw = operands(spec, 9, 11, 40, "bitstream", g, batch=(3,))
    kw["A"] = kw["A"].mT.contiguous().mT
    kw["B"] = kw["B"][:1]
    kw["C"] = kw["C"][:1, :1]
    out = tme.emulated_mm(**kw)
    idx = torch.tensor([[0, 0, 0], [2, 8, 10], [1, 3, 7]])
    s = archive.samples(kw, idx, emulated=out)
    for n, (b, i, j) in enumerate(idx.tolist()):
        one = tme.emulated_mm(s["a"][n:n + 1], s["b"][n].unsqueeze(1), s["c"][n].reshape(1, 1),
                              arch=spec)
        assert bits(one).item() == bits(out[b, i, j]).item() == bits(s["emulated"][n]).item()


# ---------------------------------------------------------------------------------------
# part 2 through CPU stand-ins
# ---------------------------------------------------------------------------------------

WRONG = "mma:mma.m16n8k8"      # the stand-in computes this one with the L = 16 model


def _stand_in(calls, arch="sm90"):
    def run(path, A, B, C, fmt, odt):
        calls.append(path)
        fa, _, fb = fmt.partition(",")
        fb = fb or fa
        kw = dict(A=A, B=B, C=C, out_dtype=odt)
        if path == WRONG:
            return tme.emulated_mm(**kw, arch=registry.spec(arch, fa, odt, in_format_b=fb))
        if path == "mma:mma.m16n8k32" and not _variant_rows():   # as nvcc 13's SASS says
            return diagnose.fp8_as_fp16_hmma(dict(A=A, B=B, C=C), "cpu", arch, odt, chained=True)
        if path.startswith("mma:"):
            s, _ = native.instruction_spec(arch, fa, odt, path[4:], in_format_b=fb)
            s = s or registry.spec(arch, fa, odt, in_format_b=fb)
            return tme.emulated_mm(**kw, arch=s)
        s = registry.spec(arch, fa, odt, in_format_b=fb)
        if path == "triton":      # the kernel's real chain: K padded to its blocks
            from torch_mma_emu.triton_kernels import run_k
            p = paths.pad_k(dict(A=A, B=B), run_k(A.shape[-1], fa))
            return tme.emulated_mm(p["A"], p["B"], C, arch=s, out_dtype=odt)
        return tme.emulated_mm(**kw, arch=s, c_mode="epilogue")
    return run


def _args(tmp_path, **kw):
    a = validate.parse_args(["--out", str(tmp_path), "--native-size", "64", "--native-k", "64",
                            "--native-outputs", str(64 * 64 * 3)] + kw.pop("extra", []))
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def _run_native(tmp_path, monkeypatch, formats, previous=None, budget=600.0, calls=None):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    calls = [] if calls is None else calls
    monkeypatch.setattr(paths, "run_native", _stand_in(calls))
    args = _args(tmp_path, formats=formats)
    state = results.State(dict(gpu="stand-in H100", arch="sm90"), str(tmp_path),
                          str(tmp_path / "report.md"))
    tar = archive.Archive(str(tmp_path / "mismatches.tar"))
    log = []
    rows = paths.part_native(args, "cpu", "sm90", budget, log.append, state, tar, previous,
                             cap=(9, 0), have_triton=True)
    return rows, calls, log


def test_part_native_compares_each_path_with_its_own_model(tmp_path, monkeypatch):
    rows, calls, _ = _run_native(tmp_path, monkeypatch, "fp16,tf32,fp8_e5m2")
    by = {(r["format"], r["path"]): r for r in rows}
    # the right models: 0 mismatches, including Triton's padded tf32 chain at K = 8
    for key in [("fp16->fp32", "mma:wgmma.m64n8k16"), ("fp16->fp32", "mma:mma.m16n8k16"),
                ("fp16->fp32", "triton"), ("fp16->fp32", "cublas"), ("tf32->fp32", "triton"),
                ("tf32->fp32", "mma:mma.m16n8k8.tf32"), ("fp8_e5m2xfp8_e4m3->fp16", "cublas"),
                ("fp8_e5m2->fp32", "mma:wgmma.m64n8k32")]:
        r = by[key]
        assert r["status"] == "ok" and r["mismatches"] == 0 and r["outputs"] >= 64 * 64 * 3, r
    # the wrong one is found, its inputs archived and the right hypothesis named
    bad = by[("fp16->fp32", WRONG)]
    assert bad["mismatches"] > 0 and bad["model"].startswith("t_fdpa L=8 F=25")
    assert any(e.startswith("L=16 F=25") for e in bad["explained"]), bad["explained"]
    assert bad["saved"].startswith("mismatches.tar:native_")
    # no model yet for Hopper's warp-level fp8 mma.sync (unless the registry has the variant)
    nm = by[("fp8_e5m2->fp32", "mma:mma.m16n8k32")]
    if not _variant_rows():
        assert nm["status"] == "no model yet" and nm["model"].startswith("(none; compared")
        assert nm["samples_saved"].startswith("mismatches.tar:samples_")
        assert nm["mismatches"] > 0 and any("two HMMA.16816 from zero chained" in e
                                            for e in nm["explained"]), nm["explained"]
    # cuBLAS e5m2 x e5m2: skipped, never called
    assert by[("fp8_e5m2->fp32", "cublas")]["status"] == paths.CUBLAS_NO_E5M2
    assert by[("fp8_e5m2->fp16", "cublas-promote")]["status"] == paths.CUBLAS_NO_E5M2
    assert by[("fp16->fp16", WRONG)]["mismatches"] > 0
    assert report.native_failures(rows) == 2          # the two wrong rows, nothing else
    # everything is on disk: results.json, the report, one archive
    res = json.loads((tmp_path / "results.json").read_text())
    assert len(res["native"]) == len(rows)
    text = (tmp_path / "report.md").read_text()
    assert "| fp16->fp32 | mma:mma.m16n8k8 | t_fdpa L=8 F=25" in text
    assert ("no model yet" in text) != bool(_variant_rows())
    arch = archive.read_archive(str(tmp_path / "mismatches.tar"))
    saved = arch[bad["saved"].split(":", 1)[1]]
    spec = tme.spec("sm90", "fp16")
    for n in range(min(5, saved["a"].shape[0])):       # the archive re-runs on any machine
        want = tme.emulated_mm(saved["a"][n:n + 1], saved["b"][n].unsqueeze(1),
                               saved["c"][n].reshape(1, 1), arch=spec)
        assert bits(want).item() == bits(saved["native"][n]).item()
    if not _variant_rows():
        smp = arch[nm["samples_saved"].split(":", 1)[1]]
        assert smp["instruction"] == "mma.m16n8k32" and len(smp["parts"]) == 3
        p0 = smp["parts"][0]          # the samples are the instruction's own outputs
        want = diagnose.fp8_as_fp16_hmma(dict(A=p0["a"][:50], B=p0["b"][:50].t(),
                                              C=torch.diag(p0["c"][:50].float())), "cpu", "sm90",
                                         torch.float32, chained=True).diagonal()
        assert torch.equal(bits(want), bits(p0["native"][:50]))
        assert smp["parts"][0]["a"].shape == (paths.NO_MODEL_SAMPLES, 32)


def test_part_native_survives_a_cut_off_and_resumes(tmp_path, monkeypatch):
    calls = []
    stand_in = _stand_in(calls)

    def dies(path, *a):
        if path == "triton":
            raise KeyboardInterrupt   # the command is cut off here
        return stand_in(path, *a)

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(paths, "run_native", dies)
    args = _args(tmp_path, formats="bf16")
    state = results.State(dict(gpu="stand-in", arch="sm90"), str(tmp_path), str(tmp_path / "r.md"))
    with pytest.raises(KeyboardInterrupt):
        paths.part_native(args, "cpu", "sm90", 600, lambda m: None, state, None, None,
                          cap=(9, 0), have_triton=True)
    res = json.loads((tmp_path / "results.json").read_text())
    done = [(r["format"], r["path"]) for r in res["native"]]
    assert done == [("bf16->fp32", "mma:wgmma.m64n8k16"), ("bf16->fp32", "mma:mma.m16n8k16"),
                    ("bf16->fp32", "mma:mma.m16n8k8")]
    assert "mma:mma.m16n8k8" in (tmp_path / "r.md").read_text()
    # the next command resumes: finished rows are kept, not re-run
    prev = results.load_results([str(tmp_path / "results.json")])
    previous = {(r["format"], r["path"]): r for r in prev["native"]}
    calls2 = []
    rows, _, _ = _run_native(tmp_path, monkeypatch, "bf16", previous=previous, calls=calls2)
    assert [r["path"] for r in rows] == ["mma:wgmma.m64n8k16", "mma:mma.m16n8k16",
                                          "mma:mma.m16n8k8", "triton", "cublas"]
    assert set(calls2) == {"triton", "cublas"}


def test_time_limit_and_a_lost_cuda_context(tmp_path, monkeypatch):
    rows, calls, _ = _run_native(tmp_path, monkeypatch, "fp16", budget=0)
    assert calls == [] and all(r["status"] == "not run (time limit)" for r in rows)

    def boom(path, *a):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(common, "sticky_cuda_error", lambda dev: "AcceleratorError: illegal access")
    monkeypatch.setattr(paths, "run_native", boom)
    args = _args(tmp_path, formats="fp16")
    rows = paths.part_native(args, "cpu", "sm90", 600, lambda m: None, None, None, None,
                             cap=(9, 0), have_triton=True)
    assert rows[0]["status"].startswith("error: RuntimeError: CUDA error")
    assert all(r["status"].startswith("not run (CUDA context lost") for r in rows[1:])
    assert report.native_failures(rows) == 1


def test_archive_is_one_capped_tar(tmp_path):
    a = archive.Archive(str(tmp_path / "m.tar"), cap=200_000)
    x = torch.arange(10_000, dtype=torch.float32)
    assert a.add("x.pt", dict(x=x)) == "m.tar:x.pt"
    assert a.add("x.pt", dict(x=x + 1)) == "m.tar:x_2.pt"
    assert a.add("big.pt", dict(x=torch.zeros(100_000))) is None       # over the cap
    assert archive.Archive(None).add("y.pt", {}) is None
    got = archive.read_archive(str(tmp_path / "m.tar"))
    assert sorted(got) == ["x.pt", "x_2.pt"] and torch.equal(got["x_2.pt"]["x"], x + 1)
    assert os.listdir(tmp_path) == ["m.tar"]
    # a second run appends to the same archive
    b = archive.Archive(str(tmp_path / "m.tar"), cap=200_000)
    assert b.add("x.pt", dict(x=x)) == "m.tar:x_3.pt"


# ---------------------------------------------------------------------------------------
# the command line: dry run, --render, bad input
# ---------------------------------------------------------------------------------------

def _cli(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "validate_hw.py"), *args],
                          capture_output=True, text=True, timeout=300)


def test_dry_run_writes_results_and_report_and_render_merges(tmp_path, monkeypatch):
    specs = registry.all_specs()[::20]      # the whole registry: tests/test_gpu_api.py
    monkeypatch.setattr(identity, "all_specs", lambda: specs)
    assert validate.main(["--device", "cpu", "--outputs", "30", "--out", str(tmp_path / "a")]) == 0
    res = json.loads((tmp_path / "a" / "results.json").read_text())
    assert len(res["identity"]) == len(specs)
    assert all(row["status"] == "ok" and row["mismatches"] == 0 for row in res["identity"])
    native_part = dict(meta=dict(gpu="NVIDIA H200", arch="sm90", command="python x --parts native"),
                       native=[dict(format="fp16->fp32", path="cublas", c_mode="epilogue",
                                    model="t_fdpa L=16 F=25 rho=rz_fp32", model_source="default",
                                    outputs=10, mismatches=2, nan_payload_only=0,
                                    by_family={f: 0 for f in FAMILIES}, status="ok",
                                    explained=["split-K into 2, sequential fp32 reduction, C added last"])])
    (tmp_path / "b.json").write_text(json.dumps(native_part))
    rep = tmp_path / "H200.md"
    r = _cli("--render", str(tmp_path / "a" / "results.json"), str(tmp_path / "b.json"),
             "--report", str(rep))
    assert r.returncode == 0, r.stderr
    text = rep.read_text()
    assert "# Hardware validation: NVIDIA H200" in text and "**0 mismatches**" in text
    assert "split-K into 2" in text and "dry run; python x --parts native" in text


def test_cli_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        validate.main(["--parts", "identity,speed"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.strip().count("\n") == 0 and "speed" in err
    assert validate.main(["--render", str(tmp_path / "nope.json"), "--report", str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err
    assert "cannot read" in err and err.strip().count("\n") == 0
    assert validate.main(["--render", str(tmp_path / "nope.json")]) == 2
    assert "needs --report" in capsys.readouterr().err


def test_identity_stops_on_a_lost_cuda_context_and_resumes(tmp_path, monkeypatch):
    specs = registry.all_specs()[:5]
    monkeypatch.setattr(identity, "all_specs", lambda: specs)
    real_to_dev = identity.to_dev
    seen = []

    def to_dev(kw, dev):
        seen.append(kw["arch"])
        if kw["arch"] == specs[1]:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return real_to_dev(kw, dev)

    monkeypatch.setattr(identity, "to_dev", to_dev)
    monkeypatch.setattr(common, "sticky_cuda_error", lambda dev: "AcceleratorError: illegal access")
    args = _args(tmp_path, extra=["--outputs", "30"])
    rows = identity.part_identity(args, torch.device("cpu"), 600, lambda m: None)
    st = [r["status"] for r in rows]
    assert st[0] == "ok" and st[1].startswith("error: RuntimeError: CUDA error")
    assert all(s.startswith("not run (CUDA context lost") for s in st[2:])
    # the next process resumes: the failed entry is kept (not re-run), the rest run
    monkeypatch.setattr(common, "sticky_cuda_error", lambda dev: None)
    seen.clear()
    rows2 = identity.part_identity(args, torch.device("cpu"), 600, lambda m: None,
                                   previous={r["spec"]: r for r in rows})
    assert [r["status"] for r in rows2] == [st[0], st[1], "ok", "ok", "ok"]
    assert specs[0] not in seen and specs[1] not in seen and specs[2] in seen


def test_part_native_path_filters(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(paths, "run_native", _stand_in([]))
    args = _args(tmp_path, formats="bf16", exclude_paths="mma:mma,cublas")
    rows = paths.part_native(args, "cpu", "sm90", 600, lambda m: None, cap=(9, 0), have_triton=True)
    assert [r["path"] for r in rows] == ["mma:wgmma.m64n8k16", "triton"]
    args = _args(tmp_path, formats="fp16->fp16", paths="mma:wgmma")
    rows = paths.part_native(args, "cpu", "sm90", 600, lambda m: None, cap=(9, 0), have_triton=True)
    assert [(r["format"], r["path"]) for r in rows] == [("fp16->fp16", "mma:wgmma.m64n8k16")]


def test_sass_hypothesis_reproduces_the_b200_fp8_fp32_recording():
    """fp8 -> fp16, two HMMA.16816 (the fp16 model), then + c: every sample of the B200
    mma.sync.m16n8k32 fp8 -> fp32 recording (c != 0), once the file is in tests/data."""
    np = pytest.importorskip("numpy")
    path = ROOT / "tests" / "data" / "hwdata" / "B200_fp8_e4m3_to_fp32.npz"
    if not path.exists():
        pytest.skip("B200_fp8_e4m3_to_fp32.npz is not in tests/data/hwdata yet")
    z = np.load(path)
    f = {k: torch.from_numpy(z[k].astype(np.int64)).to(torch.int32).view(torch.float32)
         for k in "abcd"}
    A8, B8 = f["a"].to(torch.float8_e4m3fn), f["b"].to(torch.float8_e4m3fn)
    assert torch.equal(A8.float(), f["a"]) and A8.shape[1] == 32
    bad = 0
    for s0 in range(0, A8.shape[0], 500):
        sl = slice(s0, min(A8.shape[0], s0 + 500))
        out = diagnose.fp8_as_fp16_hmma(dict(A=A8[sl], B=B8[sl].t(), C=torch.diag(f["c"][sl])),
                                        "cpu", "sm100", torch.float32, chained=True).diagonal()
        bad += int((bits(out) != bits(f["d"][sl])).sum())
    assert bad == 0
