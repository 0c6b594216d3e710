"""Fused attention forward (FlashAttention-style online softmax), one Triton kernel.

For each block of BLOCK_M query rows, over blocks of BLOCK_N keys in ascending order:

    s   = tl.dot(q, k^T) * qk_scale                  # tensor cores, from a zero accumulator
    m'  = max(m, rowmax(s));  p = exp2(s - m')        # base-2 softmax (scale by log2(e) outside)
    l   = l * exp2(m - m') + rowsum(p)
    acc = tl.dot(p.to(v.dtype), v, acc * exp2(m - m'))   # tensor cores, acc as C
    out = div_rn(acc, l)                             # IEEE division, then the output type

``qk_scale`` multiplies the scores before the base-2 exponential (pass
``log2(e) / sqrt(d)`` for the usual softmax).  ``tl.math.div_rn`` keeps the final division
IEEE-exact (``/`` on fp32 is an approximate division on NVIDIA).  Compare a GPU run with the
emulation with ``enable_fp_fusion=False`` (the interpreter does not contract ``a * b + c``
into one FMA; the GPU compiler does by default).  docs/triton.md works this kernel through.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import triton
import triton.language as tl


@triton.jit
def _attn_fwd(q_ptr, k_ptr, v_ptr, o_ptr, qk_scale, N_Q, N_K,
              s_qz, s_qm, s_qd, s_kz, s_kn, s_kd, s_vz, s_vn, s_vd, s_oz, s_om, s_od,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    z = tl.program_id(1).to(tl.int64)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + z * s_qz + offs_m[:, None] * s_qm + offs_d[None, :] * s_qd,
                mask=offs_m[:, None] < N_Q, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for start_n in range(0, N_K, BLOCK_N):
        cols = start_n + offs_n
        kt = tl.load(k_ptr + z * s_kz + cols[None, :] * s_kn + offs_d[:, None] * s_kd,
                     mask=cols[None, :] < N_K, other=0.0)
        s = tl.dot(q, kt) * qk_scale
        valid = cols[None, :] < N_K
        if CAUSAL:
            valid = valid & (cols[None, :] <= offs_m[:, None])
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + z * s_vz + cols[:, None] * s_vn + offs_d[None, :] * s_vd,
                    mask=cols[:, None] < N_K, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    out = tl.math.div_rn(acc, l_i[:, None])
    tl.store(o_ptr + z * s_oz + offs_m[:, None] * s_om + offs_d[None, :] * s_od,
             out.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < N_Q)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
              qk_scale: Optional[float] = None, causal: bool = False, block_m: int = 64,
              block_n: int = 64, num_warps: int = 4, num_stages: int = 2,
              enable_fp_fusion: bool = True) -> torch.Tensor:
    """softmax(q k^T * scale) v for q (Z, Nq, D), k and v (Z, Nk, D) in fp16 or bf16
    (2-D tensors are one head).  ``qk_scale`` multiplies the scores before ``exp2``; None:
    ``log2(e) / sqrt(D)`` (the usual softmax).  D must be a power of two >= 16."""
    squeeze = q.dim() == 2
    q3, k3, v3 = (t.unsqueeze(0) if squeeze else t for t in (q, k, v))
    if q3.dim() != 3 or k3.shape != v3.shape or q3.shape[0] != k3.shape[0] \
            or q3.shape[2] != k3.shape[2]:
        raise ValueError(f"triton_kernels.attention: q (Z, Nq, D), k and v (Z, Nk, D); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.dtype not in (torch.float16, torch.bfloat16) or k.dtype != q.dtype \
            or v.dtype != q.dtype:
        raise TypeError("triton_kernels.attention: q, k, v must all be float16 or all bfloat16")
    Z, Nq, D = q3.shape
    Nk = k3.shape[1]
    if D < 16 or D & (D - 1):
        raise ValueError(f"triton_kernels.attention: head dim {D} must be a power of two >= 16")
    if Nk == 0:
        raise ValueError("triton_kernels.attention: no keys")
    scale = math.log2(math.e) / math.sqrt(D) if qk_scale is None else float(qk_scale)
    o = torch.empty_like(q3)
    grid = (triton.cdiv(Nq, block_m), Z)
    _attn_fwd[grid](q3, k3, v3, o, scale, Nq, Nk, *q3.stride(), *k3.stride(), *v3.stride(),
                    *o.stride(), HEAD_DIM=D, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal,
                    num_warps=num_warps, num_stages=num_stages,
                    enable_fp_fusion=enable_fp_fusion)
    return o[0] if squeeze else o
