"""Random operands for a model, in the three families of seed 003 section 3.1.4.

``"normal"``     values from N(0,1) with rare large outliers (N(0,1) + Bernoulli(1e-3) N(0,100)),
                 rounded to the input format;
``"cancel"``     adversarial inputs with a huge condition number: pairs of products that cancel
                 exactly or nearly, wide exponent spread, and C = -(A @ B) so the result is tiny;
``"bitstream"``  uniformly random bit patterns: every code of the format, NaN, infinities,
                 subnormals and extreme exponent spreads included.

One more family, outside ``FAMILIES`` (the GPU steps and the peer comparisons take it; the
differential tests of the three above stay as they are):

``"tiny"``       the corners where the hardware-validated peer MMA-Sim and this project
                 disagree (issue 31): signed zeros in A, B and C (a third of each), products
                 and C near the bottom of the output format (its smallest normals and its
                 subnormals; the inputs' own subnormals where the products cannot get that
                 low), so that nonzero sums round to zero (the sign of a zero result) and zero
                 terms meet tiny ones (the exponent a zero term gets in the alignment).

Used by the differential tests, ``probe.verify`` and ``scripts/validate_hw.py``.
"""
from __future__ import annotations

import torch

from .formats import FORMATS, INT_OF_SIZE, OUT_DTYPES, Format, storage_dtype, value_table
from .spec import Spec
from .tf32 import tf32_round, tf32_truncate

FAMILIES = ("normal", "cancel", "bitstream")
CORNER_FAMILIES = ("tiny",)
ALL_FAMILIES = FAMILIES + CORNER_FAMILIES


def to_format(values: torch.Tensor, fmt: Format) -> torch.Tensor:
    """float64 values -> a tensor holding them in ``fmt`` (RNE; small formats saturate)."""
    dt = storage_dtype(fmt)
    if dt != torch.uint8:
        if fmt.nan_style in ("fn", "fnuz"):  # no infinities: saturate instead of NaN
            values = values.clamp(-fmt.max_finite, fmt.max_finite)
        t = values.to(dt)
        if fmt.container_bits == 32:  # keep tf32/xf32 values representable (RNE to 10 bits)
            t = tf32_round(values.to(torch.float64), "rne")
        return t
    table = value_table(fmt.name)  # codes of fp6/fp4 and fp8-as-codes: nearest code
    finite = torch.isfinite(table)
    idx = torch.arange(table.numel())[finite]
    vals = table[finite]
    d = (values.reshape(-1, 1) - vals.reshape(1, -1)).abs()
    return idx[d.argmin(1)].to(torch.uint8).reshape(values.shape)


def random_codes(fmt: Format, shape, g: torch.Generator) -> torch.Tensor:
    """Uniformly random codes of ``fmt`` in the tensor type emulated_mm takes."""
    dt = storage_dtype(fmt)
    if dt == torch.uint8:
        return torch.randint(0, 1 << fmt.bits, shape, generator=g, dtype=torch.int64).to(torch.uint8)
    nbits = torch.finfo(dt).bits
    if nbits == 64:  # two 32-bit halves (randint cannot span 64 bits)
        hi = torch.randint(-(1 << 31), 1 << 31, shape, generator=g, dtype=torch.int64)
        lo = torch.randint(0, 1 << 32, shape, generator=g, dtype=torch.int64)
        return ((hi << 32) | lo).view(dt)
    raw = torch.randint(-(1 << (nbits - 1)), 1 << (nbits - 1), shape, generator=g,
                        dtype=torch.int64)
    return raw.to(INT_OF_SIZE[nbits // 8]).view(dt)


def _normal(shape, g):
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    out = torch.rand(shape, generator=g, dtype=torch.float64) < 1e-3
    return x + out * torch.randn(shape, generator=g, dtype=torch.float64) * 100


def _scales(spec: Spec, shape, family: str, g: torch.Generator) -> torch.Tensor:
    fmt = FORMATS[spec.scale_format]
    if family == "bitstream":
        codes = torch.randint(0, 256, shape, generator=g, dtype=torch.int64)
    elif fmt.name == "ue8m0":
        codes = 127 + torch.randint(-10, 11, shape, generator=g, dtype=torch.int64)
    else:  # ue4m3: positive, finite, around 1
        codes = torch.randint(0x28, 0x48, shape, generator=g, dtype=torch.int64)
    codes = codes.to(torch.uint8)
    want = getattr(torch, "float8_e8m0fnu", None) if fmt.name == "ue8m0" else torch.float8_e4m3fn
    return codes.view(want) if want is not None else codes


def operands(spec: Spec, M: int, N: int, K: int, family: str, g: torch.Generator,
             batch: tuple = ()) -> dict:
    """Keyword arguments for ``emulated_mm`` (A, B, C, in_format, out_dtype, scales)."""
    if family not in ALL_FAMILIES:
        raise ValueError(f"family must be one of {ALL_FAMILIES}")
    fa, fb, fo = spec.fmt_a, spec.fmt_b, spec.fmt_out
    sa_shape, sb_shape = (*batch, M, K), (*batch, K, N)
    out_dt = OUT_DTYPES[fo.name]
    if family == "tiny":
        A, B, C = _tiny(fa, fb, fo, sa_shape, sb_shape, (*batch, M, N), g)
    elif family == "bitstream":
        A = random_codes(fa, sa_shape, g)
        B = random_codes(fb, sb_shape, g)
        C = random_codes(fo, (*batch, M, N), g)
    else:
        a = _normal(sa_shape, g)
        b = _normal(sb_shape, g)
        if family == "cancel":
            # wide exponent spread, then mirror half of the products so they cancel
            spread = min(12, max(fa.emax, 1), max(fb.emax, 1))
            a = a * torch.exp2(torch.randint(-spread, spread + 1, sa_shape, generator=g).double())
            b = b * torch.exp2(torch.randint(-spread, spread + 1, sb_shape, generator=g).double())
            h = K // 2
            if h:
                perm = torch.randperm(K, generator=g)
                src, dst = perm[:h], perm[h:2 * h]
                a[..., dst] = a[..., src]
                b[..., dst, :] = -b[..., src, :]
        A, B = to_format(a, fa), to_format(b, fb)
        C = None
        if family == "cancel":
            va = _values(A, fa)
            vb = _values(B, fb)
            exact = va @ vb
            C = (-exact + torch.randn(exact.shape, generator=g, dtype=torch.float64) * 1e-3).to(out_dt)
        else:
            C = torch.randn((*batch, M, N), generator=g, dtype=torch.float64).to(out_dt)
    kw = dict(A=A, B=B, C=C, arch=spec, out_dtype=out_dt)
    if fa.torch_dtype is None or fb.torch_dtype is None:
        kw["in_format"] = f"{fa.name},{fb.name}"
    if spec.scaled:
        nblk = -(-K // spec.block_size)
        kw["scale_a"] = _scales(spec, (*batch, M, nblk), family, g)
        kw["scale_b"] = _scales(spec, (*batch, nblk, N), family, g)
    return kw


def _signed_zeros(x: torch.Tensor, share, g: torch.Generator) -> torch.Tensor:
    """``x`` with about ``share`` (a number, or a tensor broadcasting against x) of its entries
    replaced by +0 or -0."""
    z = torch.rand(x.shape, generator=g, dtype=torch.float64) < share
    neg = torch.rand(x.shape, generator=g, dtype=torch.float64) < 0.5
    return torch.where(z, torch.where(neg, -0.0, 0.0), x)


def _around(e_lo: int, e_hi: int, shape, g: torch.Generator) -> torch.Tensor:
    """Random signs times 2^U{e_lo..e_hi} times a fraction in [1, 2)."""
    e = torch.randint(e_lo, e_hi + 1, shape, generator=g).double()
    f = 1 + torch.rand(shape, generator=g, dtype=torch.float64)
    s = torch.where(torch.rand(shape, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
    return s * f * torch.exp2(e)


def _tiny(fa: Format, fb: Format, fo: Format, sa, sb, sc, g: torch.Generator):
    """The ``"tiny"`` family's A, B, C (module docstring).  Each row of A gets its own scale
    (products from below half the output's smallest subnormal up to its smallest normals) and
    its own share of zeros (30 % to 95 %), so that some outputs sum a few tiny terms."""
    lo_a, lo_b = fa.emin - fa.man_bits, fb.emin - fb.man_bits   # smallest subnormals
    eb = max(lo_b, min(fb.emax, (fo.emin - 2) // 2))
    ea = max(lo_a, min(fa.emax, fo.emin - 2 - eb))
    row = (*sa[:-1], 1)
    low = min(2, max(-(fo.man_bits + 4), lo_a + 2 - ea))    # A stays above its subnormals
    shift = torch.exp2(torch.randint(low, 3, row, generator=g).double())
    share = 0.3 + 0.65 * torch.rand(row, generator=g, dtype=torch.float64)
    a = _signed_zeros(_around(ea - 2, ea + 2, sa, g) * shift, share, g)
    b = _signed_zeros(_around(eb - 2, eb + 2, sb, g), 1 / 3, g)
    c = _signed_zeros(_around(fo.emin - fo.man_bits, fo.emin + 1, sc, g), 1 / 3, g)
    return to_format(a, fa), to_format(b, fb), c.to(OUT_DTYPES[fo.name])


def _values(t: torch.Tensor, fmt: Format) -> torch.Tensor:
    if t.dtype == torch.uint8:
        return value_table(fmt.name)[t.long()]
    v = t.to(torch.float64)
    if fmt.container_bits == 32:
        v = tf32_truncate(t).to(torch.float64)
    return torch.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0)
