"""The public API: shapes, broadcasting, strides, dtypes, errors, autograd, torch.compile."""
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu import reference as ref
from helpers import bits


def rnd(*shape, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


# ---------------------------------------------------------------------------- shapes

def test_is_the_custom_op():
    A, B = rnd(4, 8), rnd(8, 3, seed=1)
    D1 = tme.emulated_mm(A, B, arch="sm90")
    D2 = torch.ops.mma_emu.emulated_mm(A, B, arch="sm90")
    assert torch.equal(bits(D1), bits(D2))
    assert D1.dtype == torch.float32 and D1.shape == (4, 3)


def test_batched_broadcast_matches_loop():
    A = rnd(2, 1, 5, 16)
    B = rnd(3, 16, 4, seed=1)
    C = rnd(5, 1, dtype=torch.float32, seed=2)
    D = tme.emulated_mm(A, B, C, arch="sm80")
    assert D.shape == (2, 3, 5, 4)
    for i in range(2):
        for j in range(3):
            Dij = tme.emulated_mm(A[i, 0], B[j], C.expand(5, 4), arch="sm80")
            assert torch.equal(bits(D[i, j]), bits(Dij))


def test_any_strides():
    A = rnd(16, 12).T  # (12, 16) non-contiguous
    B = rnd(32, 6, seed=1)[::2]  # (16, 6) strided rows
    C = rnd(6, 12, dtype=torch.float32, seed=2).T
    D = tme.emulated_mm(A, B, C, arch="gfx942")
    D2 = tme.emulated_mm(A.contiguous(), B.contiguous(), C.contiguous(), arch="gfx942")
    assert torch.equal(bits(D), bits(D2))


def test_k_zero_gives_c():
    C = rnd(3, 4, dtype=torch.float32)
    D = tme.emulated_mm(torch.zeros(3, 0, dtype=torch.float16),
                        torch.zeros(0, 4, dtype=torch.float16), C, arch="sm70")
    assert torch.equal(bits(D), bits(C))
    # fp16 output: C is rounded to fp16 (RNE) and returned
    D16 = tme.emulated_mm(torch.zeros(3, 0, dtype=torch.float16),
                          torch.zeros(0, 4, dtype=torch.float16), C, arch="sm70",
                          out_dtype=torch.float16)
    assert torch.equal(bits(D16), bits(C.to(torch.float16)))


def test_empty_rows():
    D = tme.emulated_mm(rnd(0, 8), rnd(8, 3), arch="sm90")
    assert D.shape == (0, 3)


def test_fp16_output_and_c_conversion():
    A, B = rnd(4, 16), rnd(16, 4, seed=1)
    C = rnd(4, 4, dtype=torch.float32, seed=2)
    D = tme.emulated_mm(A, B, C, arch="sm80", out_dtype=torch.float16)
    assert D.dtype == torch.float16
    R = ref.mm(tme.spec("sm80", "fp16", torch.float16), A, B, C.to(torch.float16))
    assert torch.equal(bits(D), bits(R))


def test_spec_object_and_custom_spec():
    A, B = rnd(4, 32), rnd(32, 4, seed=1)
    s = tme.spec("hopper", "fp16")
    assert torch.equal(bits(tme.emulated_mm(A, B, arch=s)), bits(tme.emulated_mm(A, B, arch="sm90")))
    wide = s.replace(F=60 - 20 - 10)  # F = 30: more bits kept than Hopper
    assert wide.arch == "custom"
    D = tme.emulated_mm(A, B, arch=wide)
    assert torch.equal(bits(D), bits(ref.mm(wide, A, B)))


def test_aliases():
    A, B = rnd(2, 8), rnd(8, 2, seed=1)
    for alias in ("sm90", "hopper", "H100", "h200"):
        assert torch.equal(bits(tme.emulated_mm(A, B, arch=alias)), bits(tme.emulated_mm(A, B, arch="sm90")))
    assert tme.spec("MI300X", "fp16").arch == "gfx942"
    assert tme.spec("B200", "fp16").arch == "sm100"


def test_tf32_truncates_low_bits():
    A = torch.randn(3, 8)
    B = torch.randn(8, 3)
    A_t = (A.view(torch.int32) & ~0x1FFF).view(torch.float32)
    B_t = (B.view(torch.int32) & ~0x1FFF).view(torch.float32)
    D = tme.emulated_mm(A, B, arch="sm80", in_format="tf32")
    assert torch.equal(bits(D), bits(tme.emulated_mm(A_t, B_t, arch="sm80", in_format="tf32")))
    # fp32 without in_format is the FFMA chain, which is not the same
    assert not torch.equal(bits(D), bits(tme.emulated_mm(A, B, arch="sm80")))


def test_fp4_codes_and_mx_scales():
    g = torch.Generator().manual_seed(3)
    A = torch.randint(0, 16, (4, 64), generator=g, dtype=torch.uint8)
    B = torch.randint(0, 16, (64, 5), generator=g, dtype=torch.uint8)
    sa = torch.randint(120, 134, (4, 2), generator=g, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    sb = torch.randint(120, 134, (2, 5), generator=g, dtype=torch.uint8).view(torch.float8_e8m0fnu)
    D = tme.emulated_mm(A, B, arch="sm100", in_format="fp4_e2m1", scale_a=sa, scale_b=sb)
    s = tme.spec("sm100", "fp4_e2m1", scale_format="ue8m0")
    assert s.op == "gst_fdpa"
    assert torch.equal(bits(D), bits(ref.mm(s, A, B, None, sa, sb)))
    # the other instruction for MXFP4 on Blackwell
    D2 = tme.emulated_mm(A, B, arch="sm100", in_format="fp4_e2m1", scale_a=sa, scale_b=sb,
                         instruction="kind::mxf8f6f4")
    s2 = tme.spec("sm100", "fp4_e2m1", scale_format="ue8m0", instruction="kind::mxf8f6f4")
    assert torch.equal(bits(D2), bits(ref.mm(s2, A, B, None, sa, sb)))


def test_mixed_formats():
    A = rnd(3, 32).to(torch.float8_e4m3fn)
    B = rnd(32, 3, seed=1).to(torch.float8_e5m2)
    s = tme.resolve_spec(A, B, "sm90")
    assert (s.in_format, s.in_format_b) == ("fp8_e4m3", "fp8_e5m2")
    g = torch.Generator().manual_seed(0)
    F6 = torch.randint(0, 64, (32, 3), generator=g, dtype=torch.uint8)
    D = tme.emulated_mm(A, F6, arch="sm100", in_format="fp8_e4m3,fp6_e2m3")
    s2 = tme.spec("sm100", "fp8_e4m3", in_format_b="fp6_e2m3")
    assert torch.equal(bits(D), bits(ref.mm(s2, A, F6)))


# ---------------------------------------------------------------------------- errors

@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(arch="sm99"), ValueError, "unknown arch 'sm99'; supported: sm70"),
    (dict(arch="sm70", dt=torch.bfloat16), ValueError, "no instruction for bf16 inputs; supported"),
    (dict(arch="gfx942", out_dtype=torch.float16), ValueError, "available outputs: fp32"),
    (dict(arch="sm80", out_dtype=torch.bfloat16), TypeError, "not an accumulator type"),
    (dict(arch="sm80", in_format="tf32"), TypeError, "does not fit A of dtype torch.float16"),
    (dict(arch="sm80", c_mode="split"), ValueError, "c_mode must be"),
    (dict(arch=3), TypeError, "arch must be"),
])
def test_bad_arguments(kwargs, exc, match):
    dt = kwargs.pop("dt", torch.float16)
    with pytest.raises(exc, match=match):
        tme.emulated_mm(rnd(2, 4, dtype=dt), rnd(4, 2, dtype=dt), **kwargs)


def test_bad_shapes_and_devices():
    with pytest.raises(ValueError, match="cannot be multiplied"):
        tme.emulated_mm(rnd(2, 4), rnd(5, 2))
    with pytest.raises(ValueError, match="do not broadcast"):
        tme.emulated_mm(rnd(2, 2, 4), rnd(3, 4, 2))
    with pytest.raises(ValueError, match="does not broadcast to the result shape"):
        tme.emulated_mm(rnd(2, 4), rnd(4, 3), rnd(3, 3, dtype=torch.float32))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        tme.emulated_mm(rnd(4), rnd(4, 3))
    with pytest.raises(ValueError, match="different devices"):
        tme.emulated_mm(rnd(2, 4), rnd(4, 2), torch.zeros(2, 2, device="meta"))


def test_bad_codes_and_scales():
    A = torch.full((2, 32), 17, dtype=torch.uint8)  # not an fp4 code
    B = torch.zeros(32, 2, dtype=torch.uint8)
    sa = torch.full((2, 1), 127, dtype=torch.uint8)
    sb = torch.full((1, 2), 127, dtype=torch.uint8)
    with pytest.raises(ValueError, match="not valid fp4_e2m1 codes"):
        tme.emulated_mm(A, B, arch="sm100", in_format="fp4_e2m1", scale_a=sa, scale_b=sb)
    with pytest.raises(TypeError, match="uint8 codes"):
        tme.emulated_mm(A, B, arch="sm100")
    A = torch.zeros(2, 32, dtype=torch.uint8)
    with pytest.raises(ValueError, match="blocks along K"):
        tme.emulated_mm(A, B, arch="sm100", in_format="fp4_e2m1", scale_a=sa.repeat(1, 3),
                        scale_b=sb)
    with pytest.raises(ValueError, match="scales must have shapes"):
        tme.emulated_mm(A, B, arch="sm100", in_format="fp4_e2m1", scale_a=sa[:1], scale_b=sb)
    with pytest.raises(ValueError, match="both scale_a and scale_b"):
        tme.emulated_mm(A, B, arch="sm100", in_format="fp4_e2m1", scale_a=sa)
    with pytest.raises(ValueError, match="no instruction 'kind::mxf4' for fp4_e2m1 -> fp32 with ue4m3"):
        tme.emulated_mm(A, B, arch="sm100", in_format="fp4_e2m1",
                        scale_a=sa.view(torch.float8_e4m3fn).repeat(1, 2),
                        scale_b=sb.view(torch.float8_e4m3fn).repeat(2, 1), instruction="kind::mxf4")
    with pytest.raises(TypeError, match="scales have dtype"):
        tme.emulated_mm(A, B, arch="sm100", in_format="fp4_e2m1", scale_a=sa.float(),
                        scale_b=sb.float())


def test_integer_tensor_rejected():
    with pytest.raises(TypeError, match="allowed: float64"):
        tme.emulated_mm(torch.ones(2, 2, dtype=torch.int32), torch.ones(2, 2, dtype=torch.int32))


def test_sparse_and_nested_rejected():
    a = torch.randn(4, 4, dtype=torch.float16)
    for bad, what in ((a.to_sparse(), "sparse_coo"), (a.to_sparse_csr(), "sparse_csr")):
        with pytest.raises(TypeError, match=f"A must be a dense .*{what}.*to_dense"):
            tme.emulated_mm(bad, a)
        with pytest.raises(TypeError, match=f"C must be a dense .*{what}"):
            tme.emulated_mm(a, a, bad.float() if what == "sparse_coo" else torch.zeros(4, 4).to_sparse_csr())
    nested = torch.nested.nested_tensor([a, a])
    with pytest.raises(TypeError, match="B must be a dense .*nested"):
        tme.emulated_mm(a, nested)


def test_spec_validation():
    with pytest.raises(ValueError, match="F must be in 0..40"):
        tme.spec("sm90", "fp16").replace(F=64)
    with pytest.raises(ValueError, match="op must be one of"):
        tme.Spec(op="nope", in_format="fp16", out_format="fp32")


# ---------------------------------------------------------------------------- autograd

def test_gradcheck_on_exact_fp64_path():
    A = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    B = torch.randn(5, 2, dtype=torch.float64, requires_grad=True)
    C = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b, c: tme.emulated_mm(a, b, c, arch="sm80"), (A, B, C))


def test_backward_products_are_emulated():
    A = rnd(4, 16).requires_grad_()
    B = rnd(16, 3, seed=1).requires_grad_()
    D = tme.emulated_mm(A, B, arch="gfx90a")
    G = rnd(4, 3, dtype=torch.float32, seed=5)
    D.backward(G)
    want_A = tme.emulated_mm(G.to(torch.float16), B.detach().T, arch="gfx90a").to(torch.float16)
    want_B = tme.emulated_mm(A.detach().T, G.to(torch.float16), arch="gfx90a").to(torch.float16)
    assert torch.equal(bits(A.grad), bits(want_A))
    assert torch.equal(bits(B.grad), bits(want_B))


def test_backward_broadcast_reduces():
    A = rnd(4, 8, dtype=torch.float64).requires_grad_()
    B = rnd(3, 8, 2, dtype=torch.float64, seed=1).requires_grad_()
    C = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    tme.emulated_mm(A, B, C, arch="sm90").sum().backward()
    assert A.grad.shape == A.shape and B.grad.shape == B.shape and C.grad.shape == C.shape
    assert torch.allclose(C.grad, torch.full((1, 2), 12.0, dtype=torch.float64))
    assert torch.allclose(A.grad, B.detach().sum(-1).sum(0).expand(4, 8))


# ---------------------------------------------------------------------------- compile

def test_torch_compile_fullgraph_same_bits():
    A, B, C = rnd(8, 32), rnd(32, 8, seed=1), rnd(8, 8, dtype=torch.float32, seed=2)

    def f(a, b, c):
        return torch.relu(tme.emulated_mm(a, b, c, arch="sm90")) * 2

    cf = torch.compile(f, fullgraph=True, backend="eager")
    assert torch.equal(bits(cf(A, B, C)), bits(f(A, B, C)))
    ci = torch.compile(f, fullgraph=True)  # inductor
    assert torch.equal(bits(ci(A, B, C)), bits(f(A, B, C)))


def test_opcheck():
    A, B, C = rnd(4, 16), rnd(16, 4, seed=1), rnd(4, 4, dtype=torch.float32, seed=2)
    torch.library.opcheck(torch.ops.mma_emu.emulated_mm.default, (A, B, C),
                          dict(arch="sm80"), test_utils=("test_schema", "test_faketensor",
                                                         "test_aot_dispatch_dynamic"))
