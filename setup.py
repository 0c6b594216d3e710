"""Builds torch_mma_emu._C: the CPU kernel always, the CUDA kernel when torch has CUDA and
nvcc is found (TORCH_CUDA_ARCH_LIST is respected; MMA_EMU_NO_CUDA=1 forces a CPU build)."""
import glob
import os

from setuptools import find_packages, setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
cpp_sources = sorted(glob.glob("csrc/*.cpp") + glob.glob("csrc/cpu/*.cpp"))
cuda_sources = sorted(glob.glob("csrc/cuda/*.cu"))

with_cuda = (torch.version.cuda is not None and CUDA_HOME is not None
             and os.environ.get("MMA_EMU_NO_CUDA", "0") != "1")

# -ffp-contract=off: the FTZ-AddMul / FMA paths rely on separately rounded IEEE operations.
cxx_flags = ["-O3", "-std=c++20", "-ffp-contract=off", "-fno-fast-math"]
if os.environ.get("MMA_EMU_NATIVE", "0") == "1":
    cxx_flags.append("-march=native")
extra = {"cxx": cxx_flags}
if with_cuda and "TORCH_CUDA_ARCH_LIST" not in os.environ and torch.cuda.is_available():
    # wgmma (the sm90 instruction kernel) needs the arch-specific target sm_90a
    caps = {torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
    os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(
        f"{ma}.{mi}a" if (ma, mi) == (9, 0) else f"{ma}.{mi}" for ma, mi in sorted(caps))
if with_cuda:
    extra["nvcc"] = ["-O3", "-std=c++20", "--fmad=false", "-lineinfo"]
    ext = CUDAExtension("torch_mma_emu._C", cpp_sources + cuda_sources, extra_compile_args=extra,
                        define_macros=[("MMA_EMU_WITH_CUDA", "1")])
else:
    ext = CppExtension("torch_mma_emu._C", cpp_sources, extra_compile_args=extra)

setup(
    name="torch-mma-emu",
    version="0.1.0",
    description="Bit-accurate emulation of GPU matrix units (Tensor Cores, Matrix Cores) for PyTorch",
    packages=find_packages(include=["torch_mma_emu", "torch_mma_emu.*"]),
    package_data={"torch_mma_emu": ["py.typed"]},
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
    python_requires=">=3.10",
    install_requires=["torch>=2.11", "numpy", "tqdm"],
    extras_require={"test": ["pytest", "hypothesis"], "viz": ["matplotlib", "graphviz", "rich"]},
    entry_points={"console_scripts": ["mma-emu=torch_mma_emu.cli:main"]},
)
