"""layer_norm's input gradient as torch 2.13's CUDA kernels compute it:
``layer_norm_grad_input_kernel_vectorized<T, float, false>`` (N % 4 == 0, dY / X / gamma /
dX 4-element aligned, fp32 / fp16 / bf16) and ``layer_norm_grad_input_kernel<T, float,
false>`` otherwise (aten/src/ATen/native/cuda/layer_norm_kernel.cu).  One CTA of 128
threads (``num_threads()``) per row; both kernels give the same bits:

* first pass, thread ``t`` takes the 4-element groups ``t, t + 128, ...`` (the unvectorised
  kernel's ``unroll = 4`` loop: the same groups; its tail ``N % 4`` elements go, in order, to
  the thread whose next group they would start) and per element, in float::

      p  = dy * gamma                      (FMUL; gamma absent: p = dy)
      s1 = s1 + p                          (FADD, not contracted: p is used twice)
      s2 = fma(p * (x - mean), rstd, s2)

* ``cuda_utils::BlockReduceSum`` of s1 and of s2 (``shfl_down`` 16..1 in each of the 4
  warps, then warp 0 over the 4 warp sums and 28 zeros:
  :func:`torch_mma_emu.aten_cuda.host_softmax.block_reduce`);
* second pass, per element: ``fH = float(N)``, ``term1 = rcp.rn(fH) * rstd``,
  ``f = fma(fH * gamma, dy, -(((x - mean) * rstd) * s2))``, ``f = f - s1``,
  ``dX = term1 * f`` rounded once to T.

The contractions are those of the wheel's sm_90 SASS (cuobjdump of libtorch_cuda.so, torch
2.13.0+cu130: FMUL / FADD / FFMA of both kernels and all three dtypes; counted in
sass_facts.json's ``layer_norm_grad_input`` by scripts/regen_aten_cuda_facts.py) and of nvcc 13.0
(tests/data/aten_math/layer_norm_backward.cu): nvcc's PTX keeps ``(fH * gamma) * dy`` and the
subtraction apart (``mul.f32`` / ``sub.f32``) and ptxas fuses them into the FFMA above.
The ``rms_norm = true`` instances (``_fused_rms_norm_backward``'s dX, the same SASS pattern:
``s2 = fma((dy * gamma) * x, rstd, s2)``, ``dX = term1 * fma(fH * gamma, dy, -((x * rstd) *
s2))``) are :func:`grad_input` with ``rms=True``.  gamma / beta gradients
(``GammaBetaBackwardCUDAKernelTemplate``) are not modelled here.
"""
from __future__ import annotations

import numpy as np
import torch

from ..gpu_math import ieee
from . import host_softmax
from .config import FLOATS as _FLOATS

__all__ = ["THREADS", "VEC", "KERNELS", "vectorized", "kernel_name", "row_sums",
           "grad_input", "layer_norm_grad_input"]

THREADS = 128          # num_threads(): a 1-D block of 4 warps
VEC = 4                # vec_size (and compute_gI's unroll)
KERNELS = ("layer_norm_grad_input_kernel_vectorized", "layer_norm_grad_input_kernel")
_F = np.float32


def vectorized(n: int, dtype: torch.dtype, *tensors) -> bool:
    """Whether rows of ``n`` run the vectorised kernel: fp32 / fp16 / bf16, ``n % 4 == 0``
    and every given tensor (dY, X, gamma; dX is a fresh allocation) 4-element aligned by
    its storage offset (the allocator's base is 512-byte aligned)."""
    if dtype not in _FLOATS or n <= 0 or n % VEC:
        return False
    return all(t.storage_offset() % VEC == 0 for t in tensors if t is not None)


def kernel_name(n: int, dtype: torch.dtype, *tensors, rms: bool = False) -> str:
    k = KERNELS[0] if vectorized(n, dtype, *tensors) else KERNELS[1]
    return f"{k}<rms_norm = {str(rms).lower()}>: 128 threads per row of {n}"


def row_sums(DY, X, mean, rstd, gamma=None, *, rms: bool = False):
    """The first pass and the block reduction on float32 rows ``DY``, ``X`` [rows, N] with
    per-row ``mean``, ``rstd`` [rows] and ``gamma`` [N] (or None): ``(s1, s2)`` [rows]
    (rms_norm: ``t = p * x``, ``mean`` unused and ``s1`` zeros)."""
    DY, X = np.asarray(DY, _F), np.asarray(X, _F)
    R, N = X.shape
    m = np.asarray(mean, _F)[:, None]
    r = np.asarray(rstd, _F)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        # the per-element terms first (no dependence between elements), then each thread's
        # running sums: p = dy * gamma, t = p * (x - mean)
        P = DY if gamma is None else (DY * np.asarray(gamma, _F)[None]).astype(_F, copy=False)
        T = (P * (X if rms else (X - m).astype(_F, copy=False))).astype(_F, copy=False)
    groups = -(-N // VEC)
    K = -(-groups // THREADS)
    width = K * THREADS * VEC

    def lay(A):          # [R, N] -> [K, VEC, R, THREADS]: element 4 (t + 128 k) + i
        if width != N:
            Z = np.zeros((R, width), _F)
            Z[:, :N] = A
            A = Z
        return np.ascontiguousarray(A.reshape(R, K, THREADS, VEC).transpose(1, 3, 0, 2))
    p, t = lay(P), lay(T)
    live = (np.arange(width) < N).reshape(K, THREADS, VEC)
    s1 = np.zeros((R, THREADS), _F)
    s2 = np.zeros((R, THREADS), _F)
    with np.errstate(over="ignore", invalid="ignore"):
        for k in range(K):
            for i in range(VEC):
                n1 = (s1 + p[k, i]).astype(_F, copy=False)
                n2 = ieee.fma(t[k, i], r, s2)
                if live[k, :, i].all():
                    s1, s2 = n1, n2
                else:
                    on = live[k, :, i][None, :]
                    s1, s2 = np.where(on, n1, s1), np.where(on, n2, s2)
    return host_softmax.block_reduce(s1), host_softmax.block_reduce(s2)


def grad_input(DY, X, mean, rstd, gamma=None, *, rms: bool = False) -> np.ndarray:
    """dX of float32 rows (before the store's rounding to T); rms_norm (the ``rms_norm =
    true`` instances): ``x`` in place of ``x - mean`` and no ``- s1``."""
    DY, X = np.asarray(DY, _F), np.asarray(X, _F)
    R, N = X.shape
    s1, s2 = row_sums(DY, X, mean, rstd, gamma, rms=rms)
    m = np.asarray(mean, _F)[:, None]
    r = np.asarray(rstd, _F)[:, None]
    fH = _F(N)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        term1 = ((_F(1) / fH) * r).astype(_F, copy=False)
        a = (((X if rms else (X - m).astype(_F, copy=False)) * r).astype(_F, copy=False)
             * s2[:, None]).astype(_F, copy=False)
        gh = np.full((1, N), fH, _F) if gamma is None else \
            (fH * np.asarray(gamma, _F)[None]).astype(_F, copy=False)
        f = ieee.fma(gh, DY, -a)
        if not rms:
            f = (f - s1[:, None]).astype(_F, copy=False)
        return (term1 * f).astype(_F, copy=False)


def layer_norm_grad_input(dy: torch.Tensor, x: torch.Tensor, n: int, mean, rstd,
                          gamma=None, *, rms: bool = False) -> torch.Tensor:
    """``native_layer_norm_backward``'s dX: ``dy``, ``x`` of one floating dtype (fp32 / fp16
    / bf16) whose trailing elements form rows of ``n``; ``mean`` / ``rstd`` the forward's
    float statistics (one per row, any shape); ``gamma`` of ``n`` elements or None.
    ``rms``: ``_fused_rms_norm_backward``'s dX (``mean`` is ignored and may be None)."""
    if x.dtype not in _FLOATS or dy.dtype != x.dtype:
        raise TypeError(f"the layer_norm backward model takes fp32, fp16 or bf16 dy and x of "
                        f"one dtype, got {dy.dtype} and {x.dtype}")
    if dy.shape != x.shape or n <= 0 or x.numel() % n:
        raise ValueError(f"dy {list(dy.shape)} and x {list(x.shape)} must have one shape "
                         f"made of rows of {n}")
    rows = x.numel() // n
    mean = rstd if rms else mean
    for t, name, k in ((mean, "mean", rows), (rstd, "rstd", rows), (gamma, "gamma", n)):
        if t is not None and t.numel() != k:
            raise ValueError(f"{name} must have {k} elements, got {t.numel()}")
    flat = lambda t, k: t.detach().reshape(k).float().numpy()          # noqa: E731
    out = grad_input(dy.detach().reshape(rows, n).float().numpy(),
                     x.detach().reshape(rows, n).float().numpy(),
                     flat(mean, rows), flat(rstd, rows),
                     None if gamma is None else flat(gamma, n), rms=rms)
    return torch.from_numpy(out).reshape(x.shape).to(x.dtype)
