"""Builds torch_mma_emu._C against the torch that is already installed (2.11 or later).

The extension is written against torch's stable ABI (csrc/torch_stable.h: torch/csrc/stable,
compiled for TORCH_TARGET_VERSION 2.11) and Python's limited API (abi3): one wheel serves
every torch from 2.11 on and every CPython from 3.10 on (docs/install.md).

The CPU kernel is always built.  The CUDA kernel is added when torch has CUDA, nvcc is found
and there is a target: a visible GPU (its compute capabilities) or TORCH_CUDA_ARCH_LIST.
Without either (a build machine with nvcc but no GPU), only the CPU kernel is built: no
default arch list is guessed.  Switches: MMA_EMU_NO_CUDA=1 (CPU only), MMA_EMU_NATIVE=1
(-march=native), TORCH_CUDA_ARCH_LIST="8.0;9.0a" (CUDA for those archs), MMA_EMU_CUDA_DIST=1
(CUDA for the archs of a distributed wheel, DIST_ARCHS; needs nvcc 12.8+).  The .so records
its arch list (torch_mma_emu.cuda_archs reads it and names a GPU the build cannot run on).

pyproject.toml declares no torch build requirement, so pip's build isolation never downloads
a torch: the torch the package will run with is used (found in the target environment when
pip hides it, see _import_installed_torch).
"""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import find_packages, setup

TORCH_MIN = (2, 11)          # the oldest torch served: TORCH_TARGET_VERSION below
TORCH_TARGET_VERSION = "0x020b000000000000"
PY_MIN = (3, 10)             # python_requires; the limited API (abi3) of this version
DIST_ARCHS = "8.0;9.0a;10.0a;12.0a"   # Ampere, Hopper (wgmma), datacenter and consumer Blackwell


def _import_installed_torch():
    """torch as this interpreter sees it outside pip's isolated build environment."""
    try:
        import torch
        return torch
    except ImportError:
        pass
    # pip's build isolation hides the target environment's site-packages; ask a plain
    # interpreter of the same environment where its torch lives and use that one
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    probe = ("import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
    try:
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                             text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        out = None
    if out is None or out.returncode != 0:
        sys.exit("torch-mma-emu builds against the torch already installed, and none was found.\n"
                 "Install torch 2.11 or later first (e.g. `pip install torch==2.13.0`, CPU or CUDA "
                 "build from pytorch.org), then run `pip install .` again.")
    sys.path.append(out.stdout.strip().splitlines()[-1])   # after the build tools
    import torch
    return torch


torch = _import_installed_torch()
TORCH_MINOR = MAJOR, MINOR = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
if TORCH_MINOR < TORCH_MIN:
    sys.exit(f"torch-mma-emu supports torch 2.11 and later; the installed torch is {torch.__version__} "
             f"({os.path.dirname(torch.__file__)}). Install a supported torch first, e.g. "
             "`pip install torch==2.13.0`.")

def _cuda_home_behind_nvcc_wrapper():
    """torch takes CUDA_HOME as the folder above the `nvcc` found on PATH; where that nvcc is a
    link or a wrapper script (/usr/local/bin/nvcc running /usr/local/cuda-13.0/bin/nvcc), the
    toolkit, with its headers and libcudart, is elsewhere: ask nvcc where it runs from (its
    dry run prints `_HERE_=<bin folder>`) and name that before torch guesses.  An explicit
    CUDA_HOME / CUDA_PATH is kept."""
    if torch.version.cuda is None or os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH"):
        return
    nvcc = shutil.which("nvcc")
    if nvcc is None or os.path.exists(os.path.join(os.path.dirname(os.path.dirname(nvcc)),
                                                    "include", "cuda_runtime.h")):
        return
    try:
        out = subprocess.run([nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return
    for line in (out.stdout + out.stderr).splitlines():
        if line.startswith("#$ _HERE_="):
            home = os.path.dirname(os.path.realpath(line.split("=", 1)[1].strip()))
            if os.path.exists(os.path.join(home, "include", "cuda_runtime.h")):
                os.environ["CUDA_HOME"] = home
            return


_cuda_home_behind_nvcc_wrapper()
from torch.utils.cpp_extension import (  # noqa: E402  (after the torch check)
    CUDA_HOME, BuildExtension, CppExtension, CUDAExtension)


def _cuda_targets():
    """The TORCH_CUDA_ARCH_LIST to build for, or None for a CPU-only build (and why)."""
    if os.environ.get("MMA_EMU_NO_CUDA", "0") == "1":
        return None, "MMA_EMU_NO_CUDA=1"
    if torch.version.cuda is None:
        return None, f"torch {torch.__version__} has no CUDA"
    if CUDA_HOME is None:
        return None, "nvcc not found (set CUDA_HOME)"
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"], "TORCH_CUDA_ARCH_LIST"
    if os.environ.get("MMA_EMU_CUDA_DIST", "0") == "1":
        return DIST_ARCHS, "MMA_EMU_CUDA_DIST=1 (the archs of a distributed wheel)"
    if torch.cuda.is_available() and torch.cuda.device_count():
        # wgmma (the sm90 instruction kernel) needs the arch-specific target sm_90a
        caps = sorted({torch.cuda.get_device_capability(i)
                       for i in range(torch.cuda.device_count())})
        return ";".join(f"{ma}.{mi}a" if (ma, mi) == (9, 0) else f"{ma}.{mi}"
                        for ma, mi in caps), "the visible GPUs"
    return None, "no visible GPU and no TORCH_CUDA_ARCH_LIST (set it to build CUDA, e.g. '9.0a')"


def _cudart_dirs():
    """Where libcudart lies when it is not in CUDA_HOME/lib64 (torch's only guess): toolkits
    unpacked from archives or pip's cuda-toolkit keep it in CUDA_HOME/lib."""
    lib64, lib = os.path.join(CUDA_HOME, "lib64"), os.path.join(CUDA_HOME, "lib")
    has = lambda d: bool(glob.glob(os.path.join(d, "libcudart.so*")))  # noqa: E731
    return [lib] if not has(lib64) and has(lib) else []


# the stable ABI: torch's C shim only (no ATen / c10 symbols), the limited Python API;
# scripts/check_cuda_compile.sh compiles the CUDA sources with the same defines
STABLE_MACROS = (("TORCH_TARGET_VERSION", TORCH_TARGET_VERSION),
                 ("Py_LIMITED_API", f"0x{PY_MIN[0]:02X}{PY_MIN[1]:02X}0000"))
NVCC_MACROS = (("USE_CUDA", "1"),)   # torch declares its stable CUDA shims under USE_CUDA


def arch_token(archs: str) -> str:
    """The arch list as one preprocessor token (csrc/ops.cpp stringizes it for
    _C._cuda_archs()): ';' and spaces would split the compiler's command line."""
    return "_".join(a for a in archs.replace(";", " ").split() if a)


def get_extensions():
    cpp_sources = sorted(glob.glob("csrc/*.cpp") + glob.glob("csrc/cpu/*.cpp"))
    macros = list(STABLE_MACROS)
    cuda_sources = sorted(glob.glob("csrc/cuda/*.cu"))
    # -ffp-contract=off: the FTZ-AddMul / FMA paths rely on separately rounded IEEE operations
    cxx_flags = ["-O3", "-std=c++20", "-ffp-contract=off", "-fno-fast-math"]
    if os.environ.get("MMA_EMU_NATIVE", "0") == "1":
        cxx_flags.append("-march=native")
    archs, why = _cuda_targets()
    if archs is None:
        print(f"[torch-mma-emu] building the CPU kernel only: {why}", file=sys.stderr)
        return [CppExtension("torch_mma_emu._C", cpp_sources, define_macros=macros,
                             extra_compile_args={"cxx": cxx_flags}, py_limited_api=True)]
    os.environ["TORCH_CUDA_ARCH_LIST"] = archs
    print(f"[torch-mma-emu] building the CPU and CUDA kernels for {archs} ({why})",
          file=sys.stderr)
    extra = {"cxx": cxx_flags, "nvcc": ["-O3", "-std=c++20", "--fmad=false", "-lineinfo"]}
    return [CUDAExtension("torch_mma_emu._C", cpp_sources + cuda_sources,
                          extra_compile_args=extra, library_dirs=_cudart_dirs(),
                          define_macros=macros + list(NVCC_MACROS) + [
                              ("MMA_EMU_WITH_CUDA", "1"),
                              ("MMA_EMU_CUDA_ARCHS", arch_token(archs))],
                          py_limited_api=True)]


# the top-level triton_kernels/ folder (product card layout) installs as a subpackage: a
# top-level import name `triton_kernels` would collide with an existing package
PACKAGES = find_packages(include=["torch_mma_emu", "torch_mma_emu.*"]) + [
    "torch_mma_emu.triton_kernels"]

def _requirements(name: str) -> list:
    """The requirement lines of a file beside setup.py (none where it is absent)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    if not os.path.exists(path):
        return []
    with open(path) as fh:
        return [ln.strip() for ln in fh if ln.strip() and not ln.startswith("#")]


SETUP = dict(
    name="torch-mma-emu",
    version="0.1.0",
    description="Bit-accurate emulation of GPU matrix units (Tensor Cores, Matrix Cores) for PyTorch",
    packages=PACKAGES,
    package_dir={"torch_mma_emu.triton_kernels": "triton_kernels"},
    package_data={"torch_mma_emu": ["py.typed", "data/*.npz", "data/*.md", "aten_cuda/*.json"]},
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    python_requires=f">={PY_MIN[0]}.{PY_MIN[1]}",
    options={"bdist_wheel": {"py_limited_api": f"cp{PY_MIN[0]}{PY_MIN[1]}"}},   # abi3
    # the extension uses torch's stable ABI from 2.11 on: any later torch serves
    install_requires=[f"torch>={TORCH_MIN[0]}.{TORCH_MIN[1]}", "numpy", "tqdm"],
    extras_require={"test": ["pytest", "hypothesis"], "viz": ["matplotlib", "graphviz", "rich"],
                    "thirdparty": _requirements("requirements-thirdparty.txt"),
                    "triton-zoo": _requirements("requirements-triton-zoo.txt"),
                    "peers": _requirements("requirements-peers.txt")},
    entry_points={"console_scripts": ["mma-emu=torch_mma_emu.cli:main"]},
)

if __name__ == "__main__":   # setuptools runs setup.py as __main__; tests import its helpers
    setup(ext_modules=get_extensions(), **SETUP)
