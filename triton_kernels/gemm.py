"""One Triton GEMM kernel for every tensor-core input format, written as the model's chain.

    D[b] = C[b] + A[b] @ B[b]      acc = C (c_mode="chain") or 0 (c_mode="epilogue");
                                   for k-block in ascending order: acc = tl.dot(a, b, acc);
                                   D = acc (chain) or acc + C in the output type (epilogue)

No split-K and no reordering: Triton lowers ``tl.dot(a, b, acc)`` to a sequence of MMA
instructions (mma.sync on sm80/sm89, wgmma on sm90) along K in ascending order, each taking
the running accumulator, which is the chain of docs/model.md ("The GEMM chain").  On sm90
fp8 Triton keeps the whole accumulation in the wgmma accumulator (its max_num_imprecise_acc
default is 2**30 there: no fp32 promotion), which is what the hardware model describes.

The tail of K is zero-padded inside the last block.  ``block_k_for`` picks a K block whose
padded tail holds no instruction that is all zeros (such an instruction is one more
elementary operation on the accumulator; for the NVIDIA specs it leaves the accumulator
unchanged, but the choice keeps the chain identical to the model by construction).  Where
Triton's smallest dot (16 deep) forbids that (tf32 with K % 16 in 1..8, the fp32 FMA path),
``run_k`` says how deep the chain really runs, so the emulator can run the same chain.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

# format -> (torch dtype of the operands, tl.dot input_precision, K of one MMA instruction,
#            allowed output dtypes)
FORMATS = {
    "fp16": (torch.float16, None, 16, (torch.float32, torch.float16)),
    "bf16": (torch.bfloat16, None, 16, (torch.float32,)),
    "tf32": (torch.float32, "tf32", 8, (torch.float32,)),
    "fp32": (torch.float32, "ieee", 1, (torch.float32,)),  # FMA chain on the CUDA cores
    # Triton's splits of fp32 operands into several tensor-core dots (F32DotTC)
    "tf32x3": (torch.float32, "tf32x3", 8, (torch.float32,)),
    "bf16x3": (torch.float32, "bf16x3", 16, (torch.float32,)),
    "bf16x6": (torch.float32, "bf16x6", 16, (torch.float32,)),
    "fp8_e4m3": (torch.float8_e4m3fn, None, 32, (torch.float32, torch.float16)),
    "fp8_e5m2": (torch.float8_e5m2, None, 32, (torch.float32, torch.float16)),
}


def block_k_for(K: int, instr_k: int) -> int:
    """The largest K block (64, 32 or 16) whose zero-padded tail holds no all-zero instruction."""
    cands = [bk for bk in (64, 32, 16) if bk >= instr_k]
    r = K % cands[0] if K else 0
    for bk in cands:
        r = K % bk
        if r == 0 or -(-r // instr_k) * instr_k == bk:
            return bk
    return cands[-1]


def run_k(K: int, in_format: str, block_k: Optional[int] = None) -> int:
    """The K the kernel's chain really runs: K zero-padded to whole K blocks.

    Triton's smallest dot is 16 deep, so a tf32 product (k8 instructions) with K % 16 in
    1..8 runs one more, all-zero instruction, and the fp32 FMA path runs the padded FMAs
    too.  Such steps can only turn a -0 result into +0.  ``emulated_mm`` on A and B
    zero-padded to ``run_k(K, fmt)`` runs exactly the chain the kernel runs."""
    if K <= 0:
        return 0
    bk = block_k or block_k_for(K, max(FORMATS[in_format][2], 8))
    return -(-K // bk) * bk


@triton.jit
def _gemm_kernel(a_ptr, b_ptr, c_ptr, d_ptr, M, N, K,
                 s_ab, s_am, s_ak, s_bb, s_bk, s_bn, s_cb, s_cm, s_cn, s_db, s_dm, s_dn,
                 HAS_C: tl.constexpr, C_IN_ACC: tl.constexpr, ACC_FP16: tl.constexpr,
                 PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, INTERP_UPCAST: tl.constexpr,
                 MAX_IMPRECISE: tl.constexpr = None, PLUS_EQ: tl.constexpr = False):
    pid = tl.program_id(0)
    bat = tl.program_id(1).to(tl.int64)
    n_tiles = (N + BLOCK_N - 1) // BLOCK_N
    pid_m = pid // n_tiles
    pid_n = pid % n_tiles
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    m_ok = offs_m < M
    n_ok = offs_n < N
    out_ok = m_ok[:, None] & n_ok[None, :]
    acc_ty = tl.float16 if ACC_FP16 else tl.float32
    c_ptrs = c_ptr + bat * s_cb + offs_m[:, None].to(tl.int64) * s_cm + offs_n[None, :] * s_cn
    if HAS_C and C_IN_ACC:
        acc = tl.load(c_ptrs, mask=out_ok, other=0.0).to(acc_ty)
    else:
        acc = tl.full((BLOCK_M, BLOCK_N), 0, dtype=acc_ty)
    a_ptrs = a_ptr + bat * s_ab + offs_m[:, None].to(tl.int64) * s_am + offs_k[None, :] * s_ak
    b_ptrs = b_ptr + bat * s_bb + offs_k[:, None].to(tl.int64) * s_bk + offs_n[None, :] * s_bn
    for k0 in range(0, K, BLOCK_K):
        k_ok = offs_k < K - k0
        a = tl.load(a_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & n_ok[None, :], other=0.0)
        if INTERP_UPCAST:  # Triton's interpreter multiplies bf16 bit patterns as integers
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        if PLUS_EQ:       # Triton's compiler folds the addition into the dot (acc as C)
            acc += tl.dot(a, b, input_precision=PRECISION, out_dtype=acc_ty,
                          max_num_imprecise_acc=MAX_IMPRECISE)
        else:
            acc = tl.dot(a, b, acc, input_precision=PRECISION, out_dtype=acc_ty,
                         max_num_imprecise_acc=MAX_IMPRECISE)
        a_ptrs += BLOCK_K * s_ak
        b_ptrs += BLOCK_K * s_bk
    if HAS_C and not C_IN_ACC:
        acc = acc + tl.load(c_ptrs, mask=out_ok, other=0.0).to(acc_ty)
    d_ptrs = d_ptr + bat * s_db + offs_m[:, None].to(tl.int64) * s_dm + offs_n[None, :] * s_dn
    tl.store(d_ptrs, acc, mask=out_ok)


def _fmt_of(t: torch.Tensor, in_format: Optional[str]) -> str:
    if in_format is not None:
        if in_format not in FORMATS:
            raise ValueError(f"triton_kernels.matmul: in_format={in_format!r} is not supported; "
                             f"supported: {', '.join(FORMATS)}")
        if FORMATS[in_format][0] != t.dtype:
            raise TypeError(f"triton_kernels.matmul: in_format={in_format!r} takes "
                            f"{FORMATS[in_format][0]} tensors, got {t.dtype}")
        return in_format
    for name, (dt, *_rest) in FORMATS.items():
        if dt == t.dtype and dt != torch.float32:
            return name
    if t.dtype == torch.float32:
        raise ValueError("triton_kernels.matmul: float32 inputs need in_format='tf32' (tensor "
                         "cores), 'fp32' (IEEE FMA on the CUDA cores) or a split: 'tf32x3', "
                         "'bf16x3', 'bf16x6'")
    raise TypeError(f"triton_kernels.matmul: unsupported dtype {t.dtype}; supported: float16, "
                    "bfloat16, float32 (tf32/fp32), float8_e4m3fn, float8_e5m2")


def matmul(A: torch.Tensor, B: torch.Tensor, C: Optional[torch.Tensor] = None, *,
           in_format: Optional[str] = None, out_dtype: Optional[torch.dtype] = None,
           c_mode: str = "chain", block_m: int = 64, block_n: int = 64,
           block_k: Optional[int] = None, num_warps: int = 4, num_stages: int = 3,
           max_num_imprecise_acc: Optional[int] = None,
           dot_form: str = "chain") -> torch.Tensor:
    """``D = C + A @ B`` on the tensor cores through one Triton kernel (no split-K).

    A (Bt, M, K) or (M, K); B (Bt, K, N) or (K, N); C None or broadcastable to (Bt, M, N)
    in any floating dtype (converted to ``out_dtype``).  Any strides.  ``in_format``: "fp16",
    "bf16", "tf32", "fp32", "fp8_e4m3", "fp8_e5m2" (from the dtype when None; float32 needs
    it; "fp8_e4m3,fp8_e5m2" mixes fp8 formats).  ``out_dtype``: float32 (default) or float16
    (fp16 and fp8 inputs: the fp16 accumulator of the instruction).  ``c_mode``: "chain"
    (C is the initial accumulator) or "epilogue" (accumulate from 0, add C at the end).
    ``max_num_imprecise_acc``: Triton's fp8 option (Hopper: products summed in the wgmma
    accumulator before each fp32 promotion; None: Triton's default, no promotion); the
    presets ``triton_fp8_hopper_imprecise_acc_*`` model it.  ``dot_form``: how the K loop is
    written, "chain" (``acc = tl.dot(a, b, acc)``) or "plus_eq" (``acc += tl.dot(a, b)``,
    which Triton's compiler turns into the chain, except for fp8 on Hopper with
    ``max_num_imprecise_acc`` not 0: there the dot starts from 0 and is added to acc).
    """
    if c_mode not in ("chain", "epilogue"):
        raise ValueError(f"triton_kernels.matmul: c_mode must be 'chain' or 'epilogue', got {c_mode!r}")
    if dot_form not in ("chain", "plus_eq"):
        raise ValueError("triton_kernels.matmul: dot_form must be 'chain' or 'plus_eq', got "
                         f"{dot_form!r}")
    fa_name, _, fb_name = (in_format or "").partition(",")
    fa = _fmt_of(A, fa_name or None)
    fb = _fmt_of(B, (fb_name or fa_name) or None)
    if fa != fb and not (fa.startswith("fp8") and fb.startswith("fp8")):
        raise ValueError(f"triton_kernels.matmul: A and B formats differ ({fa} x {fb}); only "
                         "fp8 formats mix")
    _, precision, instr_k, outs = FORMATS[fa]
    odt = out_dtype or torch.float32
    if odt not in outs:
        raise ValueError(f"triton_kernels.matmul: {fa} inputs accumulate in "
                         f"{', '.join(map(str, outs))}, not {odt}")
    if not (A.is_cuda or _interpreting()):
        raise RuntimeError("triton_kernels.matmul needs CUDA tensors (or a "
                           "torch_mma_emu.triton.emulate block, or TRITON_INTERPRET=1)")
    squeeze = A.dim() == 2 and B.dim() == 2
    A3 = A if A.dim() == 3 else A.unsqueeze(0)
    B3 = B if B.dim() == 3 else B.unsqueeze(0)
    if A3.dim() != 3 or B3.dim() != 3:
        raise ValueError("triton_kernels.matmul: A and B must be 2-D or 3-D")
    Bt = max(A3.shape[0], B3.shape[0])
    M, K = A3.shape[1:]
    K2, N = B3.shape[1:]
    if K != K2:
        raise ValueError(f"triton_kernels.matmul: K differs: {tuple(A.shape)} @ {tuple(B.shape)}")
    A3 = A3.expand(Bt, M, K)
    B3 = B3.expand(Bt, K, N)
    if Bt > 65535:
        raise ValueError("triton_kernels.matmul: at most 65535 batch elements per call")
    D = torch.empty((Bt, M, N), dtype=odt, device=A.device)
    if C is not None:
        C3 = C.to(odt).broadcast_to((Bt, M, N))
    else:
        C3 = D  # never read
    if D.numel() == 0:
        return D[0] if squeeze else D
    bk = block_k or block_k_for(K, max(instr_k, 8))
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n), Bt)
    _gemm_kernel[grid](
        A3, B3, C3, D, M, N, K,
        A3.stride(0), A3.stride(1), A3.stride(2), B3.stride(0), B3.stride(1), B3.stride(2),
        C3.stride(0), C3.stride(1), C3.stride(2), D.stride(0), D.stride(1), D.stride(2),
        HAS_C=C is not None, C_IN_ACC=c_mode == "chain", ACC_FP16=odt == torch.float16,
        PRECISION=precision, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=bk,
        INTERP_UPCAST=_plain_interpreter() and fa == "bf16", MAX_IMPRECISE=max_num_imprecise_acc,
        PLUS_EQ=dot_form == "plus_eq",
        num_warps=num_warps, num_stages=num_stages)
    return D[0] if squeeze else D


def _interpreting() -> bool:
    """The launch runs in Triton's interpreter: a torch_mma_emu.triton block or
    TRITON_INTERPRET=1."""
    import os
    from torch_mma_emu.triton import active
    return active() or os.environ.get("TRITON_INTERPRET", "0") == "1"


def _plain_interpreter() -> bool:
    """NumPy computes tl.dot (TRITON_INTERPRET=1 or an interpret() block, no emulate block):
    its bf16 dot multiplies bit patterns as integers, so the kernel upcasts bf16 there."""
    from torch_mma_emu.triton import emulating
    return _interpreting() and not emulating()
