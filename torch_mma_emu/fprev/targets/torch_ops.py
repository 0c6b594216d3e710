"""Ready targets: torch.sum (whole tensor or one dim), dot, mv, NumPy sum/dot.

Where one call can answer several probes (a sum over one dim of a 2-D tensor, the rows of
a matrix-vector product), :class:`~.base.RowsTarget` puts one probe per row; the 1-D sums
use :class:`~.base.VectorTarget`.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..probes import ProbeValues, check_dtype
from .base import RowsTarget, VectorTarget


def as_device(device) -> torch.device:
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was requested but torch.cuda.is_available() is "
                           "False (CPU-only torch build or no GPU)")
    return dev


def check_n(n, what="n") -> int:
    import numbers
    if not isinstance(n, numbers.Integral) or isinstance(n, (bool, np.bool_)) or n < 1:
        raise ValueError(f"{what} must be a positive int, got {n!r}")
    return int(n)


class SumDimTarget(RowsTarget):
    """``fn(T, dim=dim)`` for a contiguous tensor T of ``shape``: the summands are T's
    entries along ``dim``, and every other index is one independent output (one probe)."""

    def __init__(self, shape, dim, dtype, device, fn=torch.sum, values=None, pack=True):
        shape = tuple(int(s) for s in shape)
        if not shape or any(s < 1 for s in shape):
            raise ValueError(f"shape must be a non-empty tuple of positive sizes, got {shape}")
        if not -len(shape) <= dim < len(shape):
            raise ValueError(f"dim {dim} is out of range for shape {shape}")
        self.shape, self.dim, self.fn = shape, dim % len(shape), fn
        n = shape[self.dim]
        dtype = check_dtype(dtype)
        super().__init__(n, math.prod(shape) // n, dtype, as_device(device),
                         values or ProbeValues.for_dtype(dtype, pack=pack),
                         f"{getattr(fn, '__name__', 'sum')}(shape={shape}, dim={dim})")

    def eval_rows(self, X: torch.Tensor) -> torch.Tensor:
        T = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        T.movedim(self.dim, -1).copy_(X.reshape(T.movedim(self.dim, -1).shape))
        return self.fn(T, dim=self.dim).reshape(-1)


class MatVecTarget(RowsTarget):
    """``mv(A, ones)`` for A of shape (m, n): row i of A carries probe i."""

    def __init__(self, m, n, dtype, device, mv=torch.mv, values=None, pack=True):
        dtype = check_dtype(dtype)
        super().__init__(check_n(n), check_n(m, "m"), dtype, as_device(device),
                         values or ProbeValues.for_dtype(dtype, pack=pack),
                         f"{getattr(mv, '__name__', 'mv')}(A[{m}x{n}], x)")
        self.mv = mv
        self._x = torch.ones(n, dtype=dtype, device=self.device)

    def eval_rows(self, X: torch.Tensor) -> torch.Tensor:
        return self.mv(X, self._x)


def sum_target(n=None, *, shape=None, dim=None, dtype=torch.float32, device="cpu",
               fn=torch.sum, **kw):
    """torch.sum of a 1-D tensor of n elements, or over ``dim`` of a tensor of ``shape``."""
    if shape is None:
        return VectorTarget(fn, check_n(n), dtype, as_device(device), ieee=fn is torch.sum,
                            label=f"{getattr(fn, '__name__', 'sum')}(n={n})", **kw)
    if dim is None:
        raise ValueError("give dim= together with shape=")
    shape = tuple(shape)
    if isinstance(dim, bool) or not isinstance(dim, int) or not -len(shape) <= dim < len(shape):
        raise ValueError(f"dim={dim!r} is not a dimension of shape {shape}")
    if n is not None and n != shape[dim]:
        raise ValueError(f"n={n} disagrees with shape[{dim}]={tuple(shape)[dim]}")
    return SumDimTarget(shape, dim, dtype, device, fn, **kw)


def dot_target(n, *, dtype=torch.float32, device="cpu", dot=torch.dot, **kw):
    """dot(x, ones): the summands are x's entries."""
    dev = as_device(device)
    ones = torch.ones(check_n(n), dtype=check_dtype(dtype), device=dev)
    return VectorTarget(lambda x: dot(x, ones), n, dtype, dev, ieee=dot is torch.dot,
                        label=f"{getattr(dot, '__name__', 'dot')}(n={n})", **kw)


def numpy_sum_target(n, *, dtype=torch.float32, **kw):
    return VectorTarget(lambda x: np.sum(x.numpy()), check_n(n), dtype, "cpu", ieee=True,
                        label=f"numpy.sum(n={n})", **kw)


def numpy_dot_target(n, *, dtype=torch.float32, **kw):
    ones = np.ones(check_n(n), dtype=str(dtype).replace("torch.", ""))
    return VectorTarget(lambda x: np.dot(x.numpy(), ones), n, dtype, "cpu", ieee=True,
                        label=f"numpy.dot(n={n})", **kw)
