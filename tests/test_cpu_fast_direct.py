"""fp16 / bf16 / tf32 / fp8 operands go straight from their codes into the vector kernels' planes
(FdpaEngine::fill_direct, no decoded rows): where every row and column is finite and inside
the plane window, for A's rows contiguous along k and B row-major or transposed.  Anything
else decodes as before.  The lanes the vectors hand back then decode their own chunk's codes.

Differential: the fast path gives the scalar path's bits for each fp16 / bf16 / tf32 / xf32
row of the T- and TR-FDPA kernels and every unscaled fp8 row (T, TR / GTR: both formats,
alone and mixed), over the layouts (row-major and transposed A and B, a strided B, a
batch), inputs that keep the direct fill (zeros, cancellation, fp16 outputs that overflow
and hand back every later chunk, tiny products, the window's last exponents, fp16
subnormals) and inputs that leave it (a NaN, an infinity, a bf16 or tf32 exponent outside
the window or subnormal), on every vector ISA.  tests/native/direct_fill.cpp checks the
fills themselves code by code.
"""
import pytest
import torch

import torch_mma_emu as tme
from torch_mma_emu.formats import FORMATS
from torch_mma_emu.registry import ROWS
from helpers import assert_same_bits, fast_path, fdpa_kwargs, mm_on_path, row_id, row_specs, seeded

_probe = tme.spec("sm90", "fp16")
ISAS = [i for i in ("avx512", "avx2") if fast_path(_probe, i).startswith(i + ":")] or [None]
SPECS = [s for s in row_specs() if s.in_format in ("fp16", "bf16", "tf32", "xf32") and s.in_format_b is None
         and s.op in ("t_fdpa", "tr_fdpa")]
# fp8: every unscaled row's two formats, alone and mixed (1-byte codes; the 2-pass rows in
# pass order)
SPECS += [r.first_spec().replace(in_format=fa, in_format_b=fb) for r in ROWS
          if r.formats[0].startswith("fp8") and r.scale_format is None and r.op in ("t_fdpa", "tr_fdpa", "gtr_fdpa")
          for fa, fb in ((r.formats[0], None), (r.formats[1], None), (r.formats[0], r.formats[1]))]
# multi-pass rows with F = 29: their int32 sums overflow and hand chunks with finite results
# back (the hand-back then decodes its pass's k from the codes)
SPECS += [s.replace(F=29) for s in SPECS if s.passes > 1 and s.in_format_b is None]
CASES = ["plain", "zeros", "cancel", "overflow", "tiny", "nan", "inf", "wide", "edge", "sub"]
LAYOUTS = ["rr", "rc", "cr", "rs", "batch"]


def _dtype(name):
    return FORMATS[name].torch_dtype if name.startswith("fp8") else \
        {"fp16": torch.float16, "bf16": torch.bfloat16}.get(name, torch.float32)


def _flip(t, d):  # (torch has no flip of fp8 tensors: their bytes)
    return t.view(torch.uint8).flip(d).view(t.dtype) if t.element_size() == 1 else t.flip(d)


def _operands(spec, case, layout, g):
    dt, dtb = _dtype(spec.in_format), _dtype(spec.in_format_b or spec.in_format)
    od = torch.float16 if spec.out_format == "fp16" else torch.float32
    M, K, N = 19, 3 * 64 + 11, 75
    A = torch.randn(M, K, generator=g)
    B = torch.randn(K, N, generator=g)
    C = torch.randn(M, N, generator=g)
    if case == "zeros":
        A[3] = 0
        B[:, 5] = 0
        A[:, 16:48] = 0
        B[40:80] = -0.0
    if case == "cancel":
        B[:, 1::2] = B[:, ::2][:, : N // 2]
        A[:, 1::2] = -A[:, ::2][:, : K // 2]
    if case == "overflow":  # fp16 outputs: infinities from the first chunks on
        A *= 60
        B *= 60
        C *= 3e4
    if case == "tiny":  # products below fp16's emin beside c = 0 (fp8: sums about it, so
        # fp16 outputs are subnormal in some lanes)
        fp8 = dt.itemsize == 1
        A *= 2.0 ** (-7 if fp8 else -10)
        B *= 2.0 ** (-8 if fp8 else -9)
        C.zero_()
    A, B, C = A.to(dt), B.to(dtb), C.to(od)
    if case == "nan":
        A[5, 7] = float("nan")
    if case == "inf":
        B[9, 3] = float("inf")
    if case == "wide":  # bf16 / tf32: outside the planes' window (fp16: in it)
        A[2, 3] = 2.0 ** -40
        B[4, 6] = 2.0 ** 35
    wide = dt in (torch.bfloat16, torch.float32)
    fa, fb = torch.finfo(dt), torch.finfo(dtb)
    if case == "edge":  # the window's last exponents (fp16 / fp8: the largest, the subnormals)
        A[2, 3] = 2.0 ** -31 if wide else fa.smallest_normal / 2
        A[2, 4] = -(2.0 ** 31) if wide else -fa.max
        B[4, 6] = 2.0 ** 31 if wide else fb.smallest_normal
    if case == "sub":  # bf16 / tf32 subnormals (outside the window), fp16's and fp8's in it
        A[1, 1] = 2.0 ** -130 if wide else fa.smallest_normal / 4
        B[7, 2] = -(2.0 ** -133) if wide else -fb.smallest_normal / 8
    if layout[:1] == "c":
        A = A.t().contiguous().t()
    if layout[1:] == "c":
        B = B.t().contiguous().t()
    if layout == "rs":  # B's columns two apart
        B = torch.stack([B, B], 2).reshape(K, 2 * N)[:, ::2]
    if layout == "batch":
        A = torch.stack([A, _flip(A, 0)])
        B = torch.stack([_flip(B, 1), B])
        C = torch.stack([C, C])
    return fdpa_kwargs(spec, A, B, C)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("spec", SPECS, ids=row_id)
def test_direct_planes_equal_scalar(spec, layout, isa):
    for case in CASES:
        kw = _operands(spec, case, layout, seeded(row_id(spec), case, layout))
        D = mm_on_path(kw, isa)
        R = mm_on_path(kw, "scalar")
        assert_same_bits(D, R, f"{row_id(spec)} {case} {layout} on {isa}")
