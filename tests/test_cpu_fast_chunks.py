"""The T-FDPA / TR-FDPA vector kernels' per-chunk shortcuts (issue 41, docs/cpu_fast.md "Per
core"): the zero-operand masks of the planes (Spec.zero_exp: a chunk of A's row or of B's
column holding a zero takes zero_exp into emax), the two-k byte steps of the exponent maximum
(odd L remainders, K not a multiple of L), and the one range test on d = emax - F that sends
results near the ends of fp32 (|c| up to 2^128, sums down to 2^-126) to the core.  Fast ==
scalar == exact reference on every ISA, every FDPA row; zero mismatches allowed."""
import pytest
import torch

from torch_mma_emu import reference as ref
from torch_mma_emu.formats import FORMATS
from torch_mma_emu.inputs import to_format
from torch_mma_emu.registry import ROWS
import torch_mma_emu as tme
from helpers import assert_same_bits, fast_path, fdpa_kwargs, mm_on_path, row_id, seeded

_probe = tme.spec("sm90", "fp16")
ISAS = [i for i in ("avx512", "avx2") if fast_path(_probe, i).startswith(i + ":")]
ROW_SPECS = [r.first_spec() for r in ROWS]
T_ROWS = [s for s in ROW_SPECS if s.op in ("t_fdpa", "st_fdpa", "tr_fdpa", "gtr_fdpa")
          and fast_path(s) != "scalar"]
needs_fast = pytest.mark.skipif(not ISAS, reason="no AVX2 on this CPU: only the scalar path exists")


def _kw(spec, a, b, C):
    fa, fb = FORMATS[spec.in_format], FORMATS[spec.in_format_b or spec.in_format]
    return fdpa_kwargs(spec, to_format(a, fa), to_format(b, fb), C)


def _check(spec, kw, what):
    S = mm_on_path(kw, "scalar")
    for isa in ISAS:
        assert_same_bits(mm_on_path(kw, isa), S, f"fast ({isa}) vs scalar, {what}, {row_id(spec)}")
    R = ref.mm(spec, kw["A"], kw["B"], kw["C"], kw.get("scale_a"), kw.get("scale_b"))
    assert_same_bits(S, R, f"kernel vs reference, {what}, {row_id(spec)}")


def _grid(fmt, x):
    """x rounded to values of fmt (through the format's codes: exact in float64)."""
    from torch_mma_emu.formats import value_table
    c = to_format(x, fmt)
    if c.dtype == torch.uint8:
        return value_table(fmt.name)[c.long()].double()
    if fmt.container_bits == 32:
        return (c.view(torch.int32) & ~0x1FFF).view(torch.float32).double()
    return c.double()


@needs_fast
@pytest.mark.parametrize("zero_exp", [None, 2], ids=["registry", "zexp2"])
@pytest.mark.parametrize("spec", T_ROWS, ids=row_id)
def test_zero_operands_chunk_by_chunk(spec, zero_exp):
    """Zeros in A's rows in some chunks only, in B's columns in others, whole zero chunks,
    beside c = +-0 / tiny / normal; K = 3 L + 5 (a partial last instruction).  The registry's
    zero_exp lies below every c the planes take (fp32: -126, fp16: -14), so a zero operand
    only moves emax with a Spec.zero_exp near the products' exponents (2)."""
    if zero_exp is not None:
        if spec.zero_exp is None:
            pytest.skip("the op takes no zero_exp")
        spec = spec.replace(zero_exp=zero_exp)
    L = spec.L * spec.passes
    M, N, K = 6, 37, 3 * L + 5
    g = seeded(spec.to_string(), "zeros")
    fa, fb = FORMATS[spec.in_format], FORMATS[spec.in_format_b or spec.in_format]
    a = _grid(fa, torch.randn(M, K, generator=g, dtype=torch.float64))
    b = _grid(fb, torch.randn(K, N, generator=g, dtype=torch.float64))
    a[0, :L] = 0.0                       # row 0: a zero first chunk
    a[1, L + 1] = 0.0                    # row 1: one zero in the second chunk
    a[2, 2 * L:3 * L] = 0.0              # row 2: a zero third chunk
    a[3, ::3] = 0.0                      # row 3: zeros in every chunk
    b[:L, 0:5] = 0.0                     # columns 0-4: a zero first chunk
    b[L + 2, 10:20] = 0.0                # columns 10-19: one zero in the second chunk
    b[:, 33] = 0.0                       # column 33: all zero (c alone)
    b[2 * L:3 * L, 34:] = 0.0            # columns 34-36: a zero third chunk
    # rows 4-5 x columns 20-29: products near 2^-27, below zero_exp (fp16 outputs: -19..-21),
    # with c = 0: a zero operand in the chunk raises emax to zero_exp and truncates them
    sgn = lambda t: torch.where(torch.rand(t.shape, generator=g) < 0.5, -1.0, 1.0).double()
    a[4:6] = _grid(fa, sgn(a[4:6]) * (1 + torch.rand(2, K, generator=g).double()) * 2.0 ** -14)
    b[:, 20:30] = _grid(fb, sgn(b[:, 20:30]) * (1 + torch.rand(K, 10, generator=g).double()) * 2.0 ** -13)
    a[5, L] = 0.0                        # row 5: a zero in the second chunk
    b[0, 20:25] = 0.0                    # columns 20-24: a zero in the first chunk
    odt = torch.float16 if spec.out_format == "fp16" else torch.float32
    cv = torch.tensor([0.0, -0.0, 2.0 ** -20, -(2.0 ** -14), 1.5, -3.0, 2.0 ** -126, 0.0])
    C = cv.repeat(M * N // len(cv) + 1)[: M * N].reshape(M, N).to(odt)
    C[4:6] = 0.0
    _check(spec, _kw(spec, a, b, C), "zero operands")


@needs_fast
@pytest.mark.parametrize("spec", T_ROWS, ids=row_id)
def test_results_at_the_ends_of_the_range(spec):
    """c at 2^100 .. 2^127 (fp16 outputs: up to 65504) beside small products (emax - F past the
    vector range: the core), sums that cancel to a few units of the smallest normal, and tiny
    c alone (no nonzero product)."""
    L = spec.L * spec.passes
    M, N, K = 4, 33, 2 * L + 3
    g = seeded(spec.to_string(), "ends")
    fa, fb = FORMATS[spec.in_format], FORMATS[spec.in_format_b or spec.in_format]
    a = _grid(fa, torch.randn(M, K, generator=g, dtype=torch.float64))
    b = _grid(fb, torch.randn(K, N, generator=g, dtype=torch.float64))
    half = spec.out_format == "fp16"
    if half:
        big = torch.tensor([65504.0, -65504.0, 32768.0, 60000.0, -1024.0, 4096.0])
        tiny = torch.tensor([2.0 ** -24, -(2.0 ** -24), 2.0 ** -14, 3 * 2.0 ** -24, 0.0, -(2.0 ** -15)])
    else:
        big = torch.tensor([2.0 ** 127 * 1.99, -(2.0 ** 126), 2.0 ** 121, 2.0 ** 122 * 1.5,
                            -(2.0 ** 100), 3.0e38])
        tiny = torch.tensor([2.0 ** -126, -(2.0 ** -125), 1.5 * 2.0 ** -126, 2.0 ** -149,
                             -(2.0 ** -140), 2.0 ** -100])
    odt = torch.float16 if half else torch.float32
    C = torch.empty(M, N, dtype=torch.float64)
    C[:2] = big.repeat(2 * N // len(big) + 1)[: 2 * N].reshape(2, N)
    C[2:] = tiny.repeat(2 * N // len(tiny) + 1)[: 2 * N].reshape(2, N)
    # rows 2-3: products that cancel within the chunk (a[k+1] = a[k], b[k+1] = -b[k])
    h = K // 2
    a[2:, 1:2 * h:2] = a[2:, 0:2 * h:2]
    b[1:2 * h:2, :] = -b[0:2 * h:2, :]
    a[3] = 0.0  # row 3: no product, c alone (a subnormal c: emax - F below -126)
    _check(spec, _kw(spec, a, b, C.to(odt)), "range ends")


GST_ROWS = [s for s in ROW_SPECS if s.op == "gst_fdpa" and fast_path(s) != "scalar"]


@needs_fast
@pytest.mark.parametrize("zero_exp", [None, -120, 2], ids=["registry", "zexp-120", "zexp2"])
@pytest.mark.parametrize("cancelled", ["keep", "drop"])
@pytest.mark.parametrize("spec", GST_ROWS, ids=row_id)
def test_gst_zero_and_cancelled_groups(spec, cancelled, zero_exp):
    """GST-FDPA's group tests (gst_fdpa.inc): zero groups in A's rows and in B's columns,
    groups whose products cancel (group_keep), zero scales (UE4M3 code 0), tiny scales
    beside tiny c; a zero_exp above -126 (where zero groups are looked for) and the
    registry's (-139: only c = 0 takes it); K = 2 L + G + 3."""
    kw_spec = {"cancelled_group": cancelled}
    if zero_exp is not None:
        kw_spec["zero_exp"] = zero_exp
    spec = spec.replace(**kw_spec)
    L, G = spec.L, spec.G
    M, N, K = 6, 37, 2 * L + G + 3
    g = seeded(spec.to_string(), "gst groups")
    fa, fb = FORMATS[spec.in_format], FORMATS[spec.in_format_b or spec.in_format]
    a = _grid(fa, torch.randn(M, K, generator=g, dtype=torch.float64) * 2)
    b = _grid(fb, torch.randn(K, N, generator=g, dtype=torch.float64) * 2)
    a[0, G:2 * G] = 0.0                          # row 0: a zero group
    a[1, 1:G:2] = a[1, 0:G:2]                    # row 1 x columns 0-9: a cancelling group
    b[1:G:2, 0:10] = -b[0:G:2, 0:10]
    a[1, L + 1:L + G:2] = a[1, L:L + G - 1:2]    # ... and one in the second chunk
    b[L + 1:L + G:2, 0:10] = -b[L:L + G - 1:2, 0:10]
    a[2] = 0.0                                   # row 2: no product (c alone)
    b[2 * G:3 * G, 10:15] = 0.0                  # columns 10-14: a zero group
    b[:, 36] = 0.0                               # column 36: all zero
    odt = torch.float32
    cv = torch.tensor([0.0, -0.0, 2.0 ** -126, -(2.0 ** -123), 1.5, -3.0, 2.0 ** -100, 0.0])
    C = cv.repeat(M * N // len(cv) + 1)[: M * N].reshape(M, N).to(odt)
    kw = _kw(spec, a, b, C)
    sa, sb = kw["scale_a"].view(torch.uint8), kw["scale_b"].view(torch.uint8)
    ue4m3 = spec.scale_format == "ue4m3"
    tiny = 0x08 if ue4m3 else 1                  # the smallest normal scale (2^-6 / 2^-126)
    sa[3:5] = tiny                               # rows 3-4: tiny scales (beside tiny c)
    sb[:, 20:30] = tiny                          # columns 20-29 too
    if ue4m3:
        sa[4, 1] = 0                             # zero scales: the group is a zero term
        sb[2, 25:30] = 0
    _check(spec, kw, f"GST groups ({cancelled}, zero_exp {zero_exp})")
