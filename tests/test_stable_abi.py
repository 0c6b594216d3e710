"""The extension on torch's stable ABI (docs/install.md, "One wheel for every torch"): the
sources include only torch/csrc/stable and torch/headeronly, the library needs no ATen / c10
symbol, every mma_emu schema is defined in one block, argument errors stay ValueError, Ctrl-C
stays KeyboardInterrupt, and a GPU the build holds no code for gets a message naming the
build's archs (checked here with faked capabilities: no GPU needed)."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import _C, cpp, cuda_archs

ROOT = Path(__file__).resolve().parents[1]
CSRC = ROOT / "csrc"
SOURCES = sorted(p for p in CSRC.rglob("*") if p.suffix in (".cpp", ".h", ".cu", ".inc"))
# torch headers the stable ABI allows: its stable C++ wrappers, the header-only types and
# the C shims they are built on
ALLOWED = re.compile(r"^torch/(csrc/stable/|headeronly/|csrc/inductor/aoti_torch/c/shim\.h$)")


def test_sources_include_only_the_stable_api():
    bad = []
    for p in SOURCES:
        for n, line in enumerate(p.read_text().splitlines(), 1):
            m = re.match(r'\s*#\s*include\s*<((?:ATen|c10|torch|pybind11)/[^>]+)>', line)
            if m and not ALLOWED.match(m[1]):
                bad.append(f"{p.relative_to(ROOT)}:{n}: {m[1]}")
            if re.search(r"\b(at|c10)::|\bTORCH_LIBRARY\b|\bTORCH_LIBRARY_(FRAGMENT|IMPL)\b",
                         line.split("//")[0]):
                bad.append(f"{p.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not bad, "ATen / c10 / the unstable registration in csrc:\n" + "\n".join(bad)


def test_every_schema_in_one_block():
    defs = {p.relative_to(ROOT).as_posix(): len(re.findall(r"\bm\.def\(", p.read_text()))
            for p in SOURCES}
    assert {k: v for k, v in defs.items() if v} == {"csrc/ops.cpp": 7}
    text = (CSRC / "ops.cpp").read_text()
    assert text.count("STABLE_TORCH_LIBRARY(mma_emu") == 1
    block = text[text.index("STABLE_TORCH_LIBRARY(mma_emu"):]
    block = block[:block.index("\n}\n")]
    assert block.count("m.def(") == 7
    assert all("STABLE_TORCH_LIBRARY(" not in p.read_text() for p in SOURCES
               if p.name not in ("ops.cpp",))


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils' nm not installed")
def test_library_needs_no_aten_or_c10_symbol():
    so = Path(_C.__file__)
    assert so.name.startswith("_C.abi3."), so.name   # the limited Python API's tag
    out = subprocess.run(["nm", "-D", "--undefined-only", str(so)], capture_output=True,
                         text=True, check=True).stdout
    names = [ln.split()[-1] for ln in out.splitlines() if ln.strip()]
    # C++ names of ATen / c10 / torch (mangled: _ZN2at, _ZN3c10, _ZN5torch)
    bad = [n for n in names if re.search(r"^_Z\w*?(2at|3c10|5torch)\d", n)]
    assert not bad, bad[:10]
    assert any(n.startswith("aoti_torch_") for n in names)     # the C shim instead
    # Python's limited API only: no private CPython symbol beyond reference counting
    py = [n for n in names if n.startswith(("Py", "_Py"))]
    assert py and all(n.startswith("Py") or n == "_Py_Dealloc" for n in py), py


def test_argument_errors_are_value_errors():
    """The kernels throw std::invalid_argument; torch's op binding raises ValueError, as for
    TORCH_CHECK_VALUE before the port, with the same text (no prefix)."""
    with pytest.raises(ValueError, match=r"^_cpu_fast_path: expected \d+ parameters, got 3$"):
        torch.ops.mma_emu._cpu_fast_path([1, 2, 3])
    spec = tme.spec("sm90", "fp16")
    a = torch.zeros(1, 2, 4, dtype=torch.int16)
    b = torch.zeros(1, 5, 3, dtype=torch.int16)
    with pytest.raises(ValueError, match=r"inner dimensions differ: \[1, 2, 4\] @ \[1, 5, 3\]"):
        cpp.gemm(spec, a, b, torch.zeros(1, 2, 3))
    c = torch.zeros(1, 2, 3, dtype=torch.float64)     # sm90 fp16 writes fp32
    with pytest.raises(ValueError, match="^_sched: c and partials must have the output dtype "
                                         "Float$"):
        cpp.sched(spec, a, b[:, :4], c, c[:0], [1], [0.0, 1.0, 1.0])


def test_interrupt_text_becomes_keyboard_interrupt(monkeypatch):
    """A kernel cut off by Ctrl-C throws the tagged text (a stable kernel can only throw a C++
    exception); cpp.call turns it into KeyboardInterrupt, other RuntimeErrors pass."""
    class Ops:
        @staticmethod
        def _gemm(*args):
            raise RuntimeError(cpp.INTERRUPTED)

        @staticmethod
        def _sched(*args):
            raise RuntimeError("something else")
    monkeypatch.setattr(torch.ops, "mma_emu", Ops)
    with pytest.raises(KeyboardInterrupt):
        cpp.call("_gemm", torch.zeros(1))
    with pytest.raises(RuntimeError, match="something else"):
        cpp.call("_sched", torch.zeros(1))
    assert cpp.INTERRUPTED in (CSRC / "torch_stable.h").read_text()


@pytest.mark.parametrize("arch,cap,runs", [
    ("8.0", (8, 0), True), ("8.0", (8, 6), True), ("8.0", (8, 9), True),
    ("8.0", (9, 0), False), ("8.0", (7, 5), False),
    ("9.0a", (9, 0), True), ("9.0a", (9, 1), False), ("9.0", (9, 0), True),
    ("10.0a", (10, 0), True), ("10.0a", (10, 3), False), ("10.0f", (10, 3), True),
    ("12.0a", (12, 0), True), ("12.0a", (12, 1), False),
    ("8.0+PTX", (12, 0), True), ("9.0a+PTX", (10, 0), True), ("8.0+PTX", (7, 5), False),
    ("bogus", (8, 0), False),
])
def test_which_gpu_runs_which_target(arch, cap, runs):
    assert cuda_archs.runs_on(arch, cap) is runs


DIST = ("8.0", "9.0a", "10.0a", "12.0a")


@pytest.mark.parametrize("cap", [(8, 0), (8, 6), (8, 9), (9, 0), (10, 0), (12, 0)])
def test_the_distributed_archs_cover_the_common_gpus(cap):
    assert cuda_archs.problem(cap, DIST) is None


def test_a_missing_arch_is_named():
    msg = cuda_archs.problem((10, 3), DIST, "cuda:0 (NVIDIA B300)")
    assert msg == ("torch_mma_emu's CUDA kernels were built for 8.0, 9.0a, 10.0a, 12.0a, "
                   "which do not run on cuda:0 (NVIDIA B300) (compute capability 10.3); "
                   "reinstall from source for it: TORCH_CUDA_ARCH_LIST=\"10.3a\" pip install . "
                   "(docs/install.md)")
    assert "TORCH_CUDA_ARCH_LIST=\"7.5\"" in cuda_archs.problem((7, 5), DIST)
    assert "built without CUDA" in cuda_archs.problem((9, 0), ())


def test_check_raises_for_a_faked_gpu(monkeypatch):
    """cuda_archs.check (what cpp.call runs before a CUDA tensor reaches a kernel) with a
    faked device and build: once per GPU, RuntimeError with the message."""
    monkeypatch.setattr(_C, "_cuda_archs", lambda: "8.0_9.0a_10.0a_12.0a")
    assert cuda_archs.built() == DIST
    caps = {0: (9, 0), 1: (7, 5)}
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: caps[i])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: f"GPU{i}")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    cuda_archs._checked.cache_clear()
    try:
        cuda_archs.check(torch.device("cuda", 0))
        with pytest.raises(RuntimeError, match=r"built for 8\.0, 9\.0a, 10\.0a, 12\.0a, which "
                                               r"do not run on cuda:1 \(GPU1\) \(compute "
                                               r"capability 7\.5\)"):
            cuda_archs.check(torch.device("cuda"))
    finally:
        cuda_archs._checked.cache_clear()


def test_this_build_reports_its_archs():
    archs = cuda_archs.built()
    if hasattr(torch.ops.mma_emu, "_mma_instr"):     # a CUDA build
        assert archs and all(re.match(r"^\d+\.\d+[af]?(\+PTX)?$", a) for a in archs), archs
    else:
        assert archs == ()


def test_a_stale_build_is_named_at_import():
    """Python imports _C.cpython-*.so before _C.abi3.so: a library left from before the port
    would shadow the new one.  The import says so (scripts/build_ext.sh removes it)."""
    code = """if True:
        import sys, types
        import torch_mma_emu._C as real
        fake = types.ModuleType("torch_mma_emu._C")
        fake._layout, fake.__file__ = real._layout, "/x/_C.cpython-311-x86_64-linux-gnu.so"
        for m in [k for k in sys.modules if k.startswith("torch_mma_emu")]:
            del sys.modules[m]
        sys.modules["torch_mma_emu._C"] = fake
        try:
            import torch_mma_emu
        except ImportError as e:
            print(e)
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, timeout=300)
    assert "is a build from before the stable-ABI port" in out.stdout, (out.stdout, out.stderr)
    assert "scripts/build_ext.sh removes it" in out.stdout


@pytest.mark.parametrize("arch,fmt,schedule", [
    ("sm90", "fp16", None), ("sm90", "fp16", "schedule:split_k=3"), ("sm89", "fp8_e4m3", None),
    ("sm80", "fp32", None), ("gfx90a", "fp16", None), ("gfx942", "fp16", None),
    ("sm90", "fp16", "schedule:split_k=2,workspace=fp64"),
])
@pytest.mark.parametrize("scalar", [False, True])
def test_bits_do_not_depend_on_the_thread_count(monkeypatch, arch, fmt, schedule, scalar):
    """torch.set_num_threads changes no bit: 1 and 3 threads (more than this machine's
    cores: uneven chunks), several batch elements and K blocks (MMA_EMU_CPU_BLOCK_BYTES).
    The kernel's loops run on the calling thread today (csrc/torch_stable.h); this is the
    check for the day they run on torch's pool (one thread per output, a fixed order)."""
    if scalar:
        monkeypatch.setenv("MMA_EMU_SCALAR", "1")
    monkeypatch.setenv("MMA_EMU_CPU_BLOCK_BYTES", "65536")
    g = torch.Generator().manual_seed(7)
    dt = torch.float32 if fmt == "fp32" else torch.float16
    A = (torch.randn(3, 70, 300, generator=g) * 4).to(dt)
    B = torch.randn(3, 300, 45, generator=g).to(dt)
    if fmt == "fp8_e4m3":
        A, B = A.float().to(torch.float8_e4m3fn), B.float().to(torch.float8_e4m3fn)
    kw = {"schedule": schedule} if schedule else {}
    before = torch.get_num_threads()
    try:
        out = []
        for n in (1, 3):
            torch.set_num_threads(n)
            out.append(tme.emulated_mm(A, B, arch=arch, **kw))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(out[0].view(torch.int32 if out[0].element_size() == 4 else torch.int16),
                       out[1].view(torch.int32 if out[1].element_size() == 4 else torch.int16))
