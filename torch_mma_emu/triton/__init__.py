"""Triton kernels on the CPU with a GPU's bits (docs/triton.md).

    import torch_mma_emu.triton as tmt
    with tmt.emulate("H100") as em:        # or "A100", "MI300X", "B200", a Spec, ...
        my_kernel[grid](a, b, c, ...)      # CPU tensors; every tl.dot as an H100 computes it
    print(em.summary())

``emulate(arch)`` runs every Triton launch of the calling thread in Triton's interpreter and
computes ``tl.dot`` / ``tl.dot_scaled`` with the emulator, modelling which instruction Triton
picks on ``arch`` (:func:`choose`); ``interpret()`` runs the plain interpreter (NumPy
arithmetic) without ``TRITON_INTERPRET``.  ``torch_mma_emu.emulate(arch)`` opens an
``emulate(arch)`` block too.  Importing this package does not import Triton; opening a block
does (and raises a clear error without it or with an interpreter of another layout).
"""
from .target_rules import PATHS, DotPlan, choose
from .context import TritonEmulation, emulate, interpret
from .device_queries import device_queries
from .cuda_on_cpu import cuda_on_cpu
from . import record
from .hook import current
from .program_check import ProgramReport, check_program

__all__ = ["emulate", "interpret", "device_queries", "cuda_on_cpu", "choose", "DotPlan", "PATHS", "TritonEmulation", "active",
           "emulating", "check_program", "ProgramReport"]


def active() -> bool:
    """True when the calling thread has an ``emulate`` / ``interpret`` block open."""
    return current() is not None


def emulating() -> bool:
    """True when the calling thread's innermost block emulates an arch (not ``interpret()``)."""
    return record.emulating(current())
