"""Block-scaled GEMM with ``tl.dot_scaled``: MXFP8 (e4m3 / e5m2) and MXFP4 (e2m1) operands
with one E8M0 scale per 32 elements along K.

    acc = 0;  for k-block ascending:  acc = tl.dot_scaled(a, sa, FMT, b, sb, FMT, acc)

On Blackwell (sm100) each call is ``tcgen05.mma`` ``kind::mxf8f6f4`` (fp8) or ``kind::mxf4``
(fp4) block_scale; on Hopper and Ampere Triton decomposes it into a bf16 dot of the
operands multiplied by their scales (docs/triton.md).

Layouts (Triton's): A (M, K) fp8 or (M, K/2) uint8 with two e2m1 codes per byte (the low
nibble first), scale_a (M, K/32) uint8; B (K, N) fp8 or (K/2, N) uint8, scale_b (N, K/32).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

FMTS = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2, "e2m1": torch.uint8}


@triton.jit
def _scaled_kernel(a_ptr, sa_ptr, b_ptr, sb_ptr, d_ptr, M, N, K, s_am, s_ak, s_sam, s_sak,
                   s_bk, s_bn, s_sbn, s_sbk, s_dm, s_dn, FMT: tl.constexpr, ZERO: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    PACK: tl.constexpr = 2 if FMT == "e2m1" else 1
    pid = tl.program_id(0)
    n_tiles = tl.cdiv(N, BLOCK_N)
    offs_m = (pid // n_tiles) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = (pid % n_tiles) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_kp = tl.arange(0, BLOCK_K // PACK)
    offs_s = tl.arange(0, BLOCK_K // 32)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kp = k0 // PACK + offs_kp
        ks = k0 // 32 + offs_s
        a = tl.load(a_ptr + offs_m[:, None] * s_am + kp[None, :] * s_ak,
                    mask=(offs_m[:, None] < M) & (kp[None, :] < K // PACK), other=ZERO)
        b = tl.load(b_ptr + kp[:, None] * s_bk + offs_n[None, :] * s_bn,
                    mask=(kp[:, None] < K // PACK) & (offs_n[None, :] < N), other=ZERO)
        sa = tl.load(sa_ptr + offs_m[:, None] * s_sam + ks[None, :] * s_sak,
                     mask=(offs_m[:, None] < M) & (ks[None, :] < K // 32), other=127)
        sb = tl.load(sb_ptr + offs_n[:, None] * s_sbn + ks[None, :] * s_sbk,
                     mask=(offs_n[:, None] < N) & (ks[None, :] < K // 32), other=127)
        acc = tl.dot_scaled(a, sa, FMT, b, sb, FMT, acc)
    tl.store(d_ptr + offs_m[:, None] * s_dm + offs_n[None, :] * s_dn, acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def scaled_matmul(A: torch.Tensor, scale_a: torch.Tensor, B: torch.Tensor,
                  scale_b: torch.Tensor, fmt: str, *, block_m: int = 128, block_n: int = 128,
                  block_k: int = 128, num_warps: int = 4) -> torch.Tensor:
    """``(A * 2**(scale_a - 127)) @ (B * 2**(scale_b - 127))`` in fp32 through
    ``tl.dot_scaled``; ``fmt`` "e4m3", "e5m2" (MXFP8) or "e2m1" (MXFP4, packed uint8).
    K must be a multiple of ``block_k`` (a multiple of 64)."""
    if fmt not in FMTS:
        raise ValueError(f"triton_kernels.scaled_matmul: fmt={fmt!r}; allowed: {', '.join(FMTS)}")
    pack = 2 if fmt == "e2m1" else 1
    if A.dtype != FMTS[fmt] or B.dtype != FMTS[fmt]:
        raise TypeError(f"triton_kernels.scaled_matmul: {fmt} takes {FMTS[fmt]} operands, got "
                        f"{A.dtype} and {B.dtype}")
    M, K = A.shape[0], A.shape[1] * pack
    N = B.shape[1]
    if B.shape[0] * pack != K:
        raise ValueError(f"triton_kernels.scaled_matmul: K differs: A {tuple(A.shape)}, "
                         f"B {tuple(B.shape)} ({fmt})")
    if block_k % 64 or K % block_k:
        raise ValueError(f"triton_kernels.scaled_matmul: K = {K} must be a multiple of "
                         f"block_k = {block_k}, a multiple of 64")
    if scale_a.shape != (M, K // 32) or scale_b.shape != (N, K // 32) \
            or scale_a.dtype != torch.uint8 or scale_b.dtype != torch.uint8:
        raise ValueError(f"triton_kernels.scaled_matmul: scales uint8 (M, K/32) = "
                         f"{(M, K // 32)} and (N, K/32) = {(N, K // 32)}; got "
                         f"{tuple(scale_a.shape)} {scale_a.dtype}, {tuple(scale_b.shape)} "
                         f"{scale_b.dtype}")
    D = torch.empty((M, N), dtype=torch.float32, device=A.device)
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    _scaled_kernel[grid](A, scale_a, B, scale_b, D, M, N, K, *A.stride(), *scale_a.stride(),
                         *B.stride(), *scale_b.stride(), *D.stride(), FMT=fmt,
                         ZERO=0 if fmt == "e2m1" else 0.0,
                         BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
                         num_warps=num_warps)
    return D
