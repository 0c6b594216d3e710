"""torch-mma-emu: bit-accurate emulation of GPU matrix units (NVIDIA Tensor Cores, AMD Matrix Cores).

    import torch_mma_emu as tme
    D = tme.emulated_mm(A, B, C, arch="sm90")      # as an H100 tensor core computes it
    tme.archs(); tme.spec("sm90", "fp16")           # what is supported, which model is used
"""
from .formats import FORMATS, get_format
from .registry import archs, instructions, spec
from .spec import Spec
from .ops import emulated_mm, resolve_spec

__version__ = "0.1.0"
__all__ = ["emulated_mm", "archs", "spec", "instructions", "resolve_spec", "Spec", "FORMATS",
           "get_format"]
