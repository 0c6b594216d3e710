"""The GPU machine's step scripts without a GPU: shell syntax, the dry run of
scripts/gpu/steps.sh (which commands, which time limits, budget exhaustion), the smoke test
and probe steps (torch_mma_emu.hw) through CPU stand-ins of the instruction kernel, the CUDA
preview on CPU."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import native
from torch_mma_emu.hw import probe, schedules, smoke, triton_programs
from torch_mma_emu.schedule import Schedule
from torch_mma_emu.schedule_search import candidate_schedules, match_schedules, mismatches

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ["scripts/gpu/env.sh", "scripts/gpu/steps.sh", "scripts/validate_hw.sh",
           "scripts/_setup_env.sh", "scripts/build_ext.sh", "scripts/gpu/prebuild.sh"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_shell_syntax(script):
    r = subprocess.run(["bash", "-n", str(ROOT / script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _steps(tmp_path, *steps, **env):
    e = dict(os.environ, OUT=str(tmp_path), MMA_EMU_DRY_RUN="1", PYTHON=sys.executable,
             TORCH_CUDA_ARCH_LIST="9.0a", **env)
    return subprocess.run(["bash", str(ROOT / "scripts/gpu/steps.sh"), *steps], env=e,
                          capture_output=True, text=True, timeout=120)


def test_steps_dry_run_plans_every_step_within_its_limit(tmp_path):
    r = _steps(tmp_path, "env", "build", "smoke", "identity@150", "native:fp8_e4m3,fp8_e5m2",
               "probe", "tests", "bench", "profile", "fprev", "preview", "schedules@100",
               "triton@140",
               MMA_EMU_VALIDATE_ARGS="--native-outputs 300000",
               MMA_EMU_PROBE_ARGS="--instructions all")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "+ [420s] env PYTHON=" in out and "scripts/build_ext.sh" in out
    assert "scripts/gpu/smoke.py emulated" in out and "compute-sanitizer --tool memcheck" in out
    assert ("+ [150s] " in out and "--time-limit 120 --parts identity --native-outputs 300000"
            in out)
    assert "--parts native --formats fp8_e4m3,fp8_e5m2" in out
    assert f"--report {tmp_path}/GPU.md" in out
    assert "probe_native.py -n 100000" in out and "--instructions all" in out
    assert "-m pytest -q -m gpu tests" in out and "bench_emulator.py --device cuda" in out
    assert "ncu --clock-control none" in out and "reveal matmul --backend cublas" in out
    assert "reveal sum --n 100000" in out and "scripts/gpu/preview_cuda.py" in out
    assert "--dtype float8_e4m3fn --m 64 --n 64 --k 16 " in out and "float8_e4m3fn --m 64 --n 64 --k 64" not in out
    assert f"scripts/gpu/schedules.py --out {tmp_path}/schedules.md" in out
    assert (f"+ [140s] {sys.executable} scripts/gpu/triton_emulate.py --out "
            f"{tmp_path}/triton.md --archive {tmp_path}/triton_mismatches.tar") in out
    assert (tmp_path / "steps.log").read_text().count("+ [") == out.count("+ [")
    # every reveal the GPU runs stays within the bound in force for its command (limits.py):
    # a refusal there exits 2 and loses the tree
    import re
    from torch_mma_emu import limits
    for line in out.splitlines():
        m = re.search(r"reveal (?:sum|matmul) .*--(?:n|k) (\d+)", line)
        if m:
            env = re.search(r"MMA_EMU_MAX_REVEAL_N=(\d+)", line)
            bound = int(env.group(1)) if env else limits.BOUNDS["reveal_n"].default
            assert int(m.group(1)) <= bound, line


def test_steps_budget_and_bad_steps(tmp_path):
    r = _steps(tmp_path, "identity", "native", "probe", MMA_EMU_BUDGET="40")
    assert r.returncode == 0 and "+ [" not in r.stdout       # under 30 s left: skip
    assert r.stdout.count("skipped: no time left") == 3
    r = _steps(tmp_path, "identity", "native", MMA_EMU_BUDGET="60")
    assert r.stdout.count("+ [4") == 2                        # 60 - 15 s of reserve
    r = _steps(tmp_path, "identity", "velocity")
    assert r.returncode == 2 and "unknown step 'velocity'" in r.stderr and "+ [" not in r.stdout
    r = _steps(tmp_path)
    assert r.returncode == 2 and "usage" in r.stderr


def test_the_two_commands_of_the_15_minute_lease(tmp_path):
    """cmd1 (about 9 minutes: build, smoke, identity, the instruction kernels, Triton, speed)
    and cmd2 (recordings, schedules, FPRev) expand to their steps in the runbook's order and
    caps, with cmd1's smaller validation counts and no sanitizer pass."""
    r = _steps(tmp_path, "cmd1")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "[steps] env build@150 smoke@60 identity@90 mma@120 triton@75 speed@40" in out
    order = ["scripts/build_ext.sh", "smoke.py emulated", "--parts identity --outputs 200000",
             "--parts native --paths mma", "triton_emulate.py", "--parts bench --bench-size 4096"]
    pos = [out.index(o) for o in order]
    assert pos == sorted(pos)
    assert "compute-sanitizer" not in out and "--native-outputs 200000" in out
    assert sum([150, 60, 90, 120, 75, 40]) <= 540
    r = _steps(tmp_path, "cmd2")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "[steps] approx@120 reductions@30 schedules@60 fprev@60" in out
    order = ["scripts/gpu/approx.py", "scripts/gpu/reductions.py --device cuda",
             "scripts/gpu/schedules.py", "reveal sum --n 1024", "reveal matmul --backend cublas"]
    pos = [out.index(o) for o in order]
    assert pos == sorted(pos) and "240 s left" in out
    assert "+ [120s]" in out and "--time-limit 80" in out


def test_a_steps_own_limit_caps_each_of_its_commands(tmp_path):
    """STEP@SECONDS caps the step as a whole: a step of several commands (smoke: one process
    per kind) gets no more than its limit for all of them (a fake clock: `date` advanced 20 s
    per call)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "date").write_text('#!/bin/bash\nf=%s/clock; n=$(cat $f 2>/dev/null || echo 1000);'
                               ' echo $((n + 20)) >$f; echo $n\n' % tmp_path)
    (fake / "date").chmod(0o755)
    r = _steps(tmp_path, "smoke@70", PATH=f"{fake}:{os.environ['PATH']}",
               MMA_EMU_SANITIZE="0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "skipped: no time left" in r.stdout and r.stdout.count("smoke.py") < 4


def test_validate_hw_sh_runs_the_steps(tmp_path):
    e = dict(os.environ, OUT=str(tmp_path), PYTHON=sys.executable, TORCH_CUDA_ARCH_LIST="9.0a")
    r = subprocess.run(["bash", str(ROOT / "scripts/validate_hw.sh"), "--dry-run"], env=e,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for step in ("env", "build", "smoke", "identity", "native", "probe", "tests", "bench"):
        assert f"[steps] {step}:" in r.stdout
    r = subprocess.run(["bash", str(ROOT / "scripts/validate_hw.sh"), "--quick"], env=e,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "usage" in r.stderr


def test_env_sh_source_hash_and_python_headers():
    r = subprocess.run(["bash", "-c", f"source {ROOT}/scripts/gpu/env.sh; src_hash; python_h"],
                       env=dict(os.environ, PYTHON=sys.executable, OUT="/tmp/mma_emu_test_out",
                                TORCH_CUDA_ARCH_LIST="9.0a"),
                       capture_output=True, text=True, timeout=120)
    h, inc = r.stdout.split()[:2]
    assert len(h) == 12 and all(c in "0123456789abcdef" for c in h)
    assert (Path(inc) / "Python.h").exists()


@pytest.fixture
def stand_in(monkeypatch):
    """The instruction kernel as a CPU stand-in (tests/test_gpu_api.py) on a make-believe
    sm90 device."""
    from test_gpu_api import _fake_mma_instr
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200 stand-in")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(native, "_need_cuda", lambda *a: None)
    monkeypatch.setattr(torch.ops.mma_emu, "_mma_instr", _fake_mma_instr, raising=False)


def test_smoke_checks_through_the_stand_in(stand_in, capsys):
    dev = torch.device("cpu")
    assert smoke.kinds(dev) == ["emulated", "mma:mma.m16n8k16", "mma:mma.m16n8k8",
                                "mma:mma.m16n8k8.tf32", "mma:mma.m16n8k32", "mma:wgmma.m64n8k16",
                                "mma:wgmma.m64n8k8.tf32", "mma:wgmma.m64n8k32", "triton", "cublas"]
    assert smoke.run("emulated", dev) == 0
    assert smoke.run("mma:wgmma.m64n8k16", dev) == 0
    # the stand-in computes every kind with the sm90 default (L = 16): the k8 model differs
    assert smoke.run("mma:mma.m16n8k8", dev) == 1
    # the warp-level fp8 mma.sync: with no registry model it is reported, not a failure;
    # with the multi-pass model (issue 11) the stand-in, which computes wgmma's arithmetic,
    # differs from it for fp16 accumulators and is flagged
    rc = smoke.run("mma:mma.m16n8k32", dev)
    out = capsys.readouterr().out
    assert "DIFF mma.m16n8k8 fp16->fp32" in out
    variant = native.instruction_spec("sm90", "fp8_e4m3", torch.float16, "mma.m16n8k32")[0]
    if variant is None:
        assert "no model yet" in out and rc == 0
    else:
        assert variant.passes == 2 and rc == 1 and "DIFF mma.m16n8k32 fp8_e4m3->fp16" in out
    assert smoke.run("nope", dev) == 2


def test_smoke_reports_a_broken_kind_as_an_error(stand_in, monkeypatch, capsys):
    def broken(*a):
        raise RuntimeError("CUDA error: an illegal instruction was encountered")

    monkeypatch.setattr(torch.ops.mma_emu, "_mma_instr", broken, raising=False)
    assert smoke.run("mma:wgmma.m64n8k32", torch.device("cpu")) == 3
    assert "ERR  mma:wgmma.m64n8k32: RuntimeError: CUDA error" in capsys.readouterr().out


def test_probe_native_all_instructions_and_time_limit(stand_in, tmp_path, capsys):
    rep = tmp_path / "H200_probe.md"
    rc = probe.main(["-n", "300", "--formats", "tf32", "--instructions", "all",
                     "--device", "cpu", "--report", str(rep)])
    text = rep.read_text()
    assert rc == 0, capsys.readouterr().out
    # the floor -133 and a zero-term exponent -133 are one arithmetic (docs/model.md 6.3):
    # infer writes it as zero_exp, and the registry comparison says "(same)"
    assert "- tf32 -> fp32: inferred `t_fdpa L=8 F=25 rho=rz_fp32 zero_sign=plus " \
        "zero_exp=-133`; registry sm90" in text
    assert "- tf32 -> fp32 [mma.m16n8k8.tf32]: inferred" in text and "(same)" in text
    assert "Incomplete" not in text
    rc = probe.main(["-n", "300", "--formats", "tf32", "--time-limit", "0",
                     "--device", "cpu", "--report", str(rep)])
    text = rep.read_text()
    assert rc == 0 and "not run (time limit)" in text and "Incomplete" in text
    assert probe.main(["--formats", "fp12", "--device", "cpu"]) == 2


def test_preview_cuda_script_on_the_cpu():
    r = subprocess.run([sys.executable, str(ROOT / "scripts/gpu/preview_cuda.py"), "--device",
                        "cpu", "--batch", "2", "--reps", "1", "--dtypes", "float32"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "emulate(MI300X)" in r.stdout and "convert(sm80)" in r.stdout
    assert "attention" in r.stdout and "PREVIEW_JSON" in r.stdout
    r = subprocess.run([sys.executable, str(ROOT / "scripts/gpu/preview_cuda.py"), "--device",
                        "cpu", "--dtypes", "float13"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown dtype" in r.stderr


def test_schedules_step_finds_the_stand_in_schedules(tmp_path, monkeypatch, capsys):
    """hw.schedules (scripts/gpu/schedules.py) --stand-in: each 'library call' is emulated_mm with a known
    schedule; the ranking must put it among the bit-exact candidates (exit 0), the preset
    column must say 0 where the stand-in is the preset, and the report is written."""
    mod = schedules
    out = tmp_path / "schedules.md"
    assert mod.main(["--stand-in", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| torch.mm fp16 -> fp32 16x512x16 | 512 | - | - | exact: split-K 3" in text
    assert "| torch._scaled_mm use_fast_accum=True | 512 | scaled_mm_fast_accum | 0 | exact: " \
           "plain chain / next:" in text
    # a stand-in no candidate reproduces is reported and fails the self-test
    monkeypatch.setitem(mod.STAND_IN, ("matmul", None),
                        Schedule(split_k=3, reduce="pairwise", alpha=0.5))
    assert mod.main(["--stand-in", "--out", str(out)]) == 1
    assert "not among the exact candidates" in capsys.readouterr().err


def test_schedule_search_ranks_candidates():
    c = candidate_schedules(K=256, L=16, split_ks=(1, 2, 3, 4))
    assert c[0] == Schedule() and Schedule(split_k=3, reduce="pairwise") in c
    assert Schedule(split_k=2, reduce="pairwise") not in c        # the same order as sequential
    assert Schedule(promote_every=128, c_mode="epilogue") in c
    assert Schedule(split_k=4, split_grain="cublas") in c
    c3 = candidate_schedules(K=256, L=16, split_ks=(3,), promote=False,
                             merges=("workspace", "fp16_serial"))
    assert Schedule(split_k=3, split_grain="cublas", merge="fp16_serial") in c3
    assert all(s.promote_every in (None, 16, 32, 64, 128) for s in c)
    g = torch.Generator().manual_seed(0)
    A, B = torch.randn(32, 256, generator=g).half(), torch.randn(256, 32, generator=g).half()
    D = tme.emulated_mm(A, B, arch="sm90", schedule=Schedule(split_k=3, reduce="pairwise"))
    ranking = match_schedules(D, A, B, arch="sm90", candidates=c)
    assert ranking[0][1] == 0 and Schedule(split_k=3, reduce="pairwise") in \
        [s for s, n in ranking if n == 0]
    assert ranking[-1][1] > 0 and [n for _, n in ranking] == sorted(n for _, n in ranking)
    # post: a library that rounds the fp32 accumulation to fp16 at the end
    ranking16 = match_schedules(D.half(), A, B, arch="sm90", candidates=c[:3],
                                post=lambda E: E.half(), out_dtype=torch.float32)
    assert ranking16[0][1] == 0
    nan = torch.tensor([float("nan"), 1.0])
    assert mismatches(nan, torch.tensor([float("-nan"), 1.0])) == 0
    with pytest.raises(ValueError, match="mismatches"):
        mismatches(nan, nan.double())


def test_triton_step_compares_bit_for_bit_and_archives_mismatches(tmp_path):
    """hw.triton_programs (scripts/gpu/triton_emulate.py) --stand-in: the 'native' run is the emulation again;
    every case must agree (exit 0) and the report say so; a flipped bit in one case's
    output is a MISMATCH (exit 1) whose inputs and outputs go into the archive."""
    pytest.importorskip("triton")
    mod = triton_programs
    from torch_mma_emu.hw.archive import read_archive
    out, tar = tmp_path / "triton.md", tmp_path / "t.tar"
    assert mod.main(["--stand-in", "--quick", "--out", str(out), "--archive", str(tar)]) == 0
    text = out.read_text()
    assert "| matmul fp8_e4m3 imprecise=32 | wgmma fp8_e4m3->fp32, fp32 promotion every 32: " \
           "instruction QGMMA (wgmma.m64nNk32), model sm90 qgmma.k32 x8 | 7680 | 0 | 0 | " \
           "exact | ok |" in text
    assert "| attention integer scores causal |" in text and "MISMATCH" not in text
    assert text.count("| ok |") == 38 and not tar.exists()
    assert "| torch.compile (inductor) launch inside emulate | - | - | - | - | refused | " \
           "skipped (no GPU) |" in text
    assert mod.main(["--stand-in", "--quick", "--out", str(out), "--archive", str(tar),
                     "--perturb", "bmm fp16 (3-D dots)"]) == 1
    assert "| bmm fp16 (3-D dots) | mma.sync fp16->fp32: instruction mma.sync (no sm90 row " \
           "of its own), model sm90 hgmma.k16 standing in x24 | 7680 | 1 |" in out.read_text()
    saved = read_archive(str(tar))["bmm_fp16_(3-D_dots).pt"]
    assert saved["arch"] == "sm90" and (saved["native"] != saved["emulated"]).sum() == 1
    assert mod.main(["--out", str(out)]) == 2 or torch.cuda.is_available()


def test_triton_step_cases_exercise_the_compiler_rewrites():
    """The step's `acc += tl.dot` and sum-of-products cases reach the replayed rewrites
    (torch_mma_emu/triton/combine.py): under emulate("sm90") the `+=` GEMM has the chain's
    bits (fp8 on sm90: the dot from 0, then an addition), the sum-of-products GEMM is a chain
    of tf32 dots, and both differ from the plain interpreter; so on a GPU these rows check
    the rewrites against the hardware, not the interpreter's NumPy."""
    pytest.importorskip("triton")
    import torch_mma_emu.triton as tmt
    from helpers import same
    mod = triton_programs
    cases = {name: (make, run) for name, _, make, run in mod.cases("sm90", quick=True)}

    def go(name, block):
        make, run = cases[name]
        x = make(torch.Generator().manual_seed(0))
        with block:
            return run(tuple(t.clone() for t in x), True), x
    for chain, plus in (("matmul fp16", "matmul fp16, acc += tl.dot"),
                        ("matmul tf32", "matmul tf32, acc += tl.dot"),
                        ("matmul fp16 -> fp16 acc", "matmul fp16 -> fp16 acc, acc += tl.dot")):
        ref, x = go(chain, tmt.emulate("sm90"))
        got, y = go(plus, tmt.emulate("sm90"))
        assert all(same(u, v) for u, v in zip(x, y)) and same(got, ref), plus
        assert not same(go(plus, tmt.interpret())[0], got), plus
    got, (A, B, C) = go("matmul fp8_e4m3, acc += tl.dot", tmt.emulate("sm90"))
    K = A.shape[1]
    pad = -K % 128           # block_k = 128, zero-padded tail
    A = torch.cat([A.float(), torch.zeros(A.shape[0], pad)], 1).to(A.dtype)
    B = torch.cat([B.float(), torch.zeros(pad, B.shape[1])], 0).to(B.dtype)
    apart = C
    for k in range(0, K + pad, 128):
        apart = apart + tme.emulated_mm(A[:, k:k + 128], B[k:k + 128], torch.zeros_like(C),
                                        arch="sm90")
    assert same(got, apart)
    assert not same(got, go("matmul fp8_e4m3 imprecise=None", tmt.emulate("sm90"))[0])
    for tile in (32, 64):
        name = f"sum_matmul fp32 {tile}x{tile} (sum of products)"
        got, (A, B, C) = go(name, tmt.emulate("sm90"))
        assert same(got, tme.emulated_mm(A, B, C, arch="sm90", in_format="tf32")), tile
        assert not same(go(name, tmt.interpret())[0], got), tile
