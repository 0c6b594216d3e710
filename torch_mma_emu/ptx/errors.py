"""The interpreter's exceptions."""
from __future__ import annotations


class PTXError(ValueError):
    """Base class of every error of the PTX interpreter."""


class Unsupported(PTXError, NotImplementedError):
    """An instruction, qualifier or declaration the interpreter does not model (named)."""


class MemoryFault(PTXError):
    """An access outside the arguments' buffers (or shared / local memory), or misaligned."""


class StepBudget(PTXError):
    """The kernel ran more scheduler steps than allowed (an endless loop, or too big)."""
