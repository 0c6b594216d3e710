"""The vector kernels without torch: tests/native/fast_exact.cpp (the header-only core plus the
FDPA / IEEE-value kernels of csrc/cpu) built natively for AVX2 and AVX-512, and with an aarch64
cross compiler for NEON, run under qemu-user.  For every registry row it compares the vector
kernel with the scalar core on random, bit-stream, exponent-spread, cancelling and
NaN/Inf-sprinkled inputs (zero mismatches allowed).  Speed under qemu is not measured.

tests/native/direct_fill.cpp holds each ISA's fill of the planes from fp16 / bf16 / tf32 / fp8
codes to the plain loops' on every 8- and 16-bit code and a structured set of tf32 words.

Skips where the tools are missing (scripts/_setup_env.sh installs g++-aarch64-linux-gnu and
qemu-user where it can).  A deliberately broken build (-DMMA_TEST_BREAK flips bit 13 (an fp16 ulp) of
every vector result) must fail on every FDPA row: the harness can fail.

The "finish" family aims c at the dot of one instruction; on the TR/GTR rows it places lanes
whose core result changes with `tr_renorm` flipped (docs/model.md 6.5: T' + c' carrying into
the next binade, with the renormalisation's dropped bit deciding the RNE).  Each line reports
finish=wrong/lanes/differing/differing-and-wrong; the differing lanes must exist, be right,
and (in the broken build) be wrong: the vector kernel finishes them itself, not the core.
"""
import hashlib
import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from torch_mma_emu.registry import ROWS, all_specs
from torch_mma_emu.cpp import params
from helpers import fast_path
import torch_mma_emu as tme

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "tests/native/fast_exact.cpp"] + [
    ROOT / "csrc/cpu" / f for f in ("fdpa_engine.cpp", "eligible.cpp", "kern_avx2.cpp",
                                    "kern_avx512.cpp", "kern_neon.cpp")]
FLAGS = ["-std=c++20", "-O2", "-ffp-contract=off", "-fno-fast-math"]
BREAK = "-DMMA_TEST_BREAK(x)=V::xor_(x, V::set1(1 << 13))"
X86 = platform.machine() in ("x86_64", "AMD64")


def _name(s):
    sc = f"-{s.scale_format}{s.block_size}" if s.scaled else ""
    b = f"x{s.in_format_b}" if s.in_format_b else ""
    mp = f"-{s.passes}pass" if s.multipass else ""
    rz = "-rz" if s.op in ("tr_fdpa", "gtr_fdpa") and s.align_round == "rz" else ""
    return f"{s.arch}-{s.op}-{s.in_format}{b}-{s.out_format}{sc}-L{s.L}{mp}{rz}"


def _rows(specs):
    return "".join(f"{_name(s)} {' '.join(map(str, params(s)))}\n" for s in specs)


ROW_SPECS = [r.first_spec() for r in ROWS]
# tr_renorm's finish under round-toward-zero alignment too (the registry rows round down)
RZ_RENORM = [s.replace(align_round="rz") for s in ROW_SPECS if s.tr_renorm]
# FTZ-AddMul on other instruction grids (the kernel counts L / P groups per instruction) and
# fp16 (product / partial-sum flushes left out: values_engine.h ftz_inner_needed) beside bf16
FTZ_GRID = [tme.spec("gfx90a", f).replace(L=L, P=P) for f in ("fp16", "bf16")
            for L, P in ((4, 4), (16, 2), (16, 4))]
VALUE_SPECS = [s for s in ROW_SPECS if s.op in ("fma", "ftz_addmul")] + FTZ_GRID


def _build(cxx, out_name, extra=(), main=SOURCES[0]):
    """Compile the harness (cached under build/native by a hash of compiler, flags, sources)."""
    sources = [main] + SOURCES[1:]
    srcs = sources + sorted((ROOT / "csrc/core").glob("*.h")) + sorted(
        (ROOT / "csrc/cpu").glob("*.h")) + sorted((ROOT / "csrc/cpu/simd").glob("*.h")) + sorted(
        (ROOT / "csrc/cpu/kern").glob("*.inc"))
    h = hashlib.sha256(" ".join([cxx, *FLAGS, *extra]).encode())
    for p in srcs:
        h.update(p.read_bytes())
    exe = ROOT / "build/native" / f"{out_name}-{h.hexdigest()[:16]}"
    if exe.exists():
        return exe
    exe.parent.mkdir(parents=True, exist_ok=True)
    cmd = [cxx, *FLAGS, *extra, "-o", str(exe) + ".tmp", *map(str, sources)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{' '.join(cmd)}\n{r.stderr[-4000:]}"
    os.replace(str(exe) + ".tmp", exe)
    return exe


def _run(cmd, specs, seed=1, timeout=600, env=None):
    r = subprocess.run([*cmd, str(seed)], input=_rows(specs), capture_output=True, text=True,
                       timeout=timeout, env=None if env is None else {**os.environ, **env})
    lines = r.stdout.strip().splitlines()
    return r.returncode, lines


def _finish(line):
    """(wrong, lanes, differing, differing and wrong) of the finish family."""
    return tuple(int(x) for x in line.split("finish=")[1].split()[0].rstrip(";").split("/"))


def _check(cmd, isa, specs, seed=1, env=None):
    rc, lines = _run(cmd, specs, seed, env=env)
    bad = [ln for ln in lines[:-1] if not ln.startswith("ok ")]
    assert not bad and rc == 0, "\n".join(bad[:20] or lines[-5:])
    assert lines[-1] == f"{len(specs)} passed, 0 failed", lines[-1]
    # every row ran its vector kernel on this ISA
    assert all(f" {isa}:" in ln for ln in lines[:-1])
    # the FDPA rows ran the kernel compiled for their shape (fdpa_engine.h kTShapes,
    # kern/tables.inc panel_fixed) unless told otherwise
    want = "generic" if env else "fixed"
    for s, ln in zip(specs, lines[:-1]):
        if s in ROW_SPECS and s.op not in ("fma", "ftz_addmul"):
            assert f" shape={want} " in ln, ln
    # the TR/GTR rows met lanes where the two finishes differ (and got them right)
    for s, ln in zip(specs, lines[:-1]):
        if s.op in ("tr_fdpa", "gtr_fdpa") and s.out_format == "fp32":
            assert _finish(ln)[2] > 0, ln


def _x86_isas():
    if not X86:
        return []
    probe = tme.spec("sm90", "fp16")
    return [i for i in ("avx512", "avx2") if fast_path(probe, i).startswith(i + ":")]


@pytest.mark.skipif(not X86 or shutil.which("g++") is None, reason="needs g++ on x86-64")
@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_native_kernels_equal_the_core(isa):
    if isa not in _x86_isas():
        pytest.skip(f"this CPU has no {isa}")
    _check([str(_build("g++", "fast_exact")), isa], isa, ROW_SPECS + RZ_RENORM + FTZ_GRID)


# Spec.zero_exp / emax_floor beside the kernels compiled per shape: at or below the lowest
# emax a lane can have (min(output emin, F - 126)) they cannot move it and the row keeps its
# fixed kernel; above, or with per-chunk zero masks (zero_exp above the output's emin), the
# generic kernel applies them
_T8 = tme.spec("sm80", "bf16")     # F = 24, fp32 out: lowest emax -126
_T16H = tme.spec("sm90", "fp16", "fp16")  # F = 25, fp16 out: lowest emax -101
T_EDGES = [(_T8.replace(zero_exp=-126), "fixed"), (_T8.replace(zero_exp=-125), "generic"),
           (_T8.replace(zero_exp=2), "generic"), (_T8.replace(emax_floor=-126), "fixed"),
           (_T8.replace(emax_floor=-125), "generic"), (_T8.replace(emax_floor=2), "generic"),
           (_T16H.replace(emax_floor=-101), "fixed"), (_T16H.replace(emax_floor=2), "generic")]


@pytest.mark.skipif(not X86 or shutil.which("g++") is None, reason="needs g++ on x86-64")
@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_native_fixed_shapes(isa):
    """Every FDPA row (T, ST, TR, GTR, E, GST) through the generic kernel too
    (MMA_EMU_CPU_GENERIC=1), and the zero_exp / emax_floor edges on the kernel each one picks."""
    if isa not in _x86_isas():
        pytest.skip(f"this CPU has no {isa}")
    exe = str(_build("g++", "fast_exact"))
    _check([exe, isa], isa, [s for s in ROW_SPECS if s.op not in ("fma", "ftz_addmul")],
           env={"MMA_EMU_CPU_GENERIC": "1"})
    specs = [s for s, _ in T_EDGES]
    _check([exe, isa], isa, specs)
    _, lines = _run([exe, isa], specs)
    assert [ln.split(" shape=")[1].split()[0] for ln in lines[:-1]] == [w for _, w in T_EDGES], lines


@pytest.mark.skipif(not X86 or shutil.which("g++") is None, reason="needs g++ on x86-64")
@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_native_direct_fill(isa):
    """tests/native/direct_fill.cpp: the planes an ISA fills from fp16 / bf16 / tf32 / fp8
    codes (AVX-512: its own, 32 codes a step, but for the fnuz fp8 codes) equal the plain
    loops' on every 8- and 16-bit code and a structured set of tf32 words, code by code, in
    runs and in B's panels."""
    if isa not in _x86_isas():
        pytest.skip(f"this CPU has no {isa}")
    exe = _build("g++", "direct_fill", main=ROOT / "tests/native/direct_fill.cpp")
    r = subprocess.run([str(exe), isa], capture_output=True, text=True, timeout=300)
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 0 and lines[-1] == "7 passed, 0 failed", r.stdout[-3000:]
    codes = ["fp16", "bf16", "tf32", "e4m3fn", "e5m2", "e4m3fnuz", "e5m2fnuz"]
    assert [ln.split()[1] for ln in lines[:-1]] == codes, lines
    own = codes[:5] if isa == "avx512" else []  # (the fnuz codes: the plain loops)
    assert [ln.split()[2] for ln in lines[:-1]] == [f"fill={'own' if c in own else 'plain'}" for c in codes], lines


@pytest.mark.skipif(not X86 or shutil.which("g++") is None, reason="needs g++ on x86-64")
def test_native_512bit_value_kernels():
    """The FMA / FTZ-AddMul kernels with 512-bit registers, which AVX-512 CPUs run unless AMD
    (kern_avx512.cpp): tested here whatever this CPU's vendor picks."""
    if "avx512" not in _x86_isas():
        pytest.skip("this CPU has no avx512")
    _check([str(_build("g++", "fast_exact")), "avx512w"], "avx512w", VALUE_SPECS)


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None or
                    shutil.which("qemu-aarch64") is None,
                    reason="needs g++-aarch64-linux-gnu and qemu-user (scripts/_setup_env.sh "
                           "installs them where it can)")
def test_neon_kernels_equal_the_core_under_qemu():
    exe = _build("aarch64-linux-gnu-g++", "fast_exact_aarch64", ["-static"])
    _check(["qemu-aarch64", str(exe), "neon"], "neon", ROW_SPECS + RZ_RENORM + FTZ_GRID)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None or
                    shutil.which("qemu-aarch64") is None, reason="needs the aarch64 tools")
@pytest.mark.parametrize("seed", [2, 3])
def test_neon_every_format_pair_under_qemu(seed):
    exe = _build("aarch64-linux-gnu-g++", "fast_exact_aarch64", ["-static"])
    specs = [s for s in all_specs()]
    _check(["qemu-aarch64", str(exe), "neon"], "neon", specs, seed)


@pytest.mark.skipif(not X86 or shutil.which("g++") is None, reason="needs g++ on x86-64")
def test_harness_catches_a_broken_kernel():
    isas = _x86_isas()
    if not isas:
        pytest.skip("no AVX2 on this CPU")
    exe = _build("g++", "fast_exact_broken", [BREAK])
    rc, lines = _run([str(exe), isas[-1]], ROW_SPECS)
    fdpa = [s for s in ROW_SPECS if s.op not in ("fma", "ftz_addmul")]
    mism = [ln for ln in lines if ln.startswith("MISMATCH")]
    assert rc == 1 and len(mism) == len(fdpa), lines[-3:]
    # every lane where tr_renorm's finish differs from the plain one came out of the vector
    # kernel (broken), none was handed to the core
    tr = [ln for s, ln in zip(ROW_SPECS, lines) if s.op in ("tr_fdpa", "gtr_fdpa")]
    assert tr and all(_finish(ln)[2] > 0 and _finish(ln)[3] == _finish(ln)[2] for ln in tr), tr
