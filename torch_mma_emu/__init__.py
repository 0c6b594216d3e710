"""torch-mma-emu: bit-accurate emulation of GPU matrix units (NVIDIA Tensor Cores, AMD Matrix Cores).

    import torch_mma_emu as tme
    D = tme.emulated_mm(A, B, C, arch="sm90")      # as an H100 tensor core computes it
    tme.archs(); tme.spec("sm90", "fp16")           # what is supported, which model is used
    with tme.emulate("MI300X"): model(x)            # every matmul in a model as on an MI300X
    tme.native_mm(A, B, backend="cublas")           # the same product on the real GPU
"""
from . import _dev_layout

_dev_layout.install(__path__[0])  # checkout: torch_mma_emu.triton_kernels -> triton_kernels/

from .formats import FORMATS, get_format
from .registry import archs, instructions, spec
from .spec import Spec
from .ops import emulated_mm, resolve_spec
from .schedule import Schedule
from .preview import batch_invariance, convert, emulate, revert
from .sharding import register as _register_sharding

_register_sharding()     # DTensor's rule for emulated_mm, if DTensor is loaded (sharding.py)

__version__ = "0.1.0"
__all__ = ["emulated_mm", "archs", "spec", "instructions", "resolve_spec", "Spec", "FORMATS",
           "get_format", "emulate", "convert", "revert", "native_mm", "Schedule",
           "batch_invariance"]


def __getattr__(name):  # GPU paths load on first use (Triton imports are slow)
    if name == "native_mm":
        from .native import native_mm
        return native_mm
    if name in ("fprev", "probe", "native", "reference", "preview", "triton_kernels",
                "cublaslt"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'torch_mma_emu' has no attribute {name!r}")
