"""torch_mma_emu.gpu_math: the MUFU bit models against an independent scalar reference
(Python integers, written from the description in mufu.py, not from its code), their tables
against the functions they interpolate, the PTX ISA's special values and error bounds, and
the IEEE-exact instructions against exact rational arithmetic."""
from fractions import Fraction
import math
import struct

import numpy as np
import pytest

from torch_mma_emu import gpu_math
from torch_mma_emu.gpu_math import mufu, tables

F = np.float32
NAN_BITS = 0x7FFFFFFF


def b32(v) -> int:
    return struct.unpack("<I", struct.pack("<f", float(v)))[0]


def f32(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b))[0]


def ev(name, *xs):
    return gpu_math.evaluate(name, *[np.asarray(x, dtype=F) for x in xs])


# -- an independent scalar reference of the three table-driven MUFU ops -------------------
def sq_ref(x: int) -> int:
    """Exact square minus every partial-product bit below column 19."""
    drop = 0
    n = x.bit_length()
    for i in range(n):
        for j in range(i, n):
            if (x >> i) & 1 and (x >> j) & 1:
                col = i + j + (1 if i != j else 0)       # cross terms appear twice: 2^(i+j+1)
                if col < 19:
                    drop += 1 << col
    return x * x - drop


def ex2_ref(x: float) -> float:
    if math.isnan(x):
        return f32(NAN_BITS)
    if x >= 128:
        return math.inf
    if x <= -128:
        return 0.0
    a = Fraction(abs(x))
    i = math.floor(a)
    r = math.floor((a - i) * 2 ** 23)
    n = i
    if math.copysign(1, x) < 0:
        n = -i
        if r:
            r, n = (1 << 23) - 1 - r, n - 1
    c0, c1, c2 = tables.EX2[r >> 17]
    xl = r & ((1 << 17) - 1)
    s = (c0 << 32) + (c1 * xl << 19) + c2 * sq_ref(xl) + (tables.EX2_BIAS >> 30)
    mant = 1 + Fraction((s >> 34) & ((1 << 23) - 1), 1 << 23)
    return 0.0 if n < -126 else float(mant * Fraction(2) ** n)


def rcp_ref(x: float) -> float:
    b = b32(x)
    e, m = (b >> 23) & 0xFF, b & ((1 << 23) - 1)
    if math.isnan(x):
        return f32(NAN_BITS)
    if e == 255:
        return math.copysign(0.0, x)
    if e == 0:
        return math.copysign(math.inf, x)
    c0, c1, c2 = tables.RCP[m >> 16]
    xl = m & 0xFFFF
    s = (c0 << 30) - (c1 * xl << 17) + c2 * (sq_ref(xl << 1) >> 2) + (tables.RCP_BIAS >> 31)
    top = 1
    if not s >> 56:
        top, s = 0, s << 1                     # the result is in [1/2, 1)
    frac = (s >> 33) & ((1 << 23) - 1)
    v = Fraction(2) ** (top - 1) * (1 + Fraction(frac, 1 << 23)) * Fraction(2) ** (127 - e)
    if v < Fraction(2) ** -126:
        v = Fraction(0)
    return math.copysign(float(v), x)


def rsqrt_ref(x: float) -> float:
    b = b32(x)
    e, m = (b >> 23) & 0xFF, b & ((1 << 23) - 1)
    if math.isnan(x) or (x < 0 and e != 0):
        return f32(NAN_BITS)
    if e == 0:
        return math.copysign(math.inf, x)
    if e == 255:
        return 0.0
    k = e - 127
    idx = m >> 17
    if k % 2:
        k, idx = k - 1, idx + 64
    elif m == 0:
        return 2.0 ** (-k // 2)
    c0, c1, c2 = tables.RSQ[idx]
    xl = m & ((1 << 17) - 1)
    s = (c0 << 31) - (c1 * xl << 17) + c2 * sq_ref(xl) + (tables.RSQ_BIAS >> 30)
    frac = ((s << 1) >> 34) & ((1 << 23) - 1)
    return float((Fraction(1, 2) + Fraction(frac, 1 << 24)) * Fraction(2) ** (-k // 2))


def _sample(rng, n):
    """Random bit patterns plus the edges: powers of two and their neighbours, table row
    starts, integers and halves, subnormals, signed zeros, infinities, NaN."""
    xs = list(rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(F))
    for e in list(range(-130, 128, 7)) + [127]:
        for d in (-1, 0, 1):
            xs.append(f32(max(0, b32(2.0 ** e) + d)) if e > -150 else 0.0)
    xs += [1 + k / 64 for k in range(64)] + [-(k + 0.5) for k in range(130)]
    xs += [k / 8 for k in range(-1030, 1030, 13)]
    xs += [1e-40, -1e-40, 0.0, -0.0, math.inf, -math.inf, math.nan, 127.99999, -127.99999,
           -126.0, -126.5, 2.0 ** 126, 2.0 ** 127, 3e38]
    return np.array(xs, dtype=F)


@pytest.mark.parametrize("name,ref", [("ex2.approx.ftz.f32", ex2_ref),
                                      ("rcp.approx.ftz.f32", rcp_ref),
                                      ("rsqrt.approx.ftz.f32", rsqrt_ref)])
def test_mufu_matches_scalar_reference(name, ref):
    x = _sample(np.random.default_rng(7), 3000)
    got = ev(name, x).view(np.uint32)
    want = np.array([b32(ref(float(v))) for v in x], dtype=np.uint32)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(float(x[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]


def test_squarer_drops_the_low_columns_only():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 1 << 17, 2000)
    got = mufu.approx_square(x.astype(np.uint64))
    assert all(int(g) == sq_ref(int(v)) for g, v in zip(got, x))
    assert all(0 <= int(v) ** 2 - int(g) < 10 << 19 for g, v in zip(got, x))


def test_tables_interpolate_their_functions():
    """Each row's c0 is the function at the row's start (26-bit fixed point): a
    transcription error in tables.py shows here."""
    for i, (c0, _, _) in enumerate(tables.EX2):
        assert abs(c0 / 2 ** 25 - 2 ** (i / 64)) < 2 ** -22
    for i, (c0, _, _) in enumerate(tables.RCP):
        assert abs(c0 / 2 ** 26 - 1 / (1 + i / 128)) < 2 ** -22
    for i, (c0, _, _) in enumerate(tables.RSQ):
        m = (1 + (i % 64) / 64) * (2 if i >= 64 else 1)
        assert abs(c0 / 2 ** 26 - 1 / math.sqrt(m)) < 2 ** -22
    assert len(tables.EX2) == 64 and len(tables.RCP) == len(tables.RSQ) == 128


@pytest.mark.parametrize("name,fn,lo,hi,bound", [
    ("ex2.approx.ftz.f32", np.exp2, -125.0, 127.9, 2 ** -22.5),
    ("ex2.approx.f32", np.exp2, -125.0, 127.9, 2 ** -22.5),
    ("rcp.approx.f32", lambda v: 1 / v, 1e-37, 1e37, 2 ** -23),
    ("rsqrt.approx.f32", lambda v: 1 / np.sqrt(v), 1e-37, 1e37, 2 ** -22.9),
    ("sqrt.approx.f32", np.sqrt, 1e-37, 1e37, 2 ** -23),
])
def test_relative_error_within_the_ptx_bound(name, fn, lo, hi, bound):
    rng = np.random.default_rng(11)
    if lo < 0:
        x = rng.uniform(lo, hi, 200_000).astype(F)
    else:
        x = np.exp(rng.uniform(np.log(lo), np.log(hi), 200_000)).astype(F)
    got = ev(name, x).astype(np.float64)
    ref = fn(x.astype(np.float64))
    assert np.max(np.abs(got / ref - 1)) <= bound


def test_div_full_within_two_ulp_and_rcp_within_one():
    rng = np.random.default_rng(5)
    a = (rng.uniform(-2, 2, 200_000) * 2.0 ** rng.integers(-60, 60, 200_000)).astype(F)
    b = (rng.uniform(1, 2, 200_000) * 2.0 ** rng.integers(-60, 60, 200_000)).astype(F)
    got = ev("div.full.f32", a, b).astype(np.float64)
    ref = a.astype(np.float64) / b
    ulp = np.spacing(np.abs(ref).astype(F)).astype(np.float64)
    assert np.max(np.abs(got - ref) / ulp) <= 2
    r = ev("rcp.approx.f32", b).astype(np.float64)
    assert np.max(np.abs(r - 1 / b.astype(np.float64))
                  / np.spacing(np.abs(1 / b).astype(F))) <= 1


@pytest.mark.parametrize("name", ["ex2.approx.ftz.f32", "rcp.approx.ftz.f32",
                                  "rsqrt.approx.ftz.f32", "lg2.approx.f32", "tanh.approx.f32"])
def test_monotone(name):
    x = np.sort(np.random.default_rng(2).uniform(0.01, 100, 300_000).astype(F))
    d = np.diff(ev(name, x))
    assert np.all(d >= 0) or np.all(d <= 0)


INF, NAN = math.inf, math.nan


@pytest.mark.parametrize("name,x,want", [
    # PTX ISA tables of special values (and the MUFU reference for .ftz)
    ("ex2.approx.ftz.f32", [-INF, -0.0, 0.0, INF, 1e-40, -1e-40, 128, -128], [0, 1, 1, INF, 1, 1, INF, 0]),
    ("ex2.approx.f32", [-149.0, -150.0, -126.5, 3.0, -1.0], [2.0 ** -149, 0, None, 8, 0.5]),
    ("rcp.approx.f32", [-INF, -0.0, 0.0, INF, 2.0 ** -127, 2.0 ** 127, 1, 4],
     [-0.0, -INF, INF, 0, 2.0 ** 127, 2.0 ** -127, 1, 0.25]),
    ("rcp.approx.ftz.f32", [2.0 ** -127, -2.0 ** -127, 2.0 ** 127], [INF, -INF, 0]),
    ("rsqrt.approx.f32", [-INF, -1.0, -0.0, 0.0, INF, 4, 2.0 ** -140], [NAN, NAN, -INF, INF, 0, 0.5, 2.0 ** 70]),
    ("rsqrt.approx.ftz.f32", [2.0 ** -140, -2.0 ** -140], [INF, -INF]),
    ("lg2.approx.f32", [0.0, -1.0, INF, 1.0, 2.0 ** -140], [-INF, NAN, INF, 0, -140]),
    ("lg2.approx.ftz.f32", [2.0 ** -140], [-INF]),
    ("sqrt.approx.f32", [-0.0, 0.0, INF, -1.0, 4, 2.0 ** -140], [-0.0, 0, INF, NAN, 2, 2.0 ** -70]),
    ("sin.approx.f32", [-0.0, INF, 0.0], [-0.0, NAN, 0]),
    ("cos.approx.f32", [-0.0, -INF, 1e-40], [1, NAN, 1]),
    ("tanh.approx.f32", [INF, -INF, -0.0], [1, -1, -0.0]),
])
def test_special_values(name, x, want):
    got = ev(name, np.array(x, dtype=F))
    for g, w, xi in zip(got, want, x):
        if w is None:
            continue
        if isinstance(w, float) and math.isnan(w):
            assert b32(g) == NAN_BITS, (name, xi, g)
        else:
            assert b32(g) == b32(w), (name, xi, g, w)


def test_nan_is_canonical_everywhere():
    nan = F(np.nan)
    for name, rec in gpu_math.FUNCTIONS.items():
        got = ev(name, *[nan] * rec.arity)
        assert b32(got) == NAN_BITS, name


def test_ex2_full_range_scales_subnormal_results():
    """ex2.approx.f32 (not .ftz): ptxas halves x < -126 and squares MUFU.EX2's result, so
    results down to 2^-149 survive; .ftz flushes them."""
    x = np.array([-126.5, -140.25, -149.0], dtype=F)
    full, ftz = ev("ex2.approx.f32", x), ev("ex2.approx.ftz.f32", x)
    assert np.all(full > 0) and np.all(ftz == 0)
    half = ev("ex2.approx.ftz.f32", x * F(0.5)).astype(np.float64)
    assert np.array_equal(full, (half * half).astype(F))


def test_div_full_scales_huge_and_tiny_divisors():
    a = np.array([1.0, 3e38, 1e-30, 6.0], dtype=F)
    b = np.array([3e38, 2e38, 1e-40, 3.0], dtype=F)
    got = ev("div.full.f32", a, b)
    assert got[0] > 0 and abs(got[1] - 1.5) < 1e-6 and got[3] == 2.0
    assert abs(float(got[2]) / (float(a[2]) / float(b[2])) - 1) < 2 ** -22
    # div.approx does not scale a huge divisor: 1 / 3e38 underflows through MUFU.RCP
    assert ev("div.approx.f32", F(1), F(3e38)) == 0
    assert ev("div.full.ftz.f32", F(1), F(3e38)) == 0         # the quotient is subnormal


# -- IEEE-exact instructions against exact rationals ---------------------------------------
def round_f32(q: Fraction) -> float:
    """``q`` rounded to the nearest float32, ties to even (subnormals, overflow)."""
    if q == 0:
        return 0.0
    s, q = (-1 if q < 0 else 1), abs(q)
    e = max(math.floor(math.log2(q)), -126)
    while Fraction(2) ** e > q:
        e -= 1
    while Fraction(2) ** (e + 1) <= q:
        e += 1
    e = max(e, -126)
    ulp = Fraction(2) ** (e - 23)
    m = q / ulp
    n = math.floor(m)
    if m - n > Fraction(1, 2) or (m - n == Fraction(1, 2) and n % 2):
        n += 1
    v = n * ulp
    return s * (math.inf if v >= Fraction(2) ** 128 else float(v))


def _adversarial(rng, n):
    """float32 operands built to cancel and to land on rounding ties."""
    a = (rng.uniform(1, 2, n) * 2.0 ** rng.integers(-30, 30, n)).astype(F)
    b = (rng.uniform(1, 2, n) * 2.0 ** rng.integers(-30, 30, n)).astype(F)
    p = a.astype(np.float64) * b
    c = (-p).astype(F)                                       # near-total cancellation
    c[::3] = (p[::3] * rng.uniform(0.5, 2, len(p[::3]))).astype(F)
    c[1::5] = (p[1::5] * 2.0 ** -24).astype(F)               # the product's rounding bit
    return a, b, c


def test_fma_rounds_once():
    rng = np.random.default_rng(9)
    a, b, c = _adversarial(rng, 4000)
    a[:3], b[:3], c[:3] = [1e-20, 3e-30, 1.5], [1e-20, 1e-15, 2.0 ** -140], [-1e-40, 0, 1e-45]
    # 4097 * (2^24 - 4095) = 2^36 + 1: float64 drops the 1 from 2^60 + 2^36 + 1 and leaves
    # a float32 tie, which rounds to even (2^60); rounded once it is 2^60 + 2^37
    a[3], b[3], c[3] = 4097, 2 ** 24 - 4095, 2.0 ** 60
    got = ev("fma.rn.f32", a, b, c)
    want = [round_f32(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)))
            for x, y, z in zip(a, b, c)]
    assert [b32(g) for g in got] == [b32(w) for w in want]
    naive = (a.astype(np.float64) * b + c).astype(F)
    assert np.count_nonzero(naive != got) > 0      # the test can tell double rounding apart


def test_div_sqrt_rn_correctly_rounded():
    rng = np.random.default_rng(4)
    a = rng.integers(0, 2 ** 32, 3000, dtype=np.uint64).astype(np.uint32).view(F)
    b = rng.integers(0, 2 ** 32, 3000, dtype=np.uint64).astype(np.uint32).view(F)
    ok = np.isfinite(a) & np.isfinite(b) & (b != 0)
    a, b = a[ok], b[ok]
    got = ev("div.rn.f32", a, b)
    want = [round_f32(Fraction(float(x)) / Fraction(float(y))) for x, y in zip(a, b)]
    assert [b32(g) for g in got] == [b32(w) if w != 0 else b32(math.copysign(0, x / y))
                                     for w, x, y in zip(want, a, b)]
    pos = np.abs(a)
    s = ev("sqrt.rn.f32", pos)
    for x, g in zip(pos, s):                      # round(sqrt) brackets: g^2 vs x
        q = Fraction(float(x))
        lo, hi = np.nextafter(g, F(0)), np.nextafter(g, F(np.inf))
        mid_lo = (Fraction(float(lo)) + Fraction(float(g))) / 2
        mid_hi = (Fraction(float(hi)) + Fraction(float(g))) / 2
        assert mid_lo ** 2 <= q <= mid_hi ** 2


def test_records_say_what_is_exact():
    f = gpu_math.FUNCTIONS
    for n in ("ex2.approx.f32", "ex2.approx.ftz.f32", "rcp.approx.f32", "rcp.approx.ftz.f32",
              "rsqrt.approx.f32", "div.full.f32", "div.rn.f32", "sqrt.rn.f32", "fma.rn.f32"):
        assert f[n].exact and f[n].evidence
    for n in ("lg2.approx.f32", "sqrt.approx.f32", "sin.approx.f32", "cos.approx.f32",
              "tanh.approx.f32"):
        assert not f[n].exact and n in gpu_math.approximate()
    assert all(r.sass and r.bound for r in f.values())


def test_evaluate_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown instruction 'exp.f32'.*ex2.approx.f32"):
        gpu_math.evaluate("exp.f32", np.float32([1]))
    with pytest.raises(TypeError, match="float32"):
        gpu_math.evaluate("ex2.approx.f32", np.float64([1]))
    with pytest.raises(TypeError, match="takes 2 operand"):
        gpu_math.evaluate("div.full.f32", np.float32([1]))
    with pytest.raises(TypeError, match="takes 1 operand"):
        gpu_math.evaluate("ex2.approx.f32", np.float32([1]), np.float32([1]))
    out = gpu_math.evaluate("div.full.f32", np.ones((2, 3), F), 2.0)      # broadcasts
    assert out.shape == (2, 3) and out.dtype == F and np.all(out == 0.5)
