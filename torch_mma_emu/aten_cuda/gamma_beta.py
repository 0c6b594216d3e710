"""layer_norm's weight and bias gradients (dgamma, dbeta) as torch 2.13's CUDA kernel
``GammaBetaBackwardCUDAKernelTemplate<T, float, block_dim_x = 32, block_dim_y,
rows_per_block_y, partial_reduction, aligned_grid, rms_norm>`` computes them
(aten/src/ATen/native/cuda/layer_norm_kernel.cu, ``LaunchGammaBetaBackwardCUDAKernel``).

The launch picks one of five tilings from M (rows), N (columns) and the SM count:

* ``M > 65536 and N // 32 < SMs // 2``: ``<32, 1, 32, partial>`` on a grid of
  ``min(32768 // ceil(N / 32), ceil(M / 32))`` row blocks (:func:`partial_sums`: row block
  ``b`` takes the 32-row tiles ``b, b + grid, ...``, one thread per column, 32 rows each in
  order), partial sums stored in T, then ``.sum(0)``: CUDA's ``reduce_kernel`` over dim 0
  on the GPU's SM count (:func:`torch_mma_emu.aten_cuda.sums.reduce`);
* otherwise one row of blocks (``gridDim.y = 1``), 32 columns per block:
  ``M < 64``: ``<32, 1, 8>`` (one thread per column, no cross-thread reduction);
  ``M < 128``: ``<32, 8, 64>``; ``M < 256``: ``<32, 16, 128>``; else ``<32, 32, 256>``.

In each of the four one-pass tilings a thread ``(x, y)`` owns column ``32 * blockIdx.x + x``
and, for every tile of ``rows_per_block_y`` rows starting at ``M_start``, the 8 rows
``M_start + 8 y + i`` (i = 0..7, rows past M load zeros, mean and rstd zero), and in float::

    dg = fma(dy * (x - mean), rstd, dg)      (FADD -mean, FMUL, FFMA: the cu130 sm_90 SASS)
    db = db + dy                              (FADD)

(``rms_norm``: ``dg = fma(dy * x, rstd, dg)``, no db).  With ``block_dim_y > 1`` the
``block_dim_y`` partial sums of a column go through shared memory to one warp's lanes
``0 .. block_dim_y - 1`` and ``reg += WARP_SHFL_XOR(reg, delta)`` for delta = block_dim_y / 2
.. 1; lane 0's value is stored (rounded once to T).  A zero row adds ``fma(0, 0, dg) = dg``
(dg never holds -0), so padding M to whole tiles leaves the bits unchanged.
"""
from __future__ import annotations

import numpy as np
import torch

from ..gpu_math import ieee
from . import sums
from .config import FLOATS as _FLOATS

__all__ = ["BLOCK_X", "ROWS_PER_THREAD", "PARTIAL_M", "tiling", "kernel_name",
           "column_sums", "partial_grid", "partial_sums", "gamma_beta_grads"]

BLOCK_X = 32               # block_dim_x on CUDA (64 on ROCm)
ROWS_PER_THREAD = 8        # rows_per_block_y / block_dim_y in every CUDA tiling
PARTIAL_M = 64 * 1024      # M above this (and N small for the device) takes the 2-pass path
# (M bound, block_dim_y, rows_per_block_y): the first whose bound exceeds M
_TILES = ((64, 1, 8), (128, 8, 64), (256, 16, 128), (None, 32, 256))
_PARTIAL_TILE = (1, 32)
_T = {torch.float32: "float", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16"}
_F = np.float32


def tiling(m: int, n: int, sms: int) -> tuple:
    """``(block_dim_y, rows_per_block_y, partial)`` that torch 2.13 launches for M rows of N
    on a device of ``sms`` multiprocessors."""
    if m <= 0 or n <= 0 or sms <= 0:
        raise ValueError(f"gamma/beta backward takes M > 0, N > 0 and SMs > 0, got "
                         f"M={m}, N={n}, SMs={sms}")
    if m > PARTIAL_M and n // BLOCK_X < sms // 2:
        return _PARTIAL_TILE + (True,)
    for bound, by, rows in _TILES:
        if bound is None or m < bound:
            return by, rows, False
    raise AssertionError("unreachable")


def kernel_name(m: int, n: int, dtype: torch.dtype, sms: int, *, rms: bool = False) -> str:
    by, rows, partial = tiling(m, n, sms)
    one_thread = by == 1 and not partial          # blocks.y == threads.y == 1: no reduction
    aligned = m % rows == 0 and n % BLOCK_X == 0
    t = _T.get(dtype, str(dtype))
    name = (f"GammaBetaBackwardCUDAKernelTemplate<{t}, float, {BLOCK_X}, {by}, {rows}, "
            f"{str(partial or one_thread).lower()}, {str(aligned).lower()}, "
            f"{str(rms).lower()}>")
    if partial:
        return (f"{name} on {partial_grid(m, n)} row blocks, then .sum(0) (M={m}, N={n}, "
                f"{sms} SMs)")
    return f"{name} (M={m}, N={n})"


def column_sums(DY, X, mean, rstd, *, block_y: int, rows_per_block: int,
                rms: bool = False):
    """float32 ``(dgamma, dbeta)`` [N] of float32 ``DY``, ``X`` [M, N] and per-row ``mean``,
    ``rstd`` [M] (``mean`` ignored when ``rms``; dbeta zeros then) in one of the one-pass
    tilings (``block_y`` threads in y, ``rows_per_block`` rows per tile)."""
    DY, X = np.asarray(DY, _F), np.asarray(X, _F)
    M, N = X.shape
    Y, R = int(block_y), int(rows_per_block)
    if Y < 1 or Y & (Y - 1) or R != Y * ROWS_PER_THREAD:
        raise ValueError(f"no such tiling: block_dim_y={Y}, rows_per_block_y={R}")
    mean = np.zeros(M, _F) if rms else np.asarray(mean, _F).reshape(M)
    rstd = np.asarray(rstd, _F).reshape(M)
    dg = np.zeros((Y, N), _F)
    db = np.zeros((Y, N), _F)
    with np.errstate(over="ignore", invalid="ignore"):
        for s in range(0, M, R):                       # M_start, gridDim.y = 1
            e = min(s + R, M)
            dy, x = DY[s:e], X[s:e]
            p = (dy * (x if rms else (x - mean[s:e, None]).astype(_F, copy=False))
                 ).astype(_F, copy=False)
            r = rstd[s:e]
            if e - s < R:                              # rows past M: zeros
                pad = R - (e - s)
                p = np.concatenate([p, np.zeros((pad, N), _F)])
                dy = np.concatenate([dy, np.zeros((pad, N), _F)])
                r = np.concatenate([r, np.zeros(pad, _F)])
            p = p.reshape(Y, ROWS_PER_THREAD, N)       # thread y: rows s + 8 y + i
            dy = dy.reshape(Y, ROWS_PER_THREAD, N)
            r = r.reshape(Y, ROWS_PER_THREAD, 1)
            for i in range(ROWS_PER_THREAD):
                dg = ieee.fma(p[:, i], r[:, i], dg)
                if not rms:
                    db = (db + dy[:, i]).astype(_F, copy=False)
        while Y > 1:                                   # shfl_xor delta = Y/2 .. 1, lane 0
            Y //= 2
            dg = (dg[:Y] + dg[Y:2 * Y]).astype(_F, copy=False)
            db = (db[:Y] + db[Y:2 * Y]).astype(_F, copy=False)
    return dg[0], db[0]


def partial_grid(m: int, n: int) -> int:
    """Row blocks of the 2-pass tiling: ``min(32768 // ceil(N / 32), ceil(M / 32))``."""
    return min((32 * 1024) // -(-n // BLOCK_X), -(-m // _PARTIAL_TILE[1]))


def partial_sums(DY, X, mean, rstd, grid: int, *, rms: bool = False):
    """The 2-pass tiling's first kernel, ``<32, 1, 32, partial_reduction>`` on ``grid`` row
    blocks: float32 ``(dg, db)`` [grid, N], row block ``b`` summing, in order, the 32-row
    tiles ``b, b + grid, b + 2 grid, ...`` (one thread per column; stored to T by the
    caller, then ``.sum(0)``)."""
    DY, X = np.asarray(DY, _F), np.asarray(X, _F)
    M, N = X.shape
    G, R = int(grid), _PARTIAL_TILE[1]
    K = -(-M // (R * G))
    mean = np.zeros(M, _F) if rms else np.asarray(mean, _F).reshape(M)
    rstd = np.asarray(rstd, _F).reshape(M)
    with np.errstate(over="ignore", invalid="ignore"):
        P = (DY * (X if rms else (X - mean[:, None]).astype(_F, copy=False))
             ).astype(_F, copy=False)

        def lay(A, width):           # rows past M: zeros; [K, G, 32, width]
            Z = np.zeros((K * G * R, width), _F)
            Z[:M] = A.reshape(M, width)
            return Z.reshape(K, G, R, width)
        P, D, Rs = lay(P, N), lay(DY, N), lay(rstd, 1)
        dg = np.zeros((G, N), _F)
        db = np.zeros((G, N), _F)
        for k in range(K):
            for i in range(R):
                dg = ieee.fma(P[k, :, i], Rs[k, :, i], dg)
                if not rms:
                    db = (db + D[k, :, i]).astype(_F, copy=False)
    return dg, db


def gamma_beta_grads(dy: torch.Tensor, x: torch.Tensor, n: int, mean, rstd, gpu, *,
                     rms: bool = False):
    """``native_layer_norm_backward``'s (dgamma, dbeta) in ``x``'s dtype (fp32 / fp16 /
    bf16) for rows of ``n``, from the forward's float ``mean`` / ``rstd`` (``rms``: the
    fused rms_norm's dgamma, dbeta None), on ``gpu``: a :class:`registry.Gpu` row, or its
    SM count for the one-pass tilings (the 2-pass one also needs the row for its
    ``.sum(0)``: :func:`torch_mma_emu.aten_cuda.sums.reduce`)."""
    if x.dtype not in _FLOATS or dy.dtype != x.dtype:
        raise TypeError(f"the gamma/beta backward model takes fp32, fp16 or bf16 dy and x of "
                        f"one dtype, got {dy.dtype} and {x.dtype}")
    if dy.shape != x.shape or n <= 0 or x.numel() % n or x.numel() == 0:
        raise ValueError(f"dy {list(dy.shape)} and x {list(x.shape)} must have one non-empty "
                         f"shape made of rows of {n}")
    m = x.numel() // n
    sms = int(getattr(gpu, "sms", gpu))
    by, rows, partial = tiling(m, n, sms)
    if partial and not hasattr(gpu, "sms"):
        raise ValueError(f"{kernel_name(m, n, x.dtype, sms, rms=rms)}: the 2-pass tiling's "
                         f".sum(0) needs the GPU row (registry.gpu), not an SM count")
    for t, name in ((None if rms else mean, "mean"), (rstd, "rstd")):
        if t is not None and t.numel() != m:
            raise ValueError(f"{name} must have {m} elements, got {t.numel()}")
    flat = lambda t: t.detach().reshape(m).float().numpy()          # noqa: E731
    args = (dy.detach().reshape(m, n).float().numpy(), x.detach().reshape(m, n).float().numpy(),
            None if rms else flat(mean), flat(rstd))
    to = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(x.dtype)   # noqa: E731
    if partial:
        dgp, dbp = partial_sums(*args, partial_grid(m, n), rms=rms)
        dg = sums.reduce(to(dgp), 0, gpu=gpu)
        return dg, (None if rms else sums.reduce(to(dbp), 0, gpu=gpu))
    dg, db = column_sums(*args, block_y=by, rows_per_block=rows, rms=rms)
    return to(dg), (None if rms else to(db))
