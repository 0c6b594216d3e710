"""Under ``emulate``: PyTorch's own CUDA reductions (``sum``, ``mean``; ``softmax`` /
``log_softmax`` where the CUDA math models are present) computed with the
target GPU's bits - torch 2.13.0's ``reduce_kernel`` order on the named GPU's SM count
(torch_mma_emu/aten_cuda).  The GPU is the one ``emulate`` names (``emulate("H100 PCIe")``)
or the arch's first part (``"sm90"`` -> the H100 SXM, 132 SMs).

Calls the model does not cover run natively and are recorded as such: integer and complex
sums, AMD targets (ROCm's kernel sums in another order), empty tensors, tensors of 2^31 or
more elements, tensors not on the CPU.
"""
from __future__ import annotations

import threading

import torch

from .. import aten_cuda, registry
from .records import KERNEL_NATIVE

__all__ = ["handle_sum", "handle_mean", "handle_softmax", "target_gpu", "warn_version",
           "KIND", "parts_of_a_model", "in_a_model"]

KIND = "reduction"
_PARTS = threading.local()


class parts_of_a_model:
    """While open (in this thread), sums and means are parts of another op's model (the
    attention flash form, function-level routes): they run as written, unrecorded."""

    def __enter__(self):
        _PARTS.depth = getattr(_PARTS, "depth", 0) + 1

    def __exit__(self, *exc):
        _PARTS.depth -= 1
def in_a_model() -> bool:
    """Whether this thread is inside :class:`parts_of_a_model` (its ops run as written)."""
    return bool(getattr(_PARTS, "depth", 0))


_LABEL = f"torch {aten_cuda.TORCH_VERSION} CUDA kernel"


def target_gpu(mode):
    """The GPU row of the block's target, or None when it has no modelled CUDA kernels
    (AMD archs, a Spec without an arch)."""
    pol = mode.policy
    name = getattr(pol, "target_name", None) or pol.arch
    try:
        g = registry.gpu(name)
    except ValueError:
        return None
    return g


def _why_native(mode, x, dtype):
    if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
        return "not a CPU tensor"
    if x.dtype not in aten_cuda.sums.FLOATS or (dtype is not None and
                                                dtype not in aten_cuda.sums.FLOATS):
        return None if not x.is_floating_point() and not x.is_complex() else \
            f"{x.dtype}: no model"
    if x.numel() == 0 or x.numel() >= 2 ** 31:
        return "size outside the model (empty, or 64-bit indexing)"
    if target_gpu(mode) is None:
        return f"{mode.policy.arch_name}: no model of this target's reduction kernel"
    return ""


def warn_version(mode, msg: str) -> None:
    """Warn once per block where this torch is not the one the CUDA kernel models were read
    from (``msg``: a model's ``version_mismatch()``, empty when it is)."""
    if msg:
        mode.warn_once("aten_cuda.version", f"emulate: {msg}", stacklevel=5)


def _run(mode, func, op, x, dim, keepdim, dtype, args, kwargs):
    if getattr(_PARTS, "depth", 0):
        return func(*args, **kwargs)
    why = _why_native(mode, x, dtype)
    if why is None:                       # integer / bool sums: exact in any order
        return func(*args, **kwargs)
    if why:
        mode.record(func, KIND, KERNEL_NATIVE, [x.shape], why)
        return func(*args, **kwargs)
    warn_version(mode, aten_cuda.version_mismatch())
    gpu = target_gpu(mode)
    xin = x.detach()
    src = xin
    if dtype is not None and dtype != x.dtype and not (
            dtype == torch.float32 and x.dtype in (torch.float16, torch.bfloat16)):
        src = xin.to(dtype)     # make_reduction casts first; 16-bit -> fp32 casts in-kernel
    out = aten_cuda.reduce(src, dim, keepdim, op=op, dtype=dtype, gpu=gpu)
    mode.record(func, KIND, _LABEL, [x.shape],
                f"{gpu.name}: " + aten_cuda.describe(src, dim, op, gpu))
    return out


def _sum_args(args, kwargs):
    x = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    dtype = args[3] if len(args) > 3 else kwargs.get("dtype")
    return x, dim, keepdim, dtype


def _handler(op: str):
    """The handler of ``aten.<op>`` (sum, mean): ``.default`` (x, dtype) reduces every
    element, the dim overload (x, dim, keepdim, dtype) the given dims."""
    def handle(mode, func, args, kwargs):
        if func is getattr(torch.ops.aten, op).default:
            x, dtype = args[0], (args[1] if len(args) > 1 else kwargs.get("dtype"))
            return _run(mode, func, op, x, None, False, dtype, args, kwargs)
        x, dim, keepdim, dtype = _sum_args(args, kwargs)
        return _run(mode, func, op, x, dim, keepdim, dtype, args, kwargs)
    handle.__name__ = f"handle_{op}"
    return handle


handle_sum = _handler("sum")
handle_mean = _handler("mean")


def handle_softmax(mode, func, args, kwargs):
    """``aten._softmax`` / ``_log_softmax`` (x, dim, half_to_float): the bits of the kernel
    torch 2.13's ``host_softmax`` picks (aten_cuda/host_softmax.py: the persistent warp
    kernel, ``cunn_SoftMaxForwardReg`` / ``Smem`` / ``cunn_SoftMaxForward`` for longer rows,
    ``cunn_SpatialSoftMaxForward`` for a dim that is not last) where this checkout has the
    CUDA expf / logf models; otherwise native, recorded with the reason."""
    from ..aten_cuda import host_softmax as hs
    from ..aten_cuda import softmax as sm
    x, dim, half_to_float = args[0], args[1], args[2] if len(args) > 2 else False
    if getattr(_PARTS, "depth", 0):
        return func(*args, **kwargs)
    why = _why_native(mode, x, None)
    if why is None:
        return func(*args, **kwargs)
    if not why:
        if x.dtype not in hs.FLOATS:
            why = f"{x.dtype}: no model"
        elif half_to_float and x.dtype != torch.float16:
            return func(*args, **kwargs)          # torch's own error
        elif sm.device_math() is None:
            why = "no CUDA expf / logf model in this checkout"
    if why:
        mode.record(func, KIND, KERNEL_NATIVE, [x.shape], why)
        return func(*args, **kwargs)
    warn_version(mode, aten_cuda.version_mismatch())
    log = "log" in func.overloadpacket.__name__
    out, launch = hs.softmax(x, dim, log_softmax=log, half_to_float=bool(half_to_float))
    mode.record(func, KIND, _LABEL, [x.shape], launch.describe())
    return out
