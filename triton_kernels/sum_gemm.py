"""An fp32 GEMM written without ``tl.dot``: each K block is a broadcast multiply and a sum,

    acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)

as kernels written for small tiles often do.  Triton's compiler (TTIR combine pass) turns the
sum into ``tl.dot(a, b)`` with input precision tf32 (M and N >= 16) and then folds the
``+=`` into it: on the GPU the K loop is a chain of tf32 tensor-core dots with acc as C
(mma.sync for 32 x 32 tiles, wgmma for 64 x 64 on sm90; xf32 MFMA on gfx942), not the exact
products and fp32 sums the source suggests (docs/triton.md, "What the compiler does to dots
first").  Checked against the TTGIR (tests/triton_emu/test_triton_combine.py) and on the GPU
(scripts/gpu/triton_emulate.py).
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl


@triton.jit
def _sum_gemm_kernel(a_ptr, b_ptr, c_ptr, d_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                     s_dm, s_dn, HAS_C: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    n_tiles = (N + BLOCK_N - 1) // BLOCK_N
    offs_m = (pid // n_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (pid % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < N
    out_ok = m_ok[:, None] & n_ok[None, :]
    if HAS_C:
        acc = tl.load(c_ptr + offs_m[:, None] * s_cm + offs_n[None, :] * s_cn, mask=out_ok,
                      other=0.0)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = offs_k < K - k0
        a = tl.load(a_ptr + offs_m[:, None] * s_am + (k0 + offs_k)[None, :] * s_ak,
                    mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptr + (k0 + offs_k)[:, None] * s_bk + offs_n[None, :] * s_bn,
                    mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)
    tl.store(d_ptr + offs_m[:, None] * s_dm + offs_n[None, :] * s_dn, acc, mask=out_ok)


def sum_matmul(A: torch.Tensor, B: torch.Tensor, C: Optional[torch.Tensor] = None, *,
               block_m: int = 32, block_n: int = 32, block_k: int = 16,
               num_warps: int = 4) -> torch.Tensor:
    """``D = C + A @ B`` for fp32 2-D ``A`` (M, K), ``B`` (K, N), ``C`` None or (M, N), by
    broadcast multiply-and-sum per K block (which the GPU computes as tf32 dots)."""
    for name, t in (("A", A), ("B", B)) + ((("C", C),) if C is not None else ()):
        if t.dtype != torch.float32 or t.dim() != 2:
            raise TypeError(f"triton_kernels.sum_matmul: {name} must be a 2-D float32 tensor, "
                            f"got {tuple(t.shape)} {t.dtype}")
    M, K = A.shape
    if B.shape[0] != K or (C is not None and tuple(C.shape) != (M, B.shape[1])):
        raise ValueError(f"triton_kernels.sum_matmul: shapes do not fit: A {tuple(A.shape)}, "
                         f"B {tuple(B.shape)}, C {None if C is None else tuple(C.shape)}")
    N = B.shape[1]
    D = torch.empty((M, N), dtype=torch.float32, device=A.device)
    Cx = D if C is None else C
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    _sum_gemm_kernel[grid](A, B, Cx, D, M, N, K, *A.stride(), *B.stride(), *Cx.stride(),
                           *D.stride(), HAS_C=C is not None, BLOCK_M=block_m, BLOCK_N=block_n,
                           BLOCK_K=block_k, num_warps=num_warps)
    return D
