"""One-dot Triton kernels for tests/triton_emu/test_triton_choice.py: ``tl.dot`` with and without an
explicit input precision, fp16 accumulators, max_num_imprecise_acc."""
import triton
import triton.language as tl


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
               IMP: tl.constexpr, PREC: tl.constexpr, OUT16: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a = tl.load(a_ptr + offs_m[:, None] * BK + offs_k[None, :])
    b = tl.load(b_ptr + offs_k[:, None] * BN + offs_n[None, :])
    if OUT16:
        acc = tl.zeros((BM, BN), dtype=tl.float16)
        acc = tl.dot(a, b, acc, out_dtype=tl.float16)
    elif PREC == "default":
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=IMP)
    else:
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=IMP, input_precision=PREC)
    tl.store(c_ptr + offs_m[:, None] * BN + offs_n[None, :], acc.to(tl.float32))
