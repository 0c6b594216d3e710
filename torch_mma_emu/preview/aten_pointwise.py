"""Under ``emulate``: PyTorch's CUDA pointwise arithmetic - ``add``, ``sub``, ``rsub`` (any
``alpha``), ``mul``, true ``div``, ``neg``, ``reciprocal``, ``sqrt`` (their ``out=`` and
in-place forms) and a floating ``arange`` - with the bits of torch 2.13.0's CUDA kernels
(torch_mma_emu/aten_cuda/pointwise.py) on NVIDIA targets: the FMA that ``alpha`` makes, a
Python number taken in float32, division by a Python number as a multiply by its
reciprocal, ``arange`` as one float32 FMA per element.

A Python number is a CPU scalar, as on the GPU; a 0-dim tensor is taken to live on the GPU
(cast to the op's dtype, as the kernel loads it).  Integer and bool ``add`` / ``sub`` /
``mul`` / ``neg`` and integer ``arange`` give the same bits on any device (two's
complement): they run here and are recorded as modelled.  float64 ops that are one IEEE operation
(``alpha`` = +-1, ``mul``, ``div``, division by a number as a reciprocal multiply, ``neg``,
``reciprocal``, ``sqrt``) run natively with those bits and are recorded as modelled.  The
rest run natively and are counted in the summary's "ran natively" line: float64 with
another ``alpha`` (an FMA in float64), complex tensors, ``div`` with a ``rounding_mode``
(floats), AMD targets and Specs without an NVIDIA arch, tensors not on the CPU.
"""
from __future__ import annotations

import numpy as np
import torch

from ..aten_cuda import pointwise as pw
from . import aten_math, aten_reductions

__all__ = ["handle_binary", "handle_unary", "handle_arange", "BINARY", "UNARY", "KIND"]

KIND = "elementwise"
BINARY = ("add", "sub", "rsub", "mul", "div")
UNARY = ("neg", "reciprocal", "sqrt")
_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
_INTEGER_EXACT = {"add", "sub", "mul", "neg"}


def _bind(func, args, kwargs) -> dict:
    """The call's arguments by their schema names, defaults filled in."""
    out = {}
    for i, a in enumerate(func._schema.arguments):
        if i < len(args) and not a.kwarg_only:
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
    return out


def _call(func, args, kwargs):
    """The bound arguments, the op's packet name, whether it is in place, its base name."""
    pkt = func.overloadpacket.__name__
    return _bind(func, args, kwargs), pkt, pkt.endswith("_"), pkt.rstrip("_")


def _why_native(mode, tensors) -> str:
    if any(t.device.type != "cpu" for t in tensors):
        return "not a CPU tensor"
    if any(t.layout != torch.strided or t.is_quantized for t in tensors):
        return "sparse or quantized tensor: no model"
    if not aten_math.nvidia_target(mode):
        return f"{mode.policy.arch_name}: no model of this target's kernels"
    return ""


def _widen(t: torch.Tensor) -> np.ndarray:
    """A float32 / float16 / bfloat16 tensor's values as float32 (exact)."""
    return t.detach().resolve_neg().float().contiguous().numpy()


def _operand(v, compute: torch.dtype, dividend: bool = False):
    if isinstance(v, torch.Tensor):
        return _widen(v.to(compute))
    if dividend:          # DivFunctor<scalar_t> takes a CPU scalar in the tensor's dtype
        return _widen(torch.tensor(float(v), dtype=compute))
    return pw.opmath_scalar(v)


def _to_tensor(y: np.ndarray, dtype: torch.dtype, shape) -> torch.Tensor:
    """float32 values ``y`` stored to ``dtype`` (float32 / float16 / bfloat16 by the model's
    rounding; float64 exactly), as a tensor of ``shape``."""
    shape = tuple(shape)                 # (np.ascontiguousarray makes a 0-d array 1-d)
    y = np.array(np.broadcast_to(y, shape), dtype=np.float32).reshape(shape)
    if dtype == torch.float64:
        return torch.from_numpy(y.astype(np.float64))
    bits = np.array(pw.store(y, _DTYPES[dtype])).reshape(shape)
    if dtype == torch.float32:
        return torch.from_numpy(bits)
    t = torch.from_numpy(bits.view(np.int16))
    return t.view(torch.float16 if dtype == torch.float16 else torch.bfloat16)


def _store_dtype(compute, dest):
    """The dtype the kernel's functor rounds to: the op's dtype; a float32 result stored to
    float16 / bfloat16 rounds once, straight from float32."""
    return dest if compute == torch.float32 and dest in _DTYPES else compute


def _finish(func, res: torch.Tensor, like, inplace_target, out):
    if inplace_target is not None:
        return inplace_target.copy_(res)
    if out is not None:
        out.resize_(res.shape)
        return out.copy_(res)
    if isinstance(like, torch.Tensor) and like.shape == res.shape and like.dtype == res.dtype:
        return torch.empty_like(like).copy_(res)
    return res


_EXACT = "integers: the same bits on any device (two's complement)"


def _exact(mode, func, args, kwargs):
    """Integer arithmetic that wraps the same way on every device: run here, recorded."""
    res = func(*args, **kwargs)
    mode.record(func, KIND, aten_math.LABEL, [a.shape for a in args
                                              if isinstance(a, torch.Tensor)], _EXACT)
    return res


def _native(mode, func, args, kwargs, why):
    mode.count_native(func, why)
    return func(*args, **kwargs)


def handle_binary(mode, func, args, kwargs):
    """``aten.add / sub / rsub / mul / div`` (``Tensor`` / ``Scalar`` / ``out`` overloads and
    in-place forms)."""
    if aten_reductions.in_a_model():
        return func(*args, **kwargs)
    b, pkt, inplace, name = _call(func, args, kwargs)
    x, y = b["self"], b["other"]
    alpha = b.get("alpha", 1)
    out = b.get("out")
    if name == "rsub":                                  # other - alpha * self
        x, y, name = y, x, "sub"
    tensors = [t for t in (x, y, out) if isinstance(t, torch.Tensor)]
    compute = torch.result_type(x, y)
    if name == "div" and b.get("rounding_mode") is None and \
            not (compute.is_floating_point or compute.is_complex):
        compute = torch.get_default_dtype()             # true division of integers
    if not (compute.is_floating_point or compute.is_complex) and name in _INTEGER_EXACT:
        return _exact(mode, func, args, kwargs)
    why = _why_native(mode, tensors)
    if not why and b.get("rounding_mode") is not None:
        why = "div with rounding_mode: no model"
    target = args[0] if inplace else None
    dest = (target.dtype if target is not None else out.dtype if out is not None
            else compute)
    if not why and (compute not in _DTYPES and compute != torch.float64 or
                    dest not in _DTYPES and dest != torch.float64):
        why = f"{compute}: no model"
    if not why and compute == torch.float64 and name in ("add", "sub") and \
            float(alpha) not in (1.0, -1.0):
        why = "float64 with alpha != +-1 (an FMA in float64): no model"
    if why:
        return _native(mode, func, args, kwargs, why)
    aten_math.version_warning(mode)
    by_number = name == "div" and not isinstance(y, torch.Tensor)
    if compute == torch.float64:
        res = _float64(name, x, y, alpha, by_number)
    else:
        xa = _operand(x, compute, dividend=name == "div")
        ya = _operand(y, compute)
        with np.errstate(all="ignore"):
            if name in ("add", "sub"):
                v = pw.add(xa, ya, float(alpha) if name == "add" else -float(alpha))
            elif name == "mul":
                v = pw.mul(xa, ya)
            elif by_number:
                v = pw.div_by_scalar(xa, y)
            else:
                v = pw.div(xa, ya)
        shape = torch.broadcast_shapes(*[t.shape for t in (x, y) if isinstance(t, torch.Tensor)])
        res = _to_tensor(v, _store_dtype(compute, dest), shape)
    if res.dtype != dest:
        res = res.to(dest)
    expr = "div_scalar" if by_number else pkt.rstrip("_")
    mode.record(func, KIND, aten_math.LABEL, [t.shape for t in tensors if t is not out],
                f"{pw.MODELS}: {pw.EXPRESSIONS[expr]}")
    like = x if isinstance(x, torch.Tensor) else y
    return _finish(func, res, like, target, out)


def _float64(name, x, y, alpha, by_number):
    """The float64 ops that are one IEEE operation: computed natively, the same bits."""
    x = x.detach() if isinstance(x, torch.Tensor) else x
    y = y.detach() if isinstance(y, torch.Tensor) else y
    if name in ("add", "sub"):
        minus = (float(alpha) if name == "add" else -float(alpha)) == -1.0
        if not isinstance(x, torch.Tensor):             # a number minus / plus a tensor
            return torch.rsub(y, x) if minus else torch.add(y, x)
        return torch.sub(x, y) if minus else torch.add(x, y)
    if name == "mul":
        return torch.mul(x, y)
    if by_number:
        return torch.mul(x, 1.0 / float(y))
    return torch.div(x, y)


def handle_unary(mode, func, args, kwargs):
    """``aten.neg / reciprocal / sqrt`` (``default`` / ``out`` and in-place)."""
    if aten_reductions.in_a_model():
        return func(*args, **kwargs)
    b, pkt, inplace, name = _call(func, args, kwargs)
    x, out = b["self"], b.get("out")
    if not isinstance(x, torch.Tensor):
        return _native(mode, func, args, kwargs, "not a tensor")
    integer = not (x.is_floating_point() or x.is_complex())
    if integer and name in _INTEGER_EXACT:
        return _exact(mode, func, args, kwargs)
    compute = torch.get_default_dtype() if integer else x.dtype
    tensors = [t for t in (x, out) if isinstance(t, torch.Tensor)]
    why = _why_native(mode, tensors)
    target = x if inplace else None
    dest = x.dtype if inplace else out.dtype if out is not None else compute
    if not why and (compute not in _DTYPES and compute != torch.float64 or
                    dest not in _DTYPES and dest != torch.float64):
        why = f"{compute}: no model"
    if why:
        return _native(mode, func, args, kwargs, why)
    aten_math.version_warning(mode)
    if compute == torch.float64:
        res = getattr(torch, name)(x.detach())
    else:
        with np.errstate(all="ignore"):
            v = getattr(pw, name)(_widen(x.to(compute)))
        res = _to_tensor(v, _store_dtype(compute, dest), x.shape)
    if res.dtype != dest:
        res = res.to(dest)
    mode.record(func, KIND, aten_math.LABEL, [x.shape], f"{pw.MODELS}: {pw.EXPRESSIONS[name]}")
    return _finish(func, res, x, target, out)


def handle_arange(mode, func, args, kwargs):
    """``aten.arange`` (every overload): the length and dtype as PyTorch gives them (the
    host computes both the same way on either device), floating values as the CUDA kernel
    computes them."""
    if aten_reductions.in_a_model():
        return func(*args, **kwargs)
    r = func(*args, **kwargs)
    if not r.is_floating_point():
        mode.record(func, KIND, aten_math.LABEL, [r.shape], _EXACT)
        return r
    why = "" if aten_math.nvidia_target(mode) else \
        f"{mode.policy.arch_name}: no model of this target's kernels"
    if not why and r.dtype not in _DTYPES:
        why = f"{r.dtype}: no model (float64 arange computes in float64 FMAs)"
    if not why and r.device.type != "cpu":
        why = "not a CPU tensor"
    if why:
        mode.count_native(func, why)
        return r
    b = _bind(func, args, kwargs)
    start = b.get("start", 0)
    step = b.get("step", 1)
    aten_math.version_warning(mode)
    with np.errstate(all="ignore"):
        v = pw.arange(start, step, r.numel())
    res = _to_tensor(v, r.dtype, r.shape)
    mode.record(func, KIND, aten_math.LABEL, [r.shape], f"{pw.MODELS}: {pw.EXPRESSIONS['arange']}")
    with torch.no_grad():
        return r.copy_(res)
