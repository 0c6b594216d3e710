"""Under ``emulate``: the backward kernels of PyTorch's CUDA activations
(``sigmoid_backward``, ``tanh_backward``, ``silu_backward``, ``gelu_backward`` in both forms;
their ``grad_input=`` forms) with the bits of torch 2.13.0's CUDA 13.0 kernels
(torch_mma_emu/aten_cuda/backward.py), on NVIDIA targets; and softmax / log_softmax
backward (``_softmax_backward_data``, ``_log_softmax_backward_data``:
aten_cuda/softmax_backward.py).

Calls the models do not cover run natively and are counted in the summary's "ran natively"
line: AMD targets and Specs without an NVIDIA arch, float64, mixed dtypes, tensors not on
the CPU.
"""
from __future__ import annotations

import torch

from ..aten_cuda import backward as bw
from ..aten_cuda import elementwise as ew
from ..aten_cuda.config import FLOATS
from .aten_math import nvidia_target
from .records import KERNEL_NATIVE

__all__ = ["handle", "handle_softmax", "OPS", "SOFTMAX_OPS", "KIND", "LABEL"]

KIND = "elementwise"
LABEL = f"torch {ew.TORCH_VERSION} CUDA kernel"
OPS = ("sigmoid_backward", "tanh_backward", "silu_backward", "gelu_backward")


def _why_native(mode, g, o) -> str:
    if not all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in (g, o)):
        return "not a CPU tensor"
    if g.dtype not in FLOATS or o.dtype != g.dtype:
        return f"{g.dtype}, {o.dtype}: no model"
    if not nvidia_target(mode):
        return f"{mode.policy.arch_name}: no model of this target's math library"
    return ""


def handle(mode, func, args, kwargs):
    """``aten.<op>_backward`` (``default`` / ``grad_input``)."""
    name = func.overloadpacket.__name__
    g, o = args[0], args[1]
    if name == "gelu_backward" and kwargs.get(
            "approximate", args[2] if len(args) > 2 else "none") == "tanh":
        name = "gelu_tanh_backward"
    why = _why_native(mode, g, o)
    if why:
        mode.count_native(func, why)
        return func(*args, **kwargs)
    res = bw.apply(name, g, o)
    mode.record(func, KIND, LABEL, [g.shape, o.shape], f"{ew.MODELS}: {bw.OPS[name][2]}")
    out = kwargs.get("grad_input")
    if out is not None:
        out.resize_(res.shape)
        return out.copy_(res)
    return res


SOFTMAX_OPS = ("_softmax_backward_data", "_log_softmax_backward_data")


def handle_softmax(mode, func, args, kwargs):
    """``aten._softmax_backward_data`` / ``_log_softmax_backward_data`` (grad_output,
    output, dim, input_dtype; ``out=``): the kernel torch 2.13's ``host_softmax_backward``
    picks (aten_cuda/softmax_backward.py), with the CUDA expf model for log_softmax."""
    from ..aten_cuda import softmax_backward as sb
    g, y, dim = args[0], args[1], args[2]
    input_dtype = args[3] if len(args) > 3 else kwargs.get("input_dtype")
    why = _why_native(mode, g, y)
    if not why and input_dtype not in sb.FLOATS:
        why = f"{input_dtype}: no model"
    if not why and g.dtype != input_dtype and not (g.dtype == torch.float32 and
                                                   input_dtype == torch.float16):
        return func(*args, **kwargs)                # torch's own error
    if why:
        mode.record(func, "reduction", KERNEL_NATIVE, [g.shape], why)
        return func(*args, **kwargs)
    log = func.overloadpacket.__name__.startswith("_log")
    res, launch = sb.softmax_backward(g, y, dim, input_dtype, log_softmax=log)
    mode.record(func, "reduction", LABEL, [g.shape], launch.describe())
    out = kwargs.get("out")
    if out is not None:
        out.resize_(res.shape)
        return out.copy_(res)
    return res
