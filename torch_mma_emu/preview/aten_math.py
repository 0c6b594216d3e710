"""Under ``emulate``: PyTorch's own CUDA elementwise math (``exp``, ``log``, ``tanh``,
``erf``, ``rsqrt``, ``sigmoid``, ``silu``, ``gelu`` both forms; their ``out=`` and in-place
forms) computed with the bits of torch 2.13.0's CUDA 13.0 kernels
(torch_mma_emu/aten_cuda/elementwise.py), on NVIDIA targets.

Calls the models do not cover run natively and are counted in the summary's "ran natively"
line (the mode's census): AMD targets and Specs without an NVIDIA arch, float64 and complex
tensors, tensors not on the CPU.  The backward ops (``gelu_backward``, ``silu_backward``,
``sigmoid_backward``, ``tanh_backward``) are modelled in preview/aten_backward.py.
"""
from __future__ import annotations

import numpy as np
import torch

from .. import registry
from ..aten_cuda import elementwise as ew

__all__ = ["handle", "OPS", "KIND", "LABEL", "nvidia_target", "version_warning"]

KIND = "elementwise"
LABEL = f"torch {ew.TORCH_VERSION} CUDA kernel"
# aten op name -> model name (gelu picks its form by ``approximate``)
OPS = {"exp": "exp", "log": "log", "tanh": "tanh", "erf": "erf", "rsqrt": "rsqrt",
       "sigmoid": "sigmoid", "silu": "silu", "gelu": "gelu"}
_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def nvidia_target(mode) -> bool:
    """Whether the block targets an NVIDIA arch (the CUDA kernels' models apply)."""
    pol = mode.policy
    if pol.spec is not None:
        return False
    return registry.ARCHS[pol.arch].vendor == "nvidia"


def version_warning(mode) -> None:
    """Warn once per block when this torch is not the one the CUDA models were read from."""
    v = torch.__version__.split("+")[0]
    if v != ew.TORCH_VERSION:
        mode.warn_once("aten_cuda.elementwise.version",
                       f"emulate: the CUDA elementwise models were read from torch "
                       f"{ew.TORCH_VERSION} (CUDA {ew.CUDA_VERSION}); this is torch "
                       f"{torch.__version__}, whose kernels may compute otherwise",
                       stacklevel=4)


def _to_numpy(x: torch.Tensor, dtype: str) -> np.ndarray:
    x = x.detach().contiguous()
    if dtype == "bfloat16":
        return x.view(torch.int16).numpy().view(np.uint16)
    return x.numpy()


def _from_numpy(a: np.ndarray, dtype: str) -> torch.Tensor:
    if dtype == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def model(name: str, x: torch.Tensor) -> torch.Tensor:
    """The modelled op ``name`` (a key of ``aten_cuda.elementwise.OPS``) on CPU tensor ``x``
    (float32 / float16 / bfloat16): a new tensor laid out as ``x``."""
    dtype = _DTYPES[x.dtype]
    out = ew.evaluate(name, _to_numpy(x, dtype), dtype)
    res = torch.empty_like(x)
    res.copy_(_from_numpy(np.ascontiguousarray(out), dtype).reshape(x.shape))
    return res


def _why_native(mode, x) -> str:
    if not isinstance(x, torch.Tensor) or x.device.type != "cpu":
        return "not a CPU tensor"
    if x.dtype not in _DTYPES:
        return f"{x.dtype}: no model"
    if not nvidia_target(mode):
        return f"{mode.policy.arch_name}: no model of this target's math library"
    return ""


def handle(mode, func, args, kwargs):
    """``aten.<op>`` / ``<op>.out`` / ``<op>_`` of the ops in :data:`OPS`."""
    pkt = func.overloadpacket.__name__
    inplace = pkt.endswith("_")
    name = OPS[pkt.rstrip("_")]
    x = args[0]
    if isinstance(x, torch.Tensor) and x.device.type == "cpu" and not inplace and \
            not (x.is_floating_point() or x.is_complex()):
        x = x.to(torch.get_default_dtype())     # integer inputs compute in the float dtype
    if name == "gelu" and kwargs.get("approximate", args[1] if len(args) > 1 else "none") \
            == "tanh":
        name = "gelu_tanh"
    why = _why_native(mode, x)
    if why:
        mode.count_native(func, why)
        return func(*args, **kwargs)
    version_warning(mode)
    res = model(name, x)
    mode.record(func, KIND, LABEL, [x.shape], f"{ew.MODELS}: {ew.OPS[name].expression}")
    out = kwargs.get("out")
    if inplace:
        return args[0].copy_(res)
    if out is not None:
        out.resize_(res.shape)
        return out.copy_(res)
    return res
