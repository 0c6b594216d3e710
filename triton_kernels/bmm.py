"""Batched GEMM with a 3-D ``tl.dot``: one program multiplies BLOCK_B matrices at once.

    D[b] = A[b] @ B[b]          acc (BLOCK_B, BLOCK_M, BLOCK_N) = 0;
                                for k-block ascending: acc = tl.dot(a, b, acc)

Unlike ``gemm.matmul`` (2-D dots, the batch on the grid), a 3-D dot is never a warp-group
instruction: Triton lowers it to ``mma.sync`` on Hopper and Blackwell too (supportMMA: no
MMAv3 / MMAv5 for rank 3), so on sm90 fp8 operands are converted to fp16 first and the
product takes the fp16 instruction's arithmetic (docs/triton.md).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _bmm_kernel(a_ptr, b_ptr, d_ptr, Bt, M, N, K, s_ab, s_am, s_ak, s_bb, s_bk, s_bn,
                s_db, s_dm, s_dn, BLOCK_B: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(N, BLOCK_N)
    offs_b = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    offs_m = (pid // n_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (pid % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    ob = offs_b[:, None, None].to(tl.int64)
    b_ok = offs_b[:, None, None] < Bt
    acc = tl.zeros((BLOCK_B, BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        a = tl.load(a_ptr + ob * s_ab + offs_m[None, :, None] * s_am + kk[None, None, :] * s_ak,
                    mask=b_ok & (offs_m[None, :, None] < M) & (kk[None, None, :] < K),
                    other=0.0)
        b = tl.load(b_ptr + ob * s_bb + kk[None, :, None] * s_bk + offs_n[None, None, :] * s_bn,
                    mask=b_ok & (kk[None, :, None] < K) & (offs_n[None, None, :] < N),
                    other=0.0)
        acc = tl.dot(a, b, acc)
    ok = b_ok & (offs_m[None, :, None] < M) & (offs_n[None, None, :] < N)
    tl.store(d_ptr + ob * s_db + offs_m[None, :, None] * s_dm + offs_n[None, None, :] * s_dn,
             acc, mask=ok)


def bmm(A: torch.Tensor, B: torch.Tensor, *, block_b: int = 2, block_m: int = 32,
        block_n: int = 32, block_k: int = 32, num_warps: int = 4) -> torch.Tensor:
    """``A @ B`` for A (Bt, M, K) and B (Bt, K, N) in fp16, bf16 or fp8 (e4m3 / e5m2), fp32
    result, through 3-D ``tl.dot`` calls.  Tile sizes are powers of two (block_k >= 16;
    >= 32 for fp8)."""
    if A.dim() != 3 or B.dim() != 3 or A.shape[0] != B.shape[0] or A.shape[2] != B.shape[1]:
        raise ValueError(f"triton_kernels.bmm: A (Bt, M, K) and B (Bt, K, N); got "
                         f"{tuple(A.shape)} and {tuple(B.shape)}")
    allowed = (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)
    if A.dtype not in allowed or B.dtype not in allowed:
        raise TypeError(f"triton_kernels.bmm: dtypes {A.dtype} x {B.dtype}; allowed: "
                        "float16, bfloat16, float8_e4m3fn, float8_e5m2")
    Bt, M, K = A.shape
    N = B.shape[2]
    D = torch.zeros((Bt, M, N), dtype=torch.float32, device=A.device)
    if D.numel() == 0 or K == 0:
        return D
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n), triton.cdiv(Bt, block_b))
    _bmm_kernel[grid](A, B, D, Bt, M, N, K, *A.stride(), *B.stride(), *D.stride(),
                      BLOCK_B=block_b, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                      num_warps=num_warps)
    return D
