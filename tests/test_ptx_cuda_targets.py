"""Our CUDA kernels as nvcc 13.0 compiles them for the other targets: sm_100a's PTX of
csrc/cuda/gemm_cuda.cu (only the kernels launched here are committed: regen.sh) run on the
interpreter for one registry row per kernel instantiation of the sm100 / sm120 rows, equal
to the CPU kernel; every committed PTX file within the interpreter's instruction coverage.

What differs between targets (the PTX, not the SASS): sm_90a's gemm_cuda and sched_cuda PTX
are sm_80's and sm_120a's are sm_100a's but for the ``.target`` line and the anonymous
namespace's hash (the slow test checks it with nvcc); sm_100a's code generator picks other
integer and move forms (abs.f32 / abs.f64 / abs.s32, mad.lo.s64, selp.s32, max.u64,
prmt.b32, mov.b16, st.local.v2) where sm_80's has bfi / xor / mov.f64 ones; mma_instr.cu has
fp8 mma.sync from sm_89 on, wgmma and fence.proxy.async only in sm_90a."""
from __future__ import annotations

import gzip
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_mma_emu import cpp, ptx, registry  # noqa: E402
from torch_mma_emu.ptx import coverage  # noqa: E402

import cuda_gemm_ptx as R  # noqa: E402
from test_ptx_cuda_gemm_shapes import operands  # noqa: E402

GEMM_100A = R.PTX_FILE.parent / "gemm_cuda_sm100a.ptx.gz"
SHAPE = (2, 8, 8, 40)


def _kernel(s):
    return R.kernel_for(cpp.params(s), np.float64 if s.out_format == "fp64" else np.float32)


def _rows():
    seen, out = set(), []
    for s in registry.all_specs():
        if s.arch not in ("sm100", "sm120"):
            continue
        key = (_kernel(s), s.scaled)
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


ROWS = _rows()
KEEP = ["decode_kernelE", "decode_scales_kernelE"] + sorted({_kernel(s) for s in ROWS})


def keep_kernels(text: str) -> str:
    """The PTX module with only the entries these tests launch (regen.sh commits that)."""
    parts = re.split(r"\n(?=(?:\.visible |\.weak )?\.entry )", text)
    return "\n".join(parts[:1] + [p for p in parts[1:]
                                  if any(re.search(r"\d" + re.escape(k), p.split("(", 1)[0])
                                         for k in KEEP)])


@pytest.fixture(scope="module")
def mod100():
    return ptx.Module(gzip.decompress(GEMM_100A.read_bytes()).decode())


def _id(s):
    return f"{s.arch}-{s.instruction}-{s.fmt_a.name}-{s.out_format}"


@pytest.mark.parametrize("spec", ROWS, ids=_id)
def test_gemm_sm100a_ptx_equals_cpu_kernel(mod100, spec):
    a3, b3, c3, sa3, sb3 = operands(spec, SHAPE, "multi_cta")
    ref = cpp.gemm(spec, a3, b3, c3, sa3, sb3).numpy()
    out, suffix, _ = R.run_gemm(mod100, a3, b3, c3, cpp.params(spec), sa3, sb3)
    w = {2: np.uint16, 4: np.uint32, 8: np.uint64}[ref.itemsize]
    bad = int((out.view(w) != ref.view(w)).sum())
    assert bad == 0, f"{_id(spec)} ({suffix}) on sm_100a's PTX: {bad} of {ref.size} differ"


def test_committed_sm100a_gemm_holds_the_launched_kernels(mod100):
    names = " ".join(mod100.kernels)
    assert all(re.search(r"\d" + re.escape(k), names) for k in KEEP)
    assert len(mod100.kernels) == len(KEEP)
    assert coverage.missing(mod100) == {}


@pytest.mark.parametrize("name", sorted(p.name for p in R.PTX_FILE.parent.glob("*.ptx.gz")
                                        if not p.name.startswith("gemm_cuda")))
def test_committed_ptx_within_interpreter_coverage(name):
    """No opcode of any committed target's PTX is missing from the interpreter (gemm_cuda's:
    above and tests/test_ptx_cuda_gemm.py)."""
    mod = ptx.Module(gzip.decompress((R.PTX_FILE.parent / name).read_bytes()).decode())
    assert coverage.missing(mod) == {}


def _nohash(text: str) -> str:
    """PTX with the names nvcc derives per build (``_GLOBAL__N__<hash>_..._cu_<hash>..``,
    the anonymous namespace; ``_INTERNAL_<hash>_..``) replaced by placeholders:
    the hash and a number after it change from run to run; and the source paths of the
    ``.file`` lines (-lineinfo) cut to the repository's; the ``.debug_str`` section (those
    names again, as bytes) left out."""
    text = text.split("\t.section\t.debug_str")[0]
    text = re.sub(r'^(\s*\.file\s+\d+\s+")[^"]*?/(csrc/[^"]*")', r"\1\2", text, flags=re.M)
    # the name with its length prefix and the digits after it (a per-run number, then the
    # next name's length): ambiguous to split, equal in both texts where the rest is
    return re.sub(r"\d*_(GLOBAL__N__|INTERNAL_)[0-9a-f]{8}_\d+_(\w+?)_cu_[0-9a-f]{8}[0-9_]*",
                  r"<\1\2>", text)


def _normal(text: str) -> str:
    """``_nohash`` without the .target line and thrust's per-target namespace
    (``THRUST_300001_SM_800_NS``, declared, unused)."""
    text = re.sub(r"^\.target .*$", "", _nohash(text), flags=re.M)
    return re.sub(r"_SM_\d+_NS", "_SM_NS", text)


@pytest.mark.slow
def test_committed_ptx_is_current_and_targets_agree(tmp_path):
    """With nvcc: every committed file is what regen.sh makes of today's csrc/, and sm_90a's
    gemm / sched PTX equals sm_80's, sm_120a's equals sm_100a's (but for .target / hash)."""
    import os
    import shutil
    import subprocess
    import sys
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    root = R.PTX_FILE.parents[3]

    def compile_(src, arch):
        env = dict(os.environ, MMA_EMU_CHECK_PTX=str(tmp_path), MMA_EMU_CHECK_ARCHS=arch,
                   MMA_EMU_CHECK_SOURCES=f"csrc/cuda/{src}.cu", PYTHON=sys.executable)
        subprocess.run(["bash", "scripts/check_cuda_compile.sh"], cwd=root, env=env,
                       check=True, capture_output=True)
        return (tmp_path / f"{src}_sm{arch}.ptx").read_text()

    data = R.PTX_FILE.parent
    for p in sorted(data.glob("*.ptx.gz")):
        src, arch = re.fullmatch(r"(\w+?)_sm(\w+)\.ptx\.gz", p.name).groups()
        fresh = compile_(src, arch)
        if p.name == "gemm_cuda_sm100a.ptx.gz":
            fresh = keep_kernels(fresh)
        assert _nohash(fresh) == _nohash(gzip.decompress(p.read_bytes()).decode()), \
            f"{p.name} is stale (or this nvcc is not 13.0): run tests/data/cuda_ptx/regen.sh"
    for src in ("gemm_cuda", "sched_cuda"):
        assert _normal(compile_(src, "90a")) == _normal(compile_(src, "80")), src
        assert _normal(compile_(src, "120a")) == _normal(compile_(src, "100a")), src
