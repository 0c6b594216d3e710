"""What a block keeps, in one place: :class:`Tallies` (what the block counted over all its
launches, which ``em.summary()`` reads) and :class:`Launch` (one record per kernel launch:
``em.launches`` lists them, ``block.launch`` is the running one).  The modules around the
interpreter (contract.py, target_math.py, gaps.py, compiled.py, ...) read and write these
fields, never attributes of their own stuck onto the block; :func:`emulating` is the one test
whether a block emulates a target (``tmt.interpret()`` is a block that does not).  No
imports from the package: every module may import this one."""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, Optional


@dataclasses.dataclass
class Tallies:
    """Counts over a block's launches, each read by the module that names it in the
    summary: ``math`` (target_math.py, libdevice_calls.py), ``contract`` (contract.py),
    ``atomics`` (gaps.py), ``interpreter`` (patches to Triton's interpreter a kernel
    needed, hook.py), and ``warned``: the one-time warnings already given."""
    math: Counter = dataclasses.field(default_factory=Counter)
    contract: Counter = dataclasses.field(default_factory=Counter)
    atomics: Counter = dataclasses.field(default_factory=Counter)
    interpreter: Counter = dataclasses.field(default_factory=Counter)
    warned: set = dataclasses.field(default_factory=set)

    def warn_once(self, key) -> bool:
        """True the first time ``key`` is asked (give the warning then)."""
        if key in self.warned:
            return False
        self.warned.add(key)
        return True


@dataclasses.dataclass
class Launch:
    """One kernel launch: its name, grid and scalar launch arguments (it unpacks as that
    triple, ``for name, grid, scalars in em.launches``), the options it ran with, and what
    the modules learnt about it for its duration (``contract``: contract.py's reading of its
    PTX on NVIDIA targets)."""
    kernel: str
    grid: tuple
    scalars: tuple
    num_warps: int = 4
    contract: Optional[Any] = None
    inputs: Optional[tuple] = None   # (kernel, args, kwargs) before the launch: keep_inputs
    extents: Optional[Any] = None    # the tensor arguments' memory (bounds.py), while it runs

    def __iter__(self):
        return iter((self.kernel, self.grid, self.scalars))


def snapshot(kernel, args, kwargs) -> tuple:
    """(kernel, args, kwargs) with every tensor cloned: a launch's inputs as they were
    before it ran (to launch it again, e.g. under the PTX checker)."""
    import torch

    def keep(v):
        if isinstance(v, torch.Tensor):
            return v.clone()
        t = as_tensor(v)
        return v if t is None else t.clone()
    return kernel, tuple(keep(a) for a in args), {k: keep(v) for k, v in kwargs.items()}


def as_tensor(v):
    """A non-tensor buffer (has ``data_ptr``, ``untyped_storage``, ``shape``, ``stride()``,
    ``dtype``: FlagGems' StridedBuffer) as the tensor view of the same memory, where its
    strides are non-negative; else None."""
    import torch
    try:
        storage, dtype = v.untyped_storage(), v.dtype
        shape, strides = tuple(v.shape), tuple(v.stride())
        offset, rem = divmod(v.data_ptr() - storage.data_ptr(), dtype.itemsize)
    except Exception:                    # noqa: BLE001 - not such a buffer
        return None
    if rem or offset < 0 or any(s < 0 for s in strides):
        return None
    return torch.empty(0, dtype=dtype).set_(storage, offset, shape, strides)


def emulating(block) -> bool:
    """Whether ``block`` (a TritonEmulation or None) emulates a target: an arch or a Spec,
    not ``tmt.interpret()``'s plain interpreter."""
    return block is not None and (block.arch is not None or block.spec is not None)
