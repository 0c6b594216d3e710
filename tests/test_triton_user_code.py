"""torch_mma_emu.triton.emulate used the way users use Triton, beyond the tutorial GEMM of
test_triton_emulate.py: kernels launched from torch.compile'd code, and the edges a user
meets first (each gives the emulated bits or a clear error)."""
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

import torch_mma_emu as tme  # noqa: E402
import torch_mma_emu.triton as tmt  # noqa: E402
from helpers import rnd, same  # noqa: E402


@triton.jit
def _block_mm(a, b, acc):
    return tl.dot(a, b, acc)


@triton.jit
def block_ptr_mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr,
                        BK: tl.constexpr):
    """A GEMM with block pointers, zero padding at the edges and the dot in a helper."""
    pm, pn = tl.program_id(0), tl.program_id(1)
    a_bp = tl.make_block_ptr(a_ptr, shape=(M, K), strides=(K, 1), offsets=(pm * BM, 0),
                             block_shape=(BM, BK), order=(1, 0))
    b_bp = tl.make_block_ptr(b_ptr, shape=(K, N), strides=(N, 1), offsets=(0, pn * BN),
                             block_shape=(BK, BN), order=(1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_bp, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_bp, boundary_check=(0, 1), padding_option="zero")
        acc = _block_mm(a, b, acc)
        a_bp = tl.advance(a_bp, (0, BK))
        b_bp = tl.advance(b_bp, (BK, 0))
    c_bp = tl.make_block_ptr(c_ptr, shape=(M, N), strides=(N, 1), offsets=(pm * BM, pn * BN),
                             block_shape=(BM, BN), order=(1, 0))
    tl.store(c_bp, acc, boundary_check=(0, 1))


def block_ptr_mm(a, b):
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty(M, N)
    grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))  # noqa: E731
    block_ptr_mm_kernel[grid](a, b, c, M, N, K, BM=64, BN=64, BK=32)
    return c


def chain_ref(A, B, arch, bk=32, **kw):
    K = A.shape[1]
    acc = torch.zeros(A.shape[0], B.shape[1])
    for k in range(0, K, bk):
        acc = tme.emulated_mm(A[:, k:k + bk], B[k:k + bk], acc, arch=arch, **kw)
    return acc


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_kernel_launched_from_torch_compile_is_emulated(backend):
    """Without a GPU Dynamo does not know Triton kernels; it used to trace into the
    interpreter (NumPy as torch ops) and fail.  The launch runs eagerly instead."""
    torch._dynamo.reset()
    A, B = rnd(128, 64, dtype=torch.float16, seed=1), rnd(64, 96, dtype=torch.float16, seed=2)
    f = torch.compile(lambda a, b: block_ptr_mm(a, b) * 2, backend=backend)
    with tmt.emulate("sm90") as em:
        C = f(A, B)
    assert same(C, chain_ref(A, B, "sm90") * 2)
    assert list(em.counts) == ["wgmma fp16->fp32"]
