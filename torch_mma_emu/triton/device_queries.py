"""CUDA device queries answered for the emulated GPU, so that third-party Triton libraries
that ask the device at import or at launch load and run on a CPU-only machine:

    with tmt.device_queries("H100"):
        import gemlite                     # asks torch.cuda.get_device_capability() at import
        with tmt.emulate("H100"):
            flag_gems.ops.mm(a, b)         # LibEntry asks torch.cuda.get_device_name()

Inside the block ``torch.cuda.get_device_name``, ``get_device_capability``,
``get_device_properties``, ``current_device`` and ``device_count`` (1) answer for ``arch``'s first GPU (the
registry's ``gpus``), and ``torch.cuda.device(...)`` of a CPU device is a no-op (libraries
wrap launches in ``with torch.cuda.device(x.device)``).  ``torch.cuda.is_available()`` is left
alone (False), so that libraries keep their tensors on the CPU.  The torch.cuda attributes are
replaced process-wide while the block is open (not per thread): open it around imports and
single-threaded runs.  AMD archs answer as ROCm's torch does (capability (9, 4) and
``gcnArchName`` "gfx942" on gfx942).  With Triton installed, Triton's active driver is a
stand-in too (``triton.runtime.driver.active.get_current_target()``: gemlite asks it at
import) answering the arch's ``GPUTarget`` ("cuda", 90, 32) / ("hip", "gfx942", 64), device
0 and the CPU as the torch device; it launches nothing.
"""
from __future__ import annotations

import contextlib
from types import SimpleNamespace

from ..registry import ARCHS, canonical_arch

GIB = 1 << 30
# what torch.cuda.get_device_properties reports beyond the name: SMs / CUs and memory of
# the GPUs the zoo runs on (NVIDIA H100 (SXM5: 132 SMs, 80 GB) and A100 (108 SMs, 80 GB)
# architecture whitepapers; AMD CDNA 3 whitepaper: MI300X 304 CUs, 192 GB); other GPUs
# answer name and capability only
PROPERTIES = {"H100": dict(multi_processor_count=132, total_memory=80 * GIB),
              "A100": dict(multi_processor_count=108, total_memory=80 * GIB),
              "MI300X": dict(multi_processor_count=304, total_memory=192 * GIB)}


def _answers(arch):
    name = canonical_arch(arch)
    a = ARCHS[name]
    gpu = a.gpus[0]
    amd = a.vendor == "amd"
    cap = a.gfx_version if amd else a.capability
    props = SimpleNamespace(name=f"{'AMD Instinct' if amd else 'NVIDIA'} {gpu}", major=cap[0],
                            minor=cap[1], warp_size=64 if amd else 32,
                            gcnArchName=name if amd else "", is_integrated=False,
                            **PROPERTIES.get(gpu, {}))
    return props


class _Driver:
    """Triton's active driver as seen from a CPU: the target, no launches."""

    def __init__(self, props, amd):
        from triton.backends.compiler import GPUTarget
        cap = props.gcnArchName if amd else 10 * props.major + props.minor
        self.target = GPUTarget("hip" if amd else "cuda", cap, props.warp_size)

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_active_torch_device(self):
        import torch
        return torch.device("cpu")

    def get_device_interface(self):
        import torch
        return torch.cuda

    def is_active(self):
        return True


class _NoDevice:
    def __init__(self, device=None):
        self.device = device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@contextlib.contextmanager
def device_queries(arch):
    """A block in which torch.cuda's device queries answer for ``arch`` (module doc)."""
    import torch
    props = _answers(arch)
    cuda = torch.cuda
    orig_device = cuda.device

    def device(d=None):
        dev = torch.device(d) if isinstance(d, str) else d
        if isinstance(dev, torch.device) and dev.type == "cpu":
            return _NoDevice(dev)
        return orig_device(d)
    new = {"get_device_name": lambda device=None: props.name,
           "get_device_capability": lambda device=None: (props.major, props.minor),
           "get_device_properties": lambda device=None: props,
           "current_device": lambda: 0, "device_count": lambda: 1, "device": device}
    saved = {k: getattr(cuda, k) for k in new}
    try:
        from triton.runtime import driver as triton_driver
    except ImportError:
        triton_driver = None
    if triton_driver is not None:
        prev_active = triton_driver._active
        triton_driver.set_active(_Driver(props, bool(props.gcnArchName)))
    for k, v in new.items():
        setattr(cuda, k, v)
    try:
        yield props
    finally:
        for k, v in saved.items():
            setattr(cuda, k, v)
        if triton_driver is not None:
            triton_driver._active = prev_active
