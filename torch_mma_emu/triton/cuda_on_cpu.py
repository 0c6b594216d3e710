"""CUDA tensors made on the CPU while a block is open, so that third-party Triton libraries
that allocate on ``device="cuda"`` (gemlite: at import and in its packing and launch code)
run as shipped on a CPU-only torch under ``tmt.emulate``:

    with tmt.device_queries("H100"), tmt.cuda_on_cpu():
        import gemlite
        layer = gemlite.helper.A16W8(device="cuda:0").from_weights(w_q, scales=s)
        with tme.emulate("H100"), tmt.emulate("H100"):
            y = layer(x)

Inside the block a ``torch.overrides.TorchFunctionMode`` rewrites every torch call's
``device=`` keyword that names a CUDA device ("cuda", "cuda:1", ``torch.device("cuda")`` or
an int index) to the CPU, maps ``Tensor.to("cuda"...)``'s positional device to the CPU, and
makes ``Tensor.cuda()`` return the tensor itself (it is already where the block keeps
tensors).  Nothing else changes: ``x.device.type`` stays "cpu", ``torch.cuda.is_available()``
stays False (device_queries answers the other queries).  Torch's function-mode stack is per
thread, so the redirection applies to the thread that opened the block only, and is popped
when it closes (an exception included); tensors made inside stay on the CPU after it.
"""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

_CPU = torch.device("cpu")
# Tensor methods whose positional arguments may name a device
_POSITIONAL = {torch.Tensor.to, torch.Tensor.new_empty, torch.Tensor.new_zeros,
               torch.Tensor.new_ones, torch.Tensor.new_full, torch.Tensor.new_tensor}


def _is_cuda(d, ints: bool) -> bool:
    if isinstance(d, str):
        return d.split(":")[0] == "cuda"
    if isinstance(d, torch.device):
        return d.type == "cuda"
    return ints and isinstance(d, int) and not isinstance(d, bool)


class CudaOnCpu(TorchFunctionMode):
    """The mode ``cuda_on_cpu`` pushes (module doc)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cuda:
            return args[0]
        if _is_cuda(kwargs.get("device"), ints=True):
            kwargs = {**kwargs, "device": _CPU}
        if func in _POSITIONAL and any(_is_cuda(a, ints=False) for a in args[1:]):
            args = (args[0], *(_CPU if _is_cuda(a, ints=False) else a for a in args[1:]))
        return func(*args, **kwargs)


def cuda_on_cpu() -> CudaOnCpu:
    """A block in which torch calls that allocate on a CUDA device allocate on the CPU."""
    return CudaOnCpu()
