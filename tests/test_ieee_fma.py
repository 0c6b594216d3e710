"""``gpu_math.ieee.fma`` (fast float64 path, round-to-odd only on float32 midpoints and tiny
sums) against ``fma_odd`` (round-to-odd on every element) and, on a sample, against an exact
``fractions.Fraction`` reference: random bits, normal data and adversarial cases (exact and
near midpoints, subnormals, Inf, NaN, signed zeros, huge exponent spread).  0 mismatches."""
from fractions import Fraction

import numpy as np
import pytest

from torch_mma_emu.gpu_math import ieee


def _bits(x):
    return np.asarray(x, np.float32).view(np.uint32)


def _same(f, o):
    f, o = _bits(f), _bits(o)
    bad = np.flatnonzero(f.ravel() != o.ravel())
    assert bad.size == 0, f"{bad.size} mismatches, first at {bad[:5]}"


def _exact(a, b, c):
    """RN-even float32 of a*b + c from Fractions (finite inputs, finite result)."""
    v = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    if v == 0:
        return np.float32(a) * np.float32(b) + np.float32(c)   # signed zero: IEEE rule
    lo = np.float32(float(v))                        # within one float32 step of v
    cands = {lo, np.nextafter(lo, np.float32(np.inf)), np.nextafter(lo, np.float32(-np.inf))}
    best = min(cands, key=lambda r: (abs(Fraction(float(r)) - v),
                                     int(np.asarray(r).view(np.uint32)) & 1))
    return best


def _adversarial(rng, n):
    """Triples whose exact a*b + c lies on, or one float64 ulp beside, a float32 midpoint."""
    # a*b = m (exact, 24-bit), c = half an ulp of m's float32 grid, plus a tiny tail of
    # either sign from a separate small product term folded into c's low bits.
    a = rng.integers(1 << 23, 1 << 24, n).astype(np.float32)
    b = (rng.integers(1 << 23, 1 << 24, n) | 1).astype(np.float32)
    e = rng.integers(-40, 40, n)
    a = np.ldexp(a, e - 23).astype(np.float32)
    b = np.ldexp(b, -23).astype(np.float32)
    p = a.astype(np.float64) * b.astype(np.float64)
    r = p.astype(np.float32).astype(np.float64)
    # c moves p onto the float32 midpoint above r plus/minus a tail of 2^-k ulp
    ulp = np.spacing(r.astype(np.float32)).astype(np.float64)
    c = (r + ulp / 2 - p).astype(np.float32)
    return a, b, c


@pytest.mark.parametrize("kind", ["bits", "normal", "spread", "adversarial", "tiny"])
def test_fast_fma_equals_round_to_odd(kind):
    rng = np.random.default_rng(["bits", "normal", "spread", "adversarial", "tiny"].index(kind))
    n = 400_000
    if kind == "bits":
        a, b, c = (rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
                   .view(np.float32) for _ in range(3))
    elif kind == "normal":
        a, b, c = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    elif kind == "spread":
        a, b, c = (np.ldexp(rng.standard_normal(n), rng.integers(-150, 128, n))
                   .astype(np.float32) for _ in range(3))
    elif kind == "adversarial":
        a, b, c = _adversarial(rng, n)
        c[::3] = np.nextafter(c[::3], np.float32(np.inf))     # beside the midpoints
        c[1::3] = np.nextafter(c[1::3], np.float32(-np.inf))
    else:                                             # results in or near the subnormals
        a = np.ldexp(rng.standard_normal(n), rng.integers(-80, -60, n)).astype(np.float32)
        b = np.ldexp(rng.standard_normal(n), rng.integers(-80, -60, n)).astype(np.float32)
        c = np.ldexp(rng.integers(-64, 64, n).astype(np.float64), -150).astype(np.float32)
    _same(ieee.fma(a, b, c), ieee.fma_odd(a, b, c))
    _same(ieee.fma(a, b, c, True), ieee.fma_odd(a, b, c, True))


def test_fast_fma_special_values():
    sp = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0 ** -149, -(2.0 ** -149),
                   2.0 ** -126, 3.4028235e38, -3.4028235e38, 2.0 ** -24, 1 + 2.0 ** -23],
                  np.float32)
    a, b, c = (g.ravel() for g in np.meshgrid(sp, sp, sp, indexing="ij"))
    _same(ieee.fma(a, b, c), ieee.fma_odd(a, b, c))
    assert _bits(ieee.fma(-0.0, 1.0, -0.0)) == _bits(np.float32(-0.0))
    assert _bits(ieee.fma(0.0, 1.0, -0.0)) == _bits(np.float32(0.0))
    assert ieee.fma(3.4028235e38, 2.0, -3.4028235e38) == np.float32(3.4028235e38)


def test_fast_fma_double_rounding_cases_against_fractions():
    """Cases where RN53 then RN24 is wrong: the fast path must catch every one."""
    rng = np.random.default_rng(7)
    a, b, c = _adversarial(rng, 3000)
    # nudge c by one float32 step either way on a third each: near-midpoints, not on them
    c[1000:2000] = np.nextafter(c[1000:2000], np.float32(np.inf))
    c[2000:] = np.nextafter(c[2000:], np.float32(-np.inf))
    naive = (a.astype(np.float64) * b + c).astype(np.float32)
    fast = ieee.fma(a, b, c)
    want = np.array([_exact(*t) for t in zip(a, b, c)], np.float32)
    _same(fast, want)
    assert (_bits(naive) != _bits(want)).sum() > 0     # the inputs do hit double rounding
    # subnormal results: 2^-150 + 2^-298-ish lands on the midpoint between 0 and 2^-149
    t = (np.float32(2.0 ** -75), np.float32(2.0 ** -75 + 2.0 ** -98), np.float32(0.0))
    assert _bits(ieee.fma(*t)) == _bits(_exact(*t)) == _bits(np.float32(2.0 ** -149))


def test_fast_fma_broadcasts_scalars_and_large_blocks():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 257)).astype(np.float32)
    g = rng.standard_normal((1, 257)).astype(np.float32)
    _same(ieee.fma(g, x, np.float32(0.5)), ieee.fma_odd(g, x, np.float32(0.5)))
    assert ieee.fma(np.float32(2), np.float32(3), np.float32(1)).shape == ()
    assert ieee.fma(np.float32(2), np.float32(3), np.float32(1)) == 7
