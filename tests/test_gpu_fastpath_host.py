"""The CUDA kernel's register T-FDPA chunk (csrc/cuda/fast_tfdpa.h) against the core's
fused_op, on the CPU: the header is host/device code, so the host compiler builds the same
source the GPU runs (csrc/cuda/fast_tfdpa_check.cpp).  Every t_fdpa registry entry, chain
and epilogue parameter vectors, uniform codes plus the largest-sum and alignment families.
Needs a C++20 host compiler (skips without one)."""
import os
import shutil
import subprocess
import zlib

import pytest

from torch_mma_emu.registry import all_specs
from torch_mma_emu.cpp import params

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "csrc", "cuda", "fast_tfdpa_check.cpp")
SPECS = [s for s in all_specs() if s.op == "t_fdpa" and not s.scaled and not s.multipass]
MULTIPASS = [s for s in all_specs() if s.multipass]


@pytest.fixture(scope="module")
def checker(tmp_path_factory):
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    exe = tmp_path_factory.mktemp("fastpath") / "fast_tfdpa_check"
    r = subprocess.run([cxx, "-O2", "-std=c++20", "-ffp-contract=off", "-o", str(exe), SRC],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return str(exe)


def run(exe, lines):
    r = subprocess.run([exe], input="\n".join(lines) + "\n", capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return [tuple(int(x) for x in ln.split()) if not ln.startswith("skip") else None
            for ln in r.stdout.splitlines()], r.stderr


def test_every_fast_registry_entry_matches_fused_op(checker):
    count = int(os.environ.get("MMA_EMU_FASTPATH_COUNT", "20000"))
    lines = []
    for s in SPECS:
        seed = zlib.crc32(s.to_string().encode())
        lines.append(f"{count} {seed} " + " ".join(map(str, params(s))))
    res, err = run(checker, lines)
    assert len(res) == len(SPECS)
    skipped = [s for s, r in zip(SPECS, res) if r is None]
    # every NVIDIA t_fdpa entry takes the fast path (F <= 29, G >= 0, L in 4/8/16/32)
    assert not skipped, [s.describe() for s in skipped]
    bad = [(s.arch, s.in_format, s.in_format_b, s.out_format, r[1]) for s, r in zip(SPECS, res) if r[1]]
    assert not bad, f"fast chunk differs from fused_op: {bad}\n{err}"


def test_custom_specs_outside_the_fast_path_are_refused(checker):
    base = SPECS[0]
    odd = [base.replace(L=12), base.replace(F=30), base.replace(F=5)]  # L, F too big, G < 0
    res, _ = run(checker, [f"10 1 " + " ".join(map(str, params(s))) for s in odd])
    assert res == [None, None, None]


def test_custom_fast_specs_match(checker):
    base = [s for s in SPECS if s.in_format == "fp16" and s.out_format == "fp32"][0]
    custom = [base.replace(F=29, L=4), base.replace(F=27, L=16), base.replace(F=20, L=32),
              base.replace(emax_floor=-20), base.replace(F=24, L=8)]
    res, err = run(checker, [f"5000 7 " + " ".join(map(str, params(s))) for s in custom])
    assert all(r is not None and r[1] == 0 for r in res), (res, err)


def test_fixed_output_formats_of_the_cuda_kernel_match_formats_py():
    # csrc/cuda/gemm_cuda.cu fixes these FormatDesc values in its specialised fast kernels
    # (kFp32Desc, kFp16Desc); the host falls back to the generic kernel when they differ,
    # so a change here costs speed, not bits: keep them in step.
    from torch_mma_emu.spec import Spec
    for out, rho, want in (("fp32", "rz_fp32", [2, 8, 23, 127, 0, 1, 0]),
                           ("fp16", "rne_fp16", [5, 5, 10, 15, 0, 1, 0])):
        p = list(params(Spec(op="t_fdpa", in_format="fp16", out_format=out, L=16, F=25, rho=rho)))
        assert p[14 + 14:14 + 21] == want


def test_multipass_entries_skip_the_fast_path(checker):
    """The fast chunk knows only the single fused chain: multi-pass Params (passes > 1 or
    c added last) go to the generic kernel, which runs the core's dot_fused."""
    assert MULTIPASS
    res, _ = run(checker, [f"10 1 " + " ".join(map(str, params(s))) for s in MULTIPASS])
    assert res == [None] * len(MULTIPASS)
