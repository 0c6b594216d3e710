"""A SIMT PTX interpreter for the CPU: runs the PTX that nvcc or Triton emit for a kernel
over a whole grid, bit-exact, with every global access checked against the arguments.

    mod = ptx.Module(open("k.ptx").read())
    stats = mod.launch("vadd", grid=4, block=128, args=[a, b, c, np.int32(n)])

Arrays given for pointer parameters are the kernel's global memory (read and written in
place); numbers fill scalar parameters; ``bytes`` fill ``.b8`` arrays (structs by value).
``buffers`` (name -> array) are global memory that the kernel reaches through pointers
inside its struct arguments: buffer i lies at ``buffer_address(i)``.
See ``machine`` for the scheduling (minimum PC) and the atomics' order."""
from __future__ import annotations

from .errors import MemoryFault, PTXError, StepBudget, Unsupported
from .launch import Launch, Stats
from .memory import buffer_address
from .parser import Kernel, parse

__all__ = ["Module", "Launch", "Stats", "Kernel", "parse", "PTXError", "Unsupported",
           "MemoryFault", "StepBudget", "buffer_address"]


class Module:
    """A parsed PTX module: its entry functions by name (``.kernels``)."""

    def __init__(self, text: str):
        self.kernels = parse(text)

    def launch(self, name: str, grid, block, args, dynamic_smem: int = 0,
               order="thread", max_steps: int = 10_000_000, buffers=None,
               arch=None, cta_order="index") -> Stats:
        """Run kernel ``name`` over ``grid`` x ``block`` (ints or up to 3 sizes).
        ``order``: the order of one instruction's atomics over its threads ("thread",
        "reverse" or an int seed).  ``max_steps``: scheduler steps over the whole grid.
        ``buffers``: {name: array} placed in global memory first (see ``buffer_address``).
        ``arch``: whose matrix unit computes ``mma.sync`` (an arch name, ``tme.archs()``).
        ``cta_order``: the order the CTAs run in, each to its end ("index": x fastest,
        "reverse", or an int seed for a shuffled order), which decides who wins races
        between CTAs (atomics, the last block of a semaphore)."""
        if name not in self.kernels:
            raise PTXError(f"no kernel {name!r} in the module (has: {', '.join(self.kernels)})")
        return Launch(self.kernels[name], grid, block, args, dynamic_smem, order,
                      max_steps, buffers, arch, cta_order=cta_order).run()
