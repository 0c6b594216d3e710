"""``torch.sum`` / ``torch.mean`` as PyTorch 2.13's CUDA kernels compute them, for any
strides and any set of reduced dimensions (TensorIterator's view of the reduction:
:func:`layout`; the launch: config.py; the order: reduce.py)."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from .config import FLOATS as _OPMATH_FLOATS, Layout, ReduceConfig, set_reduce_config
from .facts import kernel_params
from .reduce import evaluate, mean_factor

FLOATS = _OPMATH_FLOATS + (torch.float64,)


def _dims(x: torch.Tensor, dim) -> list[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    if isinstance(dim, int):
        dim = [dim]
    nd = max(x.dim(), 1)
    out = []
    for d in dim:
        d = int(d)
        if not -nd <= d < nd:
            raise IndexError(f"dimension {d} out of range for a {x.dim()}-d tensor")
        out.append(d % nd)
    return out


def iteration(x: torch.Tensor, dim=None):
    """TensorIterator's iteration dimensions of the reduction of ``x`` over ``dim``:
    ``[(size, input stride, reduced)]`` fastest first, size-1 dimensions dropped and
    neighbours coalesced; reduced dimensions first (by input stride), then kept ones (by
    the contiguous output's stride)."""
    red = set(_dims(x, dim)) if x.dim() else set()
    kept = [d for d in range(x.dim()) if d not in red]
    out_stride, s = {}, 1
    for d in reversed(kept):
        out_stride[d] = s
        s *= x.shape[d]
    rdims = sorted((d for d in red if x.shape[d] != 1), key=lambda d: (x.stride(d), -d))
    kdims = [d for d in reversed(kept) if x.shape[d] != 1]
    its = [[x.shape[d], x.stride(d), 0] for d in rdims] + \
          [[x.shape[d], x.stride(d), out_stride[d]] for d in kdims]
    nred = len(rdims)
    merged: list = []
    for i, it in enumerate(its):
        if merged and (i < nred) == merged[-1][3]:
            cur = merged[-1]
            if cur[0] * cur[1] == it[1] and cur[0] * cur[2] == it[2]:
                cur[0] *= it[0]
                continue
        merged.append([it[0], it[1], it[2], i < nred])
    return [(m[0], m[1], m[3]) for m in merged]


def layout(x: torch.Tensor, dim=None) -> Layout:
    its = iteration(x, dim)
    r = sum(1 for it in its if it[2])
    M = int(np.prod([it[0] for it in its if not it[2]], dtype=np.int64))
    N = int(np.prod([it[0] for it in its if it[2]], dtype=np.int64))
    if not its:
        return Layout(1, 1, 0, 0, 1, None, x.storage_offset(), 1, ())
    return Layout(M, N, r, len(its), its[0][1], its[r][1] if r < len(its) else None,
                  x.storage_offset(), its[r][0] if r < len(its) else 1,
                  tuple(it[1] for j, it in enumerate(its) if j != r))


def config_for(x: torch.Tensor, dim, op: str, gpu) -> ReduceConfig:
    """The launch configuration of ``op`` ("sum" / "mean") of ``x`` over ``dim`` on
    ``gpu`` (a registry.Gpu)."""
    lay = layout(x, dim)
    kp = kernel_params(op, x.dtype, lay.num_inputs)
    return set_reduce_config(lay, input_vec_size=kp["input_vec_size"], sms=gpu.sms,
                             max_threads_per_sm=gpu.max_threads_per_sm, vt0=kp["vt0"])


def _rows(x: torch.Tensor, dim):
    """[num_outputs, num_inputs] in reduction order, and each row's start offset."""
    its = iteration(x, dim)
    kept = [it for it in its if not it[2]][::-1]
    red = [it for it in its if it[2]][::-1]
    sizes = [it[0] for it in kept + red]
    strides = [it[1] for it in kept + red]
    v = torch.as_strided(x, sizes, strides, x.storage_offset()) if its else x.reshape(1)
    M = int(np.prod([it[0] for it in kept], dtype=np.int64))
    offs = np.array([x.storage_offset()], np.int64)
    for size, stride, _ in kept:
        offs = (offs[:, None] + np.arange(size, dtype=np.int64) * stride).reshape(-1)
    return v.reshape(M, -1), offs


rows = _rows            # public: aten_cuda/moments.py reads its rows the same way

_ACC = {torch.float64: np.float64}       # every other input sums in float


def reduce(x: torch.Tensor, dim=None, keepdim: bool = False, *, op: str = "sum",
           dtype: Optional[torch.dtype] = None, gpu=None) -> torch.Tensor:
    """``torch.sum`` / ``torch.mean`` of ``x`` over ``dim`` with CUDA's bits on ``gpu``
    (a :class:`registry.Gpu`; default: the H100 SXM)."""
    from ..registry import gpu as find_gpu
    if op not in ("sum", "mean"):
        raise ValueError(f"op must be 'sum' or 'mean', got {op!r}")
    if x.dtype not in FLOATS:
        raise TypeError(f"the CUDA reduction model takes {', '.join(map(str, FLOATS))}; "
                        f"got {x.dtype}")
    if x.is_complex() or x.numel() == 0:
        raise ValueError("the CUDA reduction model takes a non-empty real tensor")
    if x.numel() >= 2 ** 31:
        raise ValueError("the CUDA reduction model covers 32-bit indexing (< 2^31 elements)")
    gpu = find_gpu(gpu) if not hasattr(gpu, "sms") else gpu
    out_dtype = dtype or x.dtype
    dims = _dims(x, dim)
    cfg = config_for(x, dim, op, gpu)
    X, offs = _rows(x, dim)
    acc = _ACC.get(x.dtype, np.float32)
    Xn = (X.double() if acc is np.float64 else X.float()).contiguous().numpy().astype(acc,
                                                                                     copy=False)
    vec = cfg.input_vec_size
    shifts = (offs * x.element_size() % (vec * x.element_size())) // x.element_size()
    s = evaluate(Xn, cfg, shifts)
    if op == "mean":
        f = mean_factor(cfg.num_outputs, x.numel()) if acc is np.float32 else \
            np.float64(cfg.num_outputs) / np.float64(x.numel())
        s = s * f
    kept = [d for d in range(x.dim()) if d not in dims]
    shape = [x.shape[d] if d in kept else 1 for d in range(x.dim())] if keepdim else \
        [x.shape[d] for d in kept]
    return torch.from_numpy(np.ascontiguousarray(s)).reshape(shape).to(out_dtype)


def describe(x: torch.Tensor, dim=None, op: str = "sum", gpu=None) -> str:
    from ..registry import gpu as find_gpu
    gpu = find_gpu(gpu) if not hasattr(gpu, "sms") else gpu
    return config_for(x, dim, op, gpu).describe()


__all__ = ["reduce", "layout", "iteration", "rows", "config_for", "describe", "FLOATS"]
