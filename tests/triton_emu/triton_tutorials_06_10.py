"""Triton's tutorials 06 (fused attention, forward) and 10 (block-scaled matmul), written
from the tutorials' published source (github.com/triton-lang/triton, python/tutorials/
06-fused-attention.py and 10-block-scaled-matmul.py; https://triton-lang.org/main/
getting-started/tutorials/; the triton wheel does not ship them).

06: FlashAttention-2 forward with block pointers (the tutorial's non-TMA path): one program
per BLOCK_M query rows and (batch, head); q stays loaded; for each BLOCK_N key block
``qk = tl.dot(q, k)``, the scale folded into ``qk_scale = sm_scale * 1.44269504`` (1/ln 2) so
that ``tl.math.exp2`` replaces exp; causal blocks on the diagonal add ``-1e6`` where masked;
running max ``m_i`` and sum ``l_i`` (started at 1.0), ``alpha = exp2(m_i - m_ij)`` rescales
``l_i`` and ``acc``; ``p`` is cast to fp16 for ``acc = tl.dot(p, v, acc)``; the epilogue
stores ``m_i + log2(l_i)`` and ``acc / l_i``.  Autotuned over the tutorial's configs
(BLOCK_M 64/128, BLOCK_N 32/64, num_warps 4/8 minus the small tiles on 8 warps).  The
backward (causal): a preprocess kernel stores ``delta = rowsum(o * do)``; one kernel per
BLOCK_N1 = 128 keys computes dK, dV over the queries (the diagonal block in slices of
BLOCK_M1 / 2 with the mask, then unmasked BLOCK_M1 = 32 steps) and dQ for BLOCK_M2 = 128
queries (slices of BLOCK_N2 / 2 on the diagonal, then BLOCK_N2 = 32 steps), with K
pre-scaled by sm_scale / ln 2 on the host, ``p = exp2(q k^T - M)`` recomputed from the stored
``M``, fp16 casts before each dot, dK times sm_scale and dQ times ln 2 at the end.

10: block-scaled matmul (mxfp8: e4m3 operands, e8m0 scales every VEC_SIZE = 32 along K) with
tensor descriptors for A and B (B given N x K, used transposed) and the scales in the
5-D layout (M // 128, K // VEC_SIZE // 4, 32, 4, 4) loaded as 2-D rows
(USE_2D_SCALE_LOAD), reshaped, permuted (0, 3, 2, 1, 4) and flattened to
(BLOCK_M, BLOCK_K // VEC_SIZE) for ``tl.dot_scaled(a, sa, "e4m3", b.T, sb, "e4m3", acc)``.
Nothing here knows about the emulator."""
import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, start_m, qk_scale,
                    BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
                    CAUSAL: tl.constexpr, offs_m: tl.constexpr, offs_n: tl.constexpr,
                    N_CTX: tl.constexpr):
    diag = start_m * BLOCK_M if CAUSAL else N_CTX      # blocks from here on are masked
    for start_n in range(0, N_CTX, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        qk = tl.dot(q, tl.load(K_block_ptr))
        if start_n >= diag:
            keep = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + tl.where(keep, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(tl.float16), tl.load(V_block_ptr), acc)
        m_i = m_ij
        K_block_ptr = tl.advance(K_block_ptr, (0, BLOCK_N))
        V_block_ptr = tl.advance(V_block_ptr, (BLOCK_N, 0))
    return acc, l_i, m_i


def _keep(conf):
    bm, bn = conf.kwargs["BLOCK_M"], conf.kwargs["BLOCK_N"]
    return not (bm * bn < 128 * 128 and conf.num_warps == 8)


_CONFIGS = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=s, num_warps=w)
            for bm in (64, 128) for bn in (32, 64) for s in (3, 4, 7) for w in (4, 8)]


@triton.autotune(list(filter(_keep, _CONFIGS)), key=["N_CTX", "HEAD_DIM"])
@triton.jit
def _attn_fwd(Q, K, V, sm_scale, M, Out,
              stride_qz, stride_qh, stride_qm, stride_qk,
              stride_kz, stride_kh, stride_kn, stride_kk,
              stride_vz, stride_vh, stride_vk, stride_vn,
              stride_oz, stride_oh, stride_om, stride_on,
              Z, H, N_CTX, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    tl.static_assert(BLOCK_N <= HEAD_DIM)
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off = (off_hz // H).to(tl.int64) * stride_qz + (off_hz % H).to(tl.int64) * stride_qh
    Q_block_ptr = tl.make_block_ptr(Q + off, (N_CTX, HEAD_DIM), (stride_qm, stride_qk),
                                    (start_m * BLOCK_M, 0), (BLOCK_M, HEAD_DIM), (1, 0))
    K_block_ptr = tl.make_block_ptr(K + off, (HEAD_DIM, N_CTX), (stride_kk, stride_kn),
                                    (0, 0), (HEAD_DIM, BLOCK_N), (0, 1))
    V_block_ptr = tl.make_block_ptr(V + off, (N_CTX, HEAD_DIM), (stride_vk, stride_vn),
                                    (0, 0), (BLOCK_N, HEAD_DIM), (1, 0))
    O_block_ptr = tl.make_block_ptr(Out + off, (N_CTX, HEAD_DIM), (stride_om, stride_on),
                                    (start_m * BLOCK_M, 0), (BLOCK_M, HEAD_DIM), (1, 0))
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale
    qk_scale *= 1.44269504
    q = tl.load(Q_block_ptr)
    acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, K_block_ptr, V_block_ptr, start_m,
                                    qk_scale, BLOCK_M, HEAD_DIM, BLOCK_N, CAUSAL, offs_m,
                                    offs_n, N_CTX)
    m_i += tl.math.log2(l_i)
    acc = acc / l_i[:, None]
    tl.store(M + off_hz * N_CTX + offs_m, m_i)
    tl.store(O_block_ptr, acc.to(Out.type.element_ty))


def attention(q, k, v, causal, sm_scale):
    """q, k, v: (Z, H, N_CTX, HEAD_DIM) fp16; returns (out, M = row max + log2 of the sum)."""
    Z, H, N, D = q.shape
    o = torch.empty_like(q)
    M = torch.empty((Z, H, N), dtype=torch.float32)
    grid = lambda META: (triton.cdiv(N, META["BLOCK_M"]), Z * H)   # noqa: E731
    _attn_fwd[grid](q, k, v, sm_scale, M, o, *q.stride(), *k.stride(), *v.stride(),
                    *o.stride(), Z, H, N_CTX=N, HEAD_DIM=D, CAUSAL=causal)
    return o, M


@triton.jit
def _attn_bwd_preprocess(O, DO, Delta, N_CTX, BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    off_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    off_hz = tl.program_id(1)
    off_n = tl.arange(0, HEAD_DIM)
    at = off_hz * HEAD_DIM * N_CTX + off_m[:, None] * HEAD_DIM + off_n[None, :]
    o = tl.load(O + at)
    do = tl.load(DO + at).to(tl.float32)
    tl.store(Delta + off_hz * N_CTX + off_m, tl.sum(o * do, axis=1))


@triton.jit
def _attn_bwd_dkdv(dk, dv, Q, k, v, sm_scale, DO, M, D, stride_tok, stride_d, H, N_CTX,
                   BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr, HEAD_DIM: tl.constexpr,
                   start_n, start_m, num_steps, MASK: tl.constexpr):
    offs_m = start_m + tl.arange(0, BLOCK_M1)
    offs_n = start_n + tl.arange(0, BLOCK_N1)
    offs_k = tl.arange(0, HEAD_DIM)
    qT_ptrs = Q + offs_m[None, :] * stride_tok + offs_k[:, None] * stride_d
    do_ptrs = DO + offs_m[:, None] * stride_tok + offs_k[None, :] * stride_d
    tl.static_assert(BLOCK_N1 % BLOCK_M1 == 0)
    curr_m = start_m
    for blk_idx in range(num_steps):
        qT = tl.load(qT_ptrs)
        offs_m = curr_m + tl.arange(0, BLOCK_M1)
        m = tl.load(M + offs_m)
        pT = tl.math.exp2(tl.dot(k, qT) - m[None, :])    # k is pre-scaled by sm_scale / ln 2
        if MASK:
            pT = tl.where(offs_m[None, :] >= offs_n[:, None], pT, 0.0)
        do = tl.load(do_ptrs)
        dv += tl.dot(pT.to(tl.float16), do)
        Di = tl.load(D + offs_m)
        dpT = tl.dot(v, tl.trans(do)).to(tl.float32)
        dsT = (pT * (dpT - Di[None, :])).to(tl.float16)
        dk += tl.dot(dsT, tl.trans(qT))
        curr_m += BLOCK_M1
        qT_ptrs += BLOCK_M1 * stride_tok
        do_ptrs += BLOCK_M1 * stride_tok
    return dk, dv


@triton.jit
def _attn_bwd_dq(dq, q, K, V, do, m, D, stride_tok, stride_d, H, N_CTX,
                 BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr, HEAD_DIM: tl.constexpr,
                 start_m, start_n, num_steps, MASK: tl.constexpr):
    offs_m = start_m + tl.arange(0, BLOCK_M2)
    offs_n = start_n + tl.arange(0, BLOCK_N2)
    offs_k = tl.arange(0, HEAD_DIM)
    kT_ptrs = K + offs_n[None, :] * stride_tok + offs_k[:, None] * stride_d
    vT_ptrs = V + offs_n[None, :] * stride_tok + offs_k[:, None] * stride_d
    Di = tl.load(D + offs_m)
    tl.static_assert(BLOCK_M2 % BLOCK_N2 == 0)
    curr_n = start_n
    for blk_idx in range(num_steps):
        kT = tl.load(kT_ptrs)
        vT = tl.load(vT_ptrs)
        p = tl.math.exp2(tl.dot(q, kT) - m)
        if MASK:
            offs_n = curr_n + tl.arange(0, BLOCK_N2)
            p = tl.where(offs_m[:, None] >= offs_n[None, :], p, 0.0)
        dp = tl.dot(do, vT).to(tl.float32)
        ds = (p * (dp - Di[:, None])).to(tl.float16)
        dq += tl.dot(ds, tl.trans(kT))               # kT pre-scaled: dq is de-scaled at the end
        curr_n += BLOCK_N2
        kT_ptrs += BLOCK_N2 * stride_tok
        vT_ptrs += BLOCK_N2 * stride_tok
    return dq


@triton.jit
def _attn_bwd(Q, K, V, sm_scale, DO, DQ, DK, DV, M, D, stride_z, stride_h, stride_tok,
              stride_d, H, N_CTX, BLOCK_M1: tl.constexpr, BLOCK_N1: tl.constexpr,
              BLOCK_M2: tl.constexpr, BLOCK_N2: tl.constexpr,
              BLK_SLICE_FACTOR: tl.constexpr, HEAD_DIM: tl.constexpr):
    LN2: tl.constexpr = 0.6931471824645996
    bhid = tl.program_id(2)
    off_chz = (bhid * N_CTX).to(tl.int64)
    adj = (stride_h * (bhid % H) + stride_z * (bhid // H)).to(tl.int64)
    pid = tl.program_id(0)
    Q += adj
    K += adj
    V += adj
    DO += adj
    DQ += adj
    DK += adj
    DV += adj
    M += off_chz
    D += off_chz
    offs_k = tl.arange(0, HEAD_DIM)
    # dK, dV for this program's BLOCK_N1 keys: the diagonal in thin slices, then the rest
    start_n = pid * BLOCK_N1
    start_m = start_n
    MASK_BLOCK_M1: tl.constexpr = BLOCK_M1 // BLK_SLICE_FACTOR
    offs_n = start_n + tl.arange(0, BLOCK_N1)
    dv = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
    dk = tl.zeros([BLOCK_N1, HEAD_DIM], dtype=tl.float32)
    k = tl.load(K + offs_n[:, None] * stride_tok + offs_k[None, :] * stride_d)
    v = tl.load(V + offs_n[:, None] * stride_tok + offs_k[None, :] * stride_d)
    num_steps = BLOCK_N1 // MASK_BLOCK_M1
    dk, dv = _attn_bwd_dkdv(dk, dv, Q, k, v, sm_scale, DO, M, D, stride_tok, stride_d, H,
                            N_CTX, MASK_BLOCK_M1, BLOCK_N1, HEAD_DIM, start_n, start_m,
                            num_steps, MASK=True)
    start_m += num_steps * MASK_BLOCK_M1
    num_steps = (N_CTX - start_m) // BLOCK_M1
    dk, dv = _attn_bwd_dkdv(dk, dv, Q, k, v, sm_scale, DO, M, D, stride_tok, stride_d, H,
                            N_CTX, BLOCK_M1, BLOCK_N1, HEAD_DIM, start_n, start_m, num_steps,
                            MASK=False)
    tl.store(DV + offs_n[:, None] * stride_tok + offs_k[None, :] * stride_d, dv)
    dk *= sm_scale
    tl.store(DK + offs_n[:, None] * stride_tok + offs_k[None, :] * stride_d, dk)
    # dQ for this program's BLOCK_M2 queries: the diagonal in thin slices, then leftwards
    start_m = pid * BLOCK_M2
    end_n = start_m + BLOCK_M2
    MASK_BLOCK_N2: tl.constexpr = BLOCK_N2 // BLK_SLICE_FACTOR
    offs_m = start_m + tl.arange(0, BLOCK_M2)
    q = tl.load(Q + offs_m[:, None] * stride_tok + offs_k[None, :] * stride_d)
    dq = tl.zeros([BLOCK_M2, HEAD_DIM], dtype=tl.float32)
    do = tl.load(DO + offs_m[:, None] * stride_tok + offs_k[None, :] * stride_d)
    m = tl.load(M + offs_m)[:, None]
    num_steps = BLOCK_M2 // MASK_BLOCK_N2
    dq = _attn_bwd_dq(dq, q, K, V, do, m, D, stride_tok, stride_d, H, N_CTX, BLOCK_M2,
                      MASK_BLOCK_N2, HEAD_DIM, start_m, end_n - num_steps * MASK_BLOCK_N2,
                      num_steps, MASK=True)
    end_n -= num_steps * MASK_BLOCK_N2
    num_steps = end_n // BLOCK_N2
    dq = _attn_bwd_dq(dq, q, K, V, do, m, D, stride_tok, stride_d, H, N_CTX, BLOCK_M2,
                      BLOCK_N2, HEAD_DIM, start_m, end_n - num_steps * BLOCK_N2, num_steps,
                      MASK=False)
    dq *= LN2
    tl.store(DQ + offs_m[:, None] * stride_tok + offs_k[None, :] * stride_d, dq)


def attention_backward(q, k, v, o, M, do, sm_scale):
    """The tutorial's backward (causal only, N_CTX a multiple of 128): (dq, dk, dv)."""
    Z, H, N, D = q.shape
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    arg_k = k * (sm_scale * 1.4426950408889634)        # k pre-scaled by sm_scale / ln 2
    delta = torch.empty_like(M)
    _attn_bwd_preprocess[(N // 128, Z * H)](o, do, delta, N, BLOCK_M=128, HEAD_DIM=D)
    _attn_bwd[(N // 128, 1, Z * H)](q, arg_k, v, sm_scale, do, dq, dk, dv, M, delta,
                                     *q.stride(), H, N, BLOCK_M1=32, BLOCK_N1=128,
                                     BLOCK_M2=128, BLOCK_N2=32, BLK_SLICE_FACTOR=2,
                                     HEAD_DIM=D, num_warps=4, num_stages=5)
    return dq, dk, dv


@triton.jit
def block_scaled_matmul_kernel(a_desc, a_scale, b_desc, b_scale, c_desc,
                               M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                               stride_sk: tl.constexpr, stride_sb: tl.constexpr,
                               VEC_SIZE: tl.constexpr, BLOCK_M: tl.constexpr,
                               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    pid_m = pid % num_pid_m
    pid_n = pid // num_pid_m
    offs_am = pid_m * BLOCK_M
    offs_bn = pid_n * BLOCK_N
    offs_k = 0
    offs_sm = (pid_m * (BLOCK_M // 128) + tl.arange(0, BLOCK_M // 128)) % M
    offs_sn = (pid_n * (BLOCK_N // 128) + tl.arange(0, BLOCK_N // 128)) % N
    offs_inner = tl.arange(0, (BLOCK_K // VEC_SIZE // 4) * 32 * 4 * 4)
    a_scale_ptr = a_scale + offs_sm[:, None] * stride_sk + offs_inner[None, :]
    b_scale_ptr = b_scale + offs_sn[:, None] * stride_sk + offs_inner[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([offs_am, offs_k])
        b = b_desc.load([offs_bn, offs_k])
        sa = tl.load(a_scale_ptr).reshape(BLOCK_M // 128, BLOCK_K // VEC_SIZE // 4, 32, 4, 4)
        sb = tl.load(b_scale_ptr).reshape(BLOCK_N // 128, BLOCK_K // VEC_SIZE // 4, 32, 4, 4)
        sa = sa.trans(0, 3, 2, 1, 4).reshape(BLOCK_M, BLOCK_K // VEC_SIZE)
        sb = sb.trans(0, 3, 2, 1, 4).reshape(BLOCK_N, BLOCK_K // VEC_SIZE)
        acc = tl.dot_scaled(a, sa, "e4m3", b.T, sb, "e4m3", acc)
        offs_k += BLOCK_K
        a_scale_ptr += (BLOCK_K // VEC_SIZE // 4) * stride_sb
        b_scale_ptr += (BLOCK_K // VEC_SIZE // 4) * stride_sb
    c_desc.store([offs_am, offs_bn], acc.to(tl.float16))


def unpack_scale(packed):
    """The 5-D scale layout back to (rows, K // VEC_SIZE), as the tutorial's reference does."""
    m, k = packed.shape[:2]
    return packed.permute(0, 3, 2, 1, 4).reshape(m * 128, k * 4)


def block_scaled_matmul(a, a_scale, b, b_scale, BLOCK_M=128, BLOCK_N=128, BLOCK_K=128):
    """mxfp8: a (M, K) and b (N, K) e4m3, scales uint8 e8m0 in the 5-D layout; fp16 out."""
    M, K = a.shape
    N = b.shape[0]
    out = torch.empty((M, N), dtype=torch.float16)
    a_desc = TensorDescriptor.from_tensor(a, [BLOCK_M, BLOCK_K])
    b_desc = TensorDescriptor.from_tensor(b, [BLOCK_N, BLOCK_K])
    c_desc = TensorDescriptor.from_tensor(out, [BLOCK_M, BLOCK_N])
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N), 1)
    block_scaled_matmul_kernel[grid](a_desc, a_scale, b_desc, b_scale, c_desc, M, N, K,
                                     a_scale.stride(0), a_scale.stride(1), 32,
                                     BLOCK_M, BLOCK_N, BLOCK_K)
    return out
