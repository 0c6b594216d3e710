"""One Triton kernel storing fp32 values as bf16, fp8 e4m3 and fp8 e5m2 (round to nearest
even on the GPU; tests/triton_emu/test_triton_emulate.py)."""
import triton
import triton.language as tl


@triton.jit
def cast_kernel(x_ptr, bf_ptr, e4_ptr, e5_ptr, bz_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    x = tl.load(x_ptr + offs, mask=ok)
    tl.store(bf_ptr + offs, x.to(tl.bfloat16), mask=ok)
    tl.store(e4_ptr + offs, x.to(tl.float8e4nv), mask=ok)
    tl.store(e5_ptr + offs, x.to(tl.float8e5), mask=ok)
    tl.store(bz_ptr + offs, x.to(tl.bfloat16, fp_downcast_rounding="rtz"), mask=ok)
