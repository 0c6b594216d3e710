"""softmax / log_softmax over the last dimension as torch 2.13's CUDA persistent warp
kernel computes them (``softmax_warp_forward`` in ``PersistentSoftmax.cuh``, shipped in the
wheel), for rows of at most 2048 elements and 8192 bytes (``host_softmax``'s rule):

* with ``P`` the next power of two >= n, a warp of ``W = min(P, 32)`` lanes holds a row,
  lane ``l`` the elements ``l + W * it`` (missing ones read as ``-inf``);
* the row maximum (exact), then per lane ``sum += exp(x - max)`` in ``it`` order from 0,
  then XOR butterflies ``W/2 .. 1`` (every lane ends with the halving tree's value);
* softmax: ``exp(x - max) / sum`` (correctly rounded division; NaN where ``sum == 0``);
  log_softmax: ``(x - max) - log(sum)``.

``exp`` and ``log`` are the device's ``expf`` / ``logf`` models, passed in (CUDA's math
library is another model: :func:`device_math`); the float accumulator is fp32 for fp32,
fp16 and bf16 inputs, the result is rounded once to the input dtype.
"""
from __future__ import annotations

import numpy as np
import torch

MAX_ELEMENTS = 2048
MAX_BYTES = 8192


def persistent(n: int, dtype: torch.dtype) -> bool:
    """Whether a last-dim softmax of rows of ``n`` elements runs the persistent kernel."""
    item = torch.empty((), dtype=dtype).element_size()
    return 0 < n <= MAX_ELEMENTS and n * item <= MAX_BYTES


def device_math():
    """``(exp, log)``: the CUDA math models of torch 2.13 (``aten_cuda.elementwise``), or
    None where this checkout has none."""
    try:
        from . import elementwise as ew        # noqa: PLC0415 (optional sibling module)
    except ImportError:
        return None
    return ew.exp, ew.log


def _lanes(n: int):
    P = 1 << max(n - 1, 0).bit_length()
    W = min(P, 32)
    return W, P // W


def lanes(X: np.ndarray, fill) -> np.ndarray:
    """Rows of ``X`` [rows, n] as the warp holds them: ``[rows, it, lane]``, element
    ``l + W * it`` at ``[it, l]``, missing ones ``fill``."""
    R, n = X.shape
    W, IT = _lanes(n)
    E = np.full((R, IT * W), fill, X.dtype)
    E[:, :n] = X
    return E.reshape(R, IT, W)


def _add32(a, b):
    return (a + b).astype(np.float32)


def row_sum(e: np.ndarray, add=_add32) -> np.ndarray:
    """The denominator: per lane ``sum += e[it]`` from ``it = 0``, then the XOR butterflies
    ``W/2 .. 1`` (lane 0's value, the halving tree).  ``e``: ``[rows, it, lane]``;
    ``add``: float32 addition (a symbolic one builds :func:`tree`)."""
    s = e[:, 0]                           # 0 + e[0]: exact (e >= 0 or NaN)
    for it in range(1, e.shape[1]):
        s = add(s, e[:, it])
    w = e.shape[2]
    while w > 1:
        h = w // 2
        s = add(s[:, :h], s[:, h:w])
        w = h
    return s[:, 0]


def tree(n: int):
    """The ``SumTree`` of the denominator of a row of ``n``, written from the kernel's order
    (not by running :func:`row_sum`): lane l adds ``l, l + W, l + 2W, ...`` in turn, then
    lane i takes lane i + h for h = W/2 .. 1 (the XOR butterfly as lane 0 sees it)."""
    from ..order.builders import TreeBuilder
    if n < 1:
        raise ValueError(f"a softmax row needs n >= 1 elements, got {n}")
    W, _ = _lanes(n)
    b = TreeBuilder(n)
    add = b.add
    acc = [None] * W
    for i in range(n):
        acc[i % W] = add(acc[i % W], i)
    h = W // 2
    while h:
        for lane in range(h):
            acc[lane] = add(acc[lane], acc[lane + h])
        h //= 2
    return b.tree(acc[0])


def evaluate(X: np.ndarray, exp, log, *, log_softmax: bool = False) -> np.ndarray:
    """Rows of ``X`` (float32, [rows, n]) through the persistent kernel."""
    X = np.asarray(X, np.float32)
    R, n = X.shape
    W, IT = _lanes(n)
    E = lanes(X, -np.inf)
    mx = X.max(axis=1)[:, None, None]
    d = (E - mx).astype(np.float32)
    e = np.asarray(exp(d), np.float32)
    s = row_sum(e)[:, None, None]
    if log_softmax:
        out = (d - np.asarray(log(s), np.float32)).astype(np.float32)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(s == 0, np.float32(np.nan), (e / s).astype(np.float32))
    return out.reshape(R, IT * W)[:, :n].astype(np.float32)


def softmax(x: torch.Tensor, dim: int = -1, *, log_softmax: bool = False, exp=None,
            log=None) -> torch.Tensor:
    """softmax (or log_softmax) of ``x`` over its last dimension with the persistent kernel's
    bits; ``exp`` / ``log``: the device's math (default :func:`device_math`)."""
    if x.dim() == 0 or dim % x.dim() != x.dim() - 1:
        raise ValueError("the persistent softmax model takes the last dimension only")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"the softmax model takes fp32, fp16 or bf16, got {x.dtype}")
    n = x.shape[-1]
    if not persistent(n, x.dtype):
        raise ValueError(f"rows of {n} elements run the block softmax kernels (not modelled "
                         f"here): the persistent kernel takes at most {MAX_ELEMENTS} "
                         f"elements and {MAX_BYTES} bytes")
    if exp is None or log is None:
        dm = device_math()
        if dm is None:
            raise RuntimeError("no CUDA expf / logf model in this checkout "
                               "(torch_mma_emu.aten_cuda.elementwise)")
        exp, log = exp or dm[0], log or dm[1]
    X = x.detach().reshape(-1, n).float().numpy()
    out = evaluate(X, exp, log, log_softmax=log_softmax)
    return torch.from_numpy(out).reshape(x.shape).to(x.dtype)
