"""torch_mma_emu.triton_kernels in Triton's interpreter (TRITON_INTERPRET=1, CPU tensors):
indexing, masking, batching, strides, C modes and the fp16 accumulator against a float64
product.  The interpreter's arithmetic is NumPy's, not the tensor cores': the bits are
checked on a GPU (tests/test_gpu.py, scripts/validate_hw.py)."""
import importlib
import os

import pytest
import torch

triton = pytest.importorskip("triton")


@pytest.fixture(scope="module", autouse=True)
def interpreter():
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    import triton.runtime.interpreter as ti
    orig = ti._patch_lang_tensor

    def patched(tensor, scope):  # NumPy >= 2.4 refuses int() of a 1-element 1-D array
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    ti._patch_lang_tensor = patched
    import torch_mma_emu.triton_kernels.gemm as gemm
    importlib.reload(gemm)  # @triton.jit decides on interpretation when it decorates
    yield
    ti._patch_lang_tensor = orig
    if old is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = old
    importlib.reload(gemm)


def mm():
    from torch_mma_emu.triton_kernels import gemm
    return gemm.matmul


CASES = [("fp16", torch.float16, None), ("bf16", torch.bfloat16, None),
         ("tf32", torch.float32, "tf32"), ("fp32", torch.float32, "fp32"),
         ("fp8_e4m3", torch.float8_e4m3fn, None), ("fp8_e5m2", torch.float8_e5m2, None)]


def ref(A, B, C):
    R = A.double() @ B.double()
    return R if C is None else R + C.double()


@pytest.mark.parametrize("name,dt,fmt", CASES, ids=[c[0] for c in CASES])
def test_matches_float64_product_with_ragged_edges(name, dt, fmt):
    g = torch.Generator().manual_seed(0)
    A = torch.randn(2, 37, 70, generator=g).to(dt)
    B = torch.randn(2, 70, 45, generator=g).to(dt)
    C = torch.randn(2, 37, 45, generator=g)
    D = mm()(A, B, C, in_format=fmt)
    assert D.shape == (2, 37, 45) and D.dtype == torch.float32
    assert torch.allclose(D.double(), ref(A, B, C), rtol=1e-4, atol=1e-4)


def test_strides_broadcast_and_2d():
    g = torch.Generator().manual_seed(1)
    A = torch.randn(50, 33, generator=g).half().t()          # (33, 50), column-major
    B = torch.randn(3, 50, 20, generator=g).half()[:, :, ::2]  # strided columns
    C = torch.randn(1, 20, generator=g)[:, ::2]               # broadcast over rows and batch
    D = mm()(A.expand(3, 33, 50), B, C)
    assert torch.allclose(D.double(), ref(A, B, C), rtol=1e-4, atol=1e-4)
    D2 = mm()(A, B[0])
    assert D2.shape == (33, 10)
    assert torch.allclose(D2.double(), ref(A, B[0], None), rtol=1e-4, atol=1e-4)


def test_epilogue_and_fp16_accumulator():
    g = torch.Generator().manual_seed(2)
    A = torch.randn(20, 64, generator=g).half()
    B = torch.randn(64, 24, generator=g).half()
    C = torch.randn(20, 24, generator=g).half()
    for mode in ("chain", "epilogue"):
        D = mm()(A, B, C, out_dtype=torch.float16, c_mode=mode)
        assert D.dtype == torch.float16
        assert torch.allclose(D.double(), ref(A, B, C), rtol=2e-2, atol=5e-2)
    D = mm()(A, B, C.float(), c_mode="epilogue")
    assert torch.allclose(D.double(), ref(A, B, C), rtol=1e-4, atol=1e-4)


def test_k_zero_and_empty():
    A = torch.zeros(5, 0).half()
    B = torch.zeros(0, 7).half()
    C = torch.randn(5, 7)
    assert torch.equal(mm()(A, B, C), C)
    assert mm()(torch.zeros(0, 4).half(), torch.zeros(4, 3).half()).shape == (0, 3)


def test_errors():
    A = torch.randn(4, 4)
    with pytest.raises(ValueError, match="in_format"):
        mm()(A, A)
    with pytest.raises(ValueError, match="accumulate"):
        mm()(A.bfloat16(), A.bfloat16(), out_dtype=torch.float16)
    with pytest.raises(ValueError, match="c_mode"):
        mm()(A.half(), A.half(), c_mode="bogus")
    with pytest.raises(ValueError, match="K differs"):
        mm()(A.half(), torch.randn(5, 4).half())
    with pytest.raises(TypeError, match="takes"):
        mm()(A.half(), A.half(), in_format="bf16")


def test_block_k_leaves_no_all_zero_instruction():
    from torch_mma_emu.triton_kernels import block_k_for
    for ik in (8, 16, 32):
        for K in range(1, 300):
            bk = block_k_for(K, ik)
            assert bk in (16, 32, 64) and bk >= ik
            r = K % bk
            if r and bk > max(ik, 16):
                assert -(-r // ik) * ik == bk


def test_native_mm_triton_backend_glue(monkeypatch):
    from torch_mma_emu import native
    monkeypatch.setattr(native, "_need_cuda", lambda *a: None)
    g = torch.Generator().manual_seed(3)
    A = torch.randn(2, 1, 20, 40, generator=g).half()
    B = torch.randn(3, 40, 9, generator=g).half()
    C = torch.randn(9, generator=g)
    for mode in ("chain", "epilogue"):
        D = native.native_mm(A, B, C, backend="triton", c_mode=mode)
        assert D.shape == (2, 3, 20, 9) and D.dtype == torch.float32
        assert torch.allclose(D.double(), ref(A, B, C), rtol=1e-4, atol=1e-4)
    A32 = torch.randn(20, 40, generator=g)
    D = native.native_mm(A32, A32.t(), backend="triton", in_format="tf32")
    assert torch.allclose(D.double(), ref(A32, A32.t(), None), rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match="fp64"):
        native.native_mm(A32.double(), A32.t().double(), backend="triton")


def test_fp8_max_num_imprecise_acc_is_passed_through():
    """The option reaches tl.dot (the interpreter computes in full precision either way; the
    promotion itself is confirmed on a Hopper GPU by scripts/gpu/schedules.py)."""
    g = torch.Generator().manual_seed(3)
    A = torch.randn(16, 128, generator=g).to(torch.float8_e4m3fn)
    B = torch.randn(128, 16, generator=g).to(torch.float8_e4m3fn)
    for imprecise in (None, 32, 128):
        D = mm()(A, B, max_num_imprecise_acc=imprecise, block_k=128)  # <= the dot's K
        assert torch.allclose(D.double(), ref(A, B, None), rtol=1e-4, atol=1e-4)
