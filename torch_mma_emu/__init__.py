"""torch-mma-emu: bit-accurate emulation of GPU matrix units (NVIDIA Tensor Cores, AMD Matrix Cores)."""
from .formats import FORMATS, get_format
from .registry import archs, instructions, spec
from .spec import Spec

__version__ = "0.1.0"
