"""Which GPUs this build's CUDA kernels run on, and the error where the running GPU is not one.

The extension records the arch list it was compiled for (``_C._cuda_archs()``: setup.py's
TORCH_CUDA_ARCH_LIST, e.g. ``8.0;9.0a;10.0a;12.0a`` for a distributed wheel, '' for a
CPU-only build).  Without this check a GPU the build holds no code for fails at the first
kernel launch with CUDA's "no kernel image is available for execution on the device".

Which GPU runs which target (the CUDA C++ Programming Guide's binary compatibility rules):
a cubin for ``X.Y`` runs on compute capability ``X.y`` with ``y >= Y``; an arch-specific
``X.Ya`` cubin (wgmma, tcgen05) only on ``X.Y``; a family ``X.Yf`` cubin on ``X.y`` with
``y >= Y``; ``+PTX`` adds PTX that the driver compiles for any ``>= X.Y``.
"""
from __future__ import annotations

import re
from functools import lru_cache

import torch

from . import _C

_ARCH = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")


def built() -> tuple[str, ...]:
    """The archs of this build (``("8.0", "9.0a")``); empty for a CPU-only build."""
    return tuple(a for a in _C._cuda_archs().split("_") if a)


def runs_on(arch: str, cap: tuple[int, int]) -> bool:
    """Whether code built for ``arch`` ("8.0", "9.0a", "10.0f", "8.0+PTX") runs on a GPU of
    compute capability ``cap``."""
    m = _ARCH.match(arch)
    if m is None:
        return False
    major, minor, kind, ptx = int(m[1]), int(m[2]), m[3], m[4]
    if ptx and tuple(cap) >= (major, minor):
        return True
    if kind == "a":
        return tuple(cap) == (major, minor)
    return cap[0] == major and cap[1] >= minor


def problem(cap: tuple[int, int], archs: tuple[str, ...], where: str = "this GPU") -> str | None:
    """The message for a GPU of capability ``cap`` and a build for ``archs`` (None: it runs)."""
    if not archs:
        return ("this build of torch_mma_emu has no CUDA kernels (it was built without CUDA); "
                "run on CPU tensors, or reinstall from source with a CUDA build of torch and "
                "nvcc (pip install . builds for the visible GPUs)")
    if any(runs_on(a, cap) for a in archs):
        return None
    sm = f"{cap[0]}.{cap[1]}"
    return (f"torch_mma_emu's CUDA kernels were built for {', '.join(archs)}, which do not "
            f"run on {where} (compute capability {sm}); reinstall from source for it: "
            f"TORCH_CUDA_ARCH_LIST=\"{sm}{'a' if cap[0] >= 9 else ''}\" pip install . "
            "(docs/install.md)")


@lru_cache(maxsize=None)
def _checked(index: int) -> str | None:
    cap = torch.cuda.get_device_capability(index)
    name = torch.cuda.get_device_name(index)
    return problem(cap, built(), f"cuda:{index} ({name})")


def check(device: torch.device) -> None:
    """Raises RuntimeError where this build has no code for ``device``'s GPU (once per GPU)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    msg = _checked(index)
    if msg is not None:
        raise RuntimeError(msg)
