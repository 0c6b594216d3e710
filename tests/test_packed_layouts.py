"""``tme.emulated_mm`` on torchao's / cuBLAS's layouts (torch_mma_emu/packed_layouts.py):
packed ``float4_e2m1fn_x2`` operands are accepted; swizzled scales, B^T's scales and NVFP4's
global scale get an error that says exactly what to pass (and what is passed then works)."""
from __future__ import annotations

import pytest
import torch

import torch_mma_emu as tme
from helpers import same
from torch_mma_emu.preview.scaled import unpack_fp4, unswizzle

FP4 = torch.float4_e2m1fn_x2


def _codes(*shape, seed=0):
    return torch.randint(0, 16, shape, generator=torch.Generator().manual_seed(seed),
                         dtype=torch.uint8)


def _pack(codes, dim):
    """Two codes per byte along ``dim``, the even-indexed one in the low nibble."""
    c = codes.movedim(dim, -1)
    p = (c[..., 0::2] | (c[..., 1::2] << 4)).movedim(-1, dim).contiguous()
    return p.view(FP4)


def _e8m0(*shape, seed=1):
    return torch.randint(120, 134, shape, generator=torch.Generator().manual_seed(seed),
                         dtype=torch.uint8).view(torch.float8_e8m0fnu)


def test_packed_fp4_operands_give_the_unpacked_codes_bits():
    M, K, N = 8, 64, 6
    a, b = _codes(M, K), _codes(K, N, seed=2)
    sa, sb = _e8m0(M, K // 32), _e8m0(K // 32, N, seed=3)
    want = tme.emulated_mm(a, b, arch="B200", in_format="fp4_e2m1", scale_a=sa, scale_b=sb)
    pa, pb = _pack(a, -1), _pack(b, -2)
    assert same(unpack_fp4(pa, -1), a) and same(unpack_fp4(pb, -2), b)
    got = tme.emulated_mm(pa, pb, arch="B200", scale_a=sa, scale_b=sb)
    assert same(got, want)
    # B as torch._scaled_mm holds it: the transpose of an (N, K/2) contiguous tensor
    pbt = _pack(b.t().contiguous(), -1).t()
    assert same(tme.emulated_mm(pa, pbt, arch="B200", scale_a=sa, scale_b=sb), want)
    with pytest.raises(TypeError, match="packed float4_e2m1fn_x2: tme.emulated_mm unpacks"):
        torch.ops.mma_emu.emulated_mm(pa, pb, None, sa, sb, arch="sm100")


def test_scale_b_in_cublas_layout_says_transpose():
    M, K, N = 8, 64, 6
    a, b = _codes(M, K), _codes(K, N, seed=2)
    sa, sb = _e8m0(M, K // 32), _e8m0(K // 32, N, seed=3)
    with pytest.raises(ValueError, match=r"pass scale_b\.t\(\)"):
        tme.emulated_mm(_pack(a, -1), _pack(b, -2), arch="B200", scale_a=sa,
                        scale_b=sb.t().contiguous())


def _swizzle(s, rows, cols):
    """The inverse of unswizzle: (rows, cols) scales into cuBLAS's padded 128x4 tiles."""
    nr, nc = -(-rows // 128), -(-cols // 4)
    pad = torch.zeros(nr * 128, nc * 4, dtype=torch.uint8)
    pad[:rows, :cols] = s.view(torch.uint8)
    t = pad.view(nr, 4, 32, nc, 4).permute(0, 3, 2, 1, 4).reshape(-1)
    return t.view(s.dtype)


def test_swizzled_scales_say_unswizzle_and_unswizzled_work():
    M, K, N = 130, 64, 20
    a, b = _codes(M, K), _codes(K, N, seed=2)
    sa, sb = _e8m0(M, K // 32), _e8m0(K // 32, N, seed=3)
    want = tme.emulated_mm(a, b, arch="B200", in_format="fp4_e2m1", scale_a=sa, scale_b=sb)
    swa = _swizzle(sa, M, K // 32)
    assert same(unswizzle(swa, M, K // 32), sa)
    with pytest.raises(ValueError, match=r"unswizzle\(scale_a, 130, 2\)"):
        tme.emulated_mm(_pack(a, -1), _pack(b, -2), arch="B200", scale_a=swa, scale_b=sb)
    swb = _swizzle(sb.t().contiguous(), N, K // 32)
    with pytest.raises(ValueError, match=r"unswizzle\(scale_b, 20, 2\)\.t\(\)"):
        tme.emulated_mm(_pack(a, -1), _pack(b, -2), arch="B200", scale_a=sa, scale_b=swb)
    got = tme.emulated_mm(_pack(a, -1), _pack(b, -2), arch="B200",
                          scale_a=unswizzle(swa, M, K // 32),
                          scale_b=unswizzle(swb, N, K // 32).t())
    assert same(got, want)


def test_nvfp4_global_scale_says_multiply_the_result():
    a, b = _pack(_codes(4, 32), -1), _pack(_codes(32, 4, seed=2), -2)
    g = torch.tensor(0.5)
    with pytest.raises(TypeError, match=r"D \* \(global_a \* global_b\)"):
        tme.emulated_mm(a, b, arch="B200", scale_a=g, scale_b=g)


def test_torchao_mx_tensor_operands():
    """torchao's own MXTensor (MXFP4): qdata and scales as torchao holds them."""
    pytest.importorskip("torchao")
    import thirdparty_models  # noqa: F401  (torchvision guard)
    from torchao.prototype.mx_formats.mx_tensor import MXTensor
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(16, 64, generator=g), torch.randn(8, 64, generator=g)
    xa = MXTensor.to_mx(x.bfloat16(), FP4, 32)
    wa = MXTensor.to_mx(w.bfloat16(), FP4, 32)
    assert xa.qdata.dtype == torch.uint8 and xa.qdata.shape == (16, 32)   # packed bytes
    with pytest.raises(TypeError, match=r"pass A\.view\(torch\.float4_e2m1fn_x2\)"):
        tme.emulated_mm(xa.qdata, wa.qdata.t(), arch="B200", scale_a=xa.scale,
                        scale_b=wa.scale.t())
    qa, qw = xa.qdata.view(FP4), wa.qdata.view(FP4)
    with pytest.raises(ValueError, match=r"pass scale_b\.t\(\)"):
        tme.emulated_mm(qa, qw.t(), arch="B200", scale_a=xa.scale, scale_b=wa.scale)
    got = tme.emulated_mm(qa, qw.t(), arch="B200", scale_a=xa.scale, scale_b=wa.scale.t())
    ref = xa.dequantize(torch.float32) @ wa.dequantize(torch.float32).t()
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)
