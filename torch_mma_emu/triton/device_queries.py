"""CUDA device queries answered for the emulated GPU, so that third-party Triton libraries
that ask the device at import or at launch load and run on a CPU-only machine:

    with tmt.device_queries("H100"):
        import gemlite                     # asks torch.cuda.get_device_capability() at import
        with tmt.emulate("H100"):
            flag_gems.ops.mm(a, b)         # LibEntry asks torch.cuda.get_device_name()

Inside the block ``torch.cuda.get_device_name``, ``get_device_capability``,
``get_device_properties``, ``current_device`` and ``device_count`` (1) answer for ``arch``'s first GPU (the
registry's ``gpus``), and ``torch.cuda.device`` stays a class (a subclass of torch's) whose
``with`` is a no-op for a CPU device, ``None`` and the one emulated GPU (index 0): libraries
wrap launches in ``with torch.cuda.device(x.device)`` or ``(x.device.index)``.  ``torch.cuda.is_available()`` is left
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
from . import target_rules

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
    cap = target_rules.device_capability(name)
    props = SimpleNamespace(name=f"{'AMD Instinct' if amd else 'NVIDIA'} {gpu}", major=cap[0],
                            minor=cap[1], warp_size=target_rules.gpu_target(name)[2],
                            gcnArchName=name if amd else "", is_integrated=False,
                            **PROPERTIES.get(gpu, {}))
    return props


class _Driver:
    """Triton's active driver as seen from a CPU: the target, no launches."""

    def __init__(self, arch):
        from triton.backends.compiler import GPUTarget
        self.target = GPUTarget(*target_rules.gpu_target(arch))

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


def _device_class(orig):
    """``torch.cuda.device`` inside the block: still a class (torch's own
    ``_get_device_index`` asks ``isinstance(d, torch.cuda.device)``), a subclass of torch's,
    whose ``with`` is a no-op for the emulated GPU (``None``, index 0 / -1, ``"cuda"``,
    ``"cuda:0"``) and for a CPU device (libraries write ``torch.cuda.device(x.device)`` and
    ``torch.cuda.device(x.device.index)``); another index is refused as torch refuses it
    (there is one GPU)."""
    import torch

    class device(orig):
        def __init__(self, device=None):
            dev = torch.device(device) if isinstance(device, str) else device
            if isinstance(dev, orig):
                dev = dev.idx
            if isinstance(dev, torch.device):
                dev = -1 if dev.type == "cpu" else (dev.index or 0) if dev.type == "cuda" \
                    else dev
            if dev is None or dev in (-1, 0):
                self.idx, self.prev_idx, self._noop = 0 if dev is None else dev, -1, True
                return
            self._noop = False
            super().__init__(device)

        def __enter__(self):
            return self if self._noop else super().__enter__()

        def __exit__(self, *exc):
            return False if self._noop else super().__exit__(*exc)
    device.__qualname__ = device.__name__ = "device"
    return device


@contextlib.contextmanager
def device_queries(arch, *, available: bool = False):
    """A block in which torch.cuda's device queries answer for ``arch`` (module doc);
    ``available=True``: ``torch.cuda.is_available()`` (and torch's own device interface,
    which ``torch.utils._triton.has_triton`` asks) says True too, ``torch.cuda.synchronize``
    is a no-op, and allocations on a CUDA device land on the CPU (``cuda_on_cpu``, the
    calling thread): for libraries that take the GPU branch only when CUDA is available
    (Liger's ``infer_device``, torchao's ``has_triton``) while their tensors stay on the
    CPU, which is what a launch inside an emulate block reads."""
    import torch
    props = _answers(arch)
    cuda = torch.cuda
    device = _device_class(cuda.device)
    new = {"get_device_name": lambda device=None: props.name,
           "get_device_capability": lambda device=None: (props.major, props.minor),
           "get_device_properties": lambda device=None: props,
           "current_device": lambda: 0, "device_count": lambda: 1, "device": device}
    if available:
        new.update(is_available=lambda: True, synchronize=lambda device=None: None)
    saved = {k: getattr(cuda, k) for k in new}
    try:
        from triton.runtime import driver as triton_driver
    except ImportError:
        triton_driver = None
    if triton_driver is not None:
        prev_active = triton_driver._active
        triton_driver.set_active(_Driver(canonical_arch(arch)))
    for k, v in new.items():
        setattr(cuda, k, v)
    interface = _interface_patch() if available else contextlib.nullcontext()
    try:
        with interface:
            yield props
    finally:
        for k, v in saved.items():
            setattr(cuda, k, v)
        if triton_driver is not None:
            triton_driver._active = prev_active


@contextlib.contextmanager
def _interface_patch():
    """Torch's CUDA device interface (``torch._dynamo.device_interface``, bound to the
    original ``torch.cuda.is_available`` when torch was imported) says available, and
    ``has_triton``'s cached answer is dropped on entry and exit; CUDA allocations go to the
    CPU."""
    from torch._dynamo import device_interface as di
    from torch.utils import _triton
    from .cuda_on_cpu import cuda_on_cpu
    cls = di.CudaInterface
    prev = cls.__dict__.get("is_available")
    prev_props = di.caching_worker_device_properties.pop("cuda", None)
    cls.is_available = staticmethod(lambda: True)
    _triton.has_triton.cache_clear()
    try:
        with cuda_on_cpu():
            yield
    finally:
        if prev is None:
            del cls.is_available
        else:
            cls.is_available = prev
        di.caching_worker_device_properties.pop("cuda", None)
        if prev_props is not None:
            di.caching_worker_device_properties["cuda"] = prev_props
        _triton.has_triton.cache_clear()


def install_in_blocks(set_attr, current) -> None:
    """In a process without CUDA, torch.cuda's device queries answer for the calling
    thread's emulate block (hook.py installs this with its seam): a library imported or run
    inside ``tmt.emulate(arch)`` that asks the device (``import fla.ops``: Triton's driver
    stand-in says "cuda", then ``torch.cuda.get_device_properties``) gets the answers of
    :func:`device_queries`; outside a block, in ``tmt.interpret()`` and with a GPU, torch's
    own functions run.  ``is_available()`` is left alone (``device_queries(arch,
    available=True)`` changes it)."""
    import torch
    if torch.cuda.is_available():
        return
    cuda = torch.cuda

    def answering(name, orig):
        def query(*args, **kwargs):
            block = current()
            arch = getattr(block, "arch", None)
            if arch is None:
                return orig(*args, **kwargs)
            props = _answers(arch)
            return {"get_device_name": lambda: props.name,
                    "get_device_capability": lambda: (props.major, props.minor),
                    "get_device_properties": lambda: props, "current_device": lambda: 0,
                    "device_count": lambda: 1}[name]()
        query.__name__ = name
        return query
    for name in ("get_device_name", "get_device_capability", "get_device_properties",
                 "current_device", "device_count"):
        set_attr(cuda, name, answering(name, getattr(cuda, name)))
    orig_device = cuda.device
    emulated = _device_class(orig_device)

    class device(emulated):
        def __init__(self, device=None):
            if getattr(current(), "arch", None) is None:
                self._noop = False
                orig_device.__init__(self, device)
            else:
                super().__init__(device)
    device.__qualname__ = device.__name__ = "device"
    set_attr(cuda, "device", device)
